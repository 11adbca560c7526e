"""Prompt 2 of ingestion (only when needed): is an extracted entity one we already know?

Exact and normalised names and clear embedding matches are resolved without the LLM; this
prompt is asked only about the ambiguous candidates, all of an episode in one call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

PROMPT_NAME = "resolve_nodes"


class NodeResolution(BaseModel):
    id: int = Field(description="The id of the new entity in the question")
    duplicate_of: int | None = Field(
        default=None, description="The id of the existing entity it is the same as, or null"
    )


class NodeResolutions(BaseModel):
    entity_resolutions: list[NodeResolution]


SYSTEM = """\
You deduplicate a knowledge graph. For each NEW entity you get a list of EXISTING entities
that look similar. Decide whether the new entity is the SAME real-world thing as one of the
existing ones (same person under a shorter or longer name, same tool with another spelling,
same project under an abbreviation). Different things with similar names are NOT duplicates
(two different people called Alex, "Python" the language and "Python 2 migration" the
project). When unsure, answer null.
Answer with JSON only: {"entity_resolutions": [{"id": <new id>, "duplicate_of": <existing id
or null>}]} with exactly one entry per new entity. No prose, no code fences, no schema.
"""


def build_messages(questions: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``questions``: [{"id", "name", "entity_type", "summary", "candidates": [{"id", "name",
    "entity_type", "summary"}]}]."""
    lines = []
    for q in questions:
        lines.append(f"NEW id={q['id']}: {q['name']} ({q['entity_type']}): {q['summary']}")
        for c in q["candidates"]:
            lines.append(
                f"    EXISTING id={c['id']}: {c['name']} ({c['entity_type']}): {c['summary']}"
            )
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]
