"""Prompt 3 of ingestion: the facts (edges) between the episode's entities, classified and
checked against the current facts they may contradict, in one call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from workbench.prompts import SCORING_GUIDE, SOURCE_GUIDE, EpisodeText, Score

PROMPT_NAME = "extract_edges"


class ExtractedEdge(BaseModel):
    source: str = Field(min_length=1, description="Name of the source entity, from the list")
    target: str = Field(min_length=1, description="Name of the target entity, from the list")
    relation: str = Field(min_length=1, max_length=80, description="UPPER_SNAKE_CASE verb")
    fact: str = Field(min_length=1, max_length=1000, description="The fact as a sentence")
    valid_at: str | None = Field(default=None, description="ISO 8601 when it became true")
    invalid_at: str | None = Field(default=None, description="ISO 8601 when it stopped")
    importance: Score = 3
    stability: Score = 3
    invalidates: list[int] = Field(
        default_factory=list,
        description="ids of EXISTING FACTS this fact shows are no longer true",
    )


class ExtractedEdges(BaseModel):
    edges: list[ExtractedEdge] = Field(default_factory=list, max_length=60)


SYSTEM = f"""\
You extract a knowledge graph from notes that an AI assistant keeps about its user. In this
step you state the FACTS the CURRENT EPISODE gives about the listed ENTITIES: each fact is a
directed relation from a source entity to a target entity plus a full sentence.

Rules:
1. Use only entity names from the ENTITIES list, spelled exactly as listed. Every fact has a
   source and a target that differ.
2. relation is a short verb phrase in UPPER_SNAKE_CASE (WORKS_AT, LIVES_IN, USES, PREFERS,
   MANAGES, COLLABORATES_WITH, PART_OF, MOVED_TO, DISLIKES ...). fact is one self-contained
   sentence that is understandable without the episode ("Maria Keller works at Acme as a data
   engineer").
3. valid_at / invalid_at: ISO 8601 dates when the text says or clearly implies when the fact
   started or ended, resolved against the episode's reference date ("last week", "since
   March"); otherwise null. Do not copy the reference date when the text does not date it.
4. EXISTING FACTS are what the graph currently believes. If the episode shows that one of
   them is no longer true (the user moved, changed job, switched tools, a plan was dropped),
   put its id in "invalidates" of the new fact that replaces it. Do not invalidate facts
   that can both be true (using two editors, knowing two people). Do not restate an existing
   fact unless the episode changes it.
5. Classify every fact:
{SCORING_GUIDE}
6. Answer with JSON only, exactly in the requested structure:
   {{"edges": [{{"source": ..., "target": ..., "relation": ..., "fact": ..., "valid_at": null,
   "invalid_at": null, "importance": 1-5, "stability": 1-5, "invalidates": []}}]}}.
   No prose, no code fences, no schema. An episode that states no fact between the listed
   entities gives {{"edges": []}}.
7. One fact per relation: do not split one statement into several near-identical facts, and
   do not merge two different statements ("works at Acme and lives in Berlin" is two facts).
8. Prefer the direction a reader would say: person WORKS_AT organisation, person LIVES_IN
   place, project USES tool, person MANAGES person. Use the same relation name for the same
   kind of link across episodes (always WORKS_AT, never EMPLOYED_BY in one and WORKS_AT in
   another).

{SOURCE_GUIDE}
Example.
ENTITIES: User (Person), Berlin (Place), Munich (Place)
EXISTING FACTS: [1] User LIVES_IN Munich: "The user lives in Munich."
Episode (2025-03-10): "We finally moved to Berlin last month."
Answer: {{"edges": [{{"source": "User", "target": "Berlin", "relation": "LIVES_IN",
  "fact": "The user lives in Berlin.", "valid_at": "2025-02-01", "invalid_at": null,
  "importance": 4, "stability": 4, "invalidates": [1]}}]}}

Second example.
ENTITIES: User (Person), Neovim (Tool), VS Code (Tool), Atlas (Project), DuckDB (Tool)
EXISTING FACTS: [1] User USES VS Code: "The user writes code in VS Code."
  [2] Atlas USES DuckDB: "The Atlas project stores its analytics in DuckDB."
Episode (2025-09-02): "I switched from VS Code to Neovim over the summer. Atlas still runs
on DuckDB."
Answer: {{"edges": [{{"source": "User", "target": "Neovim", "relation": "USES",
  "fact": "The user writes code in Neovim.", "valid_at": "2025-07-01", "invalid_at": null,
  "importance": 3, "stability": 4, "invalidates": [1]}}]}}
(The DuckDB fact is unchanged, so it is not restated.)
"""


def build_messages(
    episode: EpisodeText,
    entities: Sequence[Mapping[str, str]],
    existing: Sequence[Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """``entities``: ``name``, ``entity_type``; ``existing``: fact rows (``source_name``,
    ``relation``, ``target_name``, ``fact``), numbered from 1 in the prompt."""
    entity_lines = "\n".join(f"- {e['name']} ({e['entity_type']})" for e in entities)
    fact_lines = (
        "\n".join(
            f"[{i}] {f['source_name']} {f['relation']} {f['target_name']}: {f['fact']!r}"
            for i, f in enumerate(existing, start=1)
        )
        or "(none)"
    )
    user = (
        f"ENTITIES:\n{entity_lines}\n\nEXISTING FACTS:\n{fact_lines}\n\n"
        f"CURRENT EPISODE ({episode['source']}, {episode['reference_time']:%Y-%m-%d}):\n"
        f"{episode['body']}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
