"""A "recorded" LLM: answers extraction prompts with the gold labels of
``data/extraction_labelled.jsonl`` for the episodes it knows (others get empty lists).

With it the sample data runs through the real pipeline offline, so calls and tokens per
episode (prompt sizes are real; completion sizes are those of the gold JSON) are measurable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workbench.fakes.chat_server import message_text, structure_name
from workbench.fakes.rule_llm import episode_text

LABELS = Path(__file__).resolve().parents[2] / "data" / "extraction_labelled.jsonl"


def load(path: Path = LABELS) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class ReplayLLM:
    def __init__(self, labelled: list[dict[str, Any]] | None = None) -> None:
        self.labelled = labelled if labelled is not None else load()

    def _find(self, request: dict[str, Any]) -> dict[str, Any] | None:
        text = episode_text(request).strip()
        for item in self.labelled:
            if item["episode_body"].strip() in text:
                return item
        return None

    def __call__(self, request: dict[str, Any]) -> dict[str, Any] | None:
        name = structure_name(request)
        item = self._find(request)
        if name == "ExtractedEntities":
            ents = item["entities"] if item else []
            return {
                "entities": [
                    {
                        "name": e["name"],
                        "entity_type": e["entity_type"],
                        "summary": e.get("summary", ""),
                        "importance": 3,
                        "stability": 3,
                    }
                    for e in ents
                ]
            }
        if name == "ExtractedEdges":
            listed = message_text(request).rsplit("ENTITIES:", 1)[-1]
            facts = item["facts"] if item else []
            return {
                "edges": [
                    {
                        "source": f["source"],
                        "target": f["target"],
                        "relation": f["relation"],
                        "fact": f["fact"],
                        "importance": 3,
                        "stability": 3,
                        "invalidates": [],
                    }
                    for f in facts
                    if f"- {f['source']} (" in listed and f"- {f['target']} (" in listed
                ]
            }
        if name == "NodeResolutions":
            return {"entity_resolutions": []}
        return None
