"""Classify the importance and stability (1–5) of memories that have none, many per call.

Used for memories that did not get a classification inside extraction (imports without
importance/stability, earlier failures) and by the ``classify_memory`` tool.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from workbench.prompts import SCORING_GUIDE, Score

PROMPT_NAME = "classify_memories"
MAX_TEXT_CHARS = 1500


class MemoryClassification(BaseModel):
    index: int = Field(description="The number of the memory in the question")
    importance: Score
    stability: Score


class MemoryClassifications(BaseModel):
    classifications: list[MemoryClassification]


SYSTEM = f"""\
You classify memories that an AI assistant keeps about its user. Each memory is one short text
(an entity with its summary, or a fact). For EVERY numbered memory give two scores:
{SCORING_GUIDE}
Judge each memory on its own text. When unsure, use 3.
Answer with JSON only: {{"classifications": [{{"index": <number>, "importance": 1-5,
"stability": 1-5}}]}} with exactly one entry per memory, in order. No prose, no code fences,
no schema.

Example.
MEMORY 1: User is allergic to penicillin.
MEMORY 2: User had pasta for lunch today.
Answer: {{"classifications": [{{"index": 1, "importance": 5, "stability": 5}},
{{"index": 2, "importance": 1, "stability": 1}}]}}
"""


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_TEXT_CHARS else text[: MAX_TEXT_CHARS - 1] + "…"


def build_messages(texts: list[str]) -> list[dict[str, Any]]:
    """Memories are numbered from 1; the answer's ``index`` refers to these numbers."""
    lines = [f"MEMORY {i}: {_clip(t)}" for i, t in enumerate(texts, start=1)]
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "\n".join(lines)},
    ]
