"""Prompt 1 of ingestion: the entities an episode mentions, classified in the same call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

from workbench.prompts import (
    ENTITY_TYPES,
    NAMING_GUIDE,
    SCORING_GUIDE,
    SOURCE_GUIDE,
    EntityType,
    EpisodeText,
    Score,
)

PROMPT_NAME = "extract_entities"


class ExtractedEntity(BaseModel):
    name: str = Field(min_length=1, max_length=200, description="Canonical name as written")
    entity_type: EntityType
    summary: str = Field(
        default="", max_length=600, description="One or two sentences about it from the text"
    )
    importance: Score = 3
    stability: Score = 3


class ExtractedEntities(BaseModel):
    entities: list[ExtractedEntity] = Field(default_factory=list, max_length=40)


SYSTEM = f"""\
You extract a knowledge graph from notes that an AI assistant keeps about its user. Your job in
this step is to list the ENTITIES that the CURRENT EPISODE mentions, so that they can be stored
as long-term memories and later connected by facts.

Rules:
1. Extract people, organisations, projects, tools (software, hardware, services), places,
   preferences (a stable liking or disliking, phrased as a noun phrase such as
   "dark mode" or "vegetarian food"), events (a dated happening such as "PyCon 2025 talk"),
   and concepts (a topic the user works on). Allowed entity_type values:
   {", ".join(ENTITY_TYPES)}.
2. The user of the assistant is an entity named "User" unless the text gives their name; use
   the name when it is given.
3. Use the most complete name the text gives ("Maria Keller", not "Maria", when both appear)
   and keep the original spelling and capitalisation. Do not invent entities that are not
   mentioned; do not extract dates, numbers, pronouns or generic nouns ("the meeting",
   "a bug") as entities.
4. The summary says in one or two sentences what the CURRENT EPISODE tells about the entity.
   Previous episodes are context only: use them to resolve who "she" or "the project" is,
   never extract entities that appear only in them.
5. Classify every entity:
{SCORING_GUIDE}
6. Answer with JSON only, exactly in the requested structure:
   {{"entities": [{{"name": ..., "entity_type": ..., "summary": ..., "importance": 1-5,
   "stability": 1-5}}]}}. No prose, no code fences, no schema. An episode that mentions
   nothing worth remembering gives {{"entities": []}}.

{SOURCE_GUIDE}
{NAMING_GUIDE}
Example.
Episode: "Lena told me she is moving the billing service from Flask to FastAPI at Acme. She
prefers pytest over unittest."
Answer: {{"entities": [
  {{"name": "Lena", "entity_type": "Person", "summary": "Works at Acme on the billing service.",
    "importance": 3, "stability": 4}},
  {{"name": "billing service", "entity_type": "Project",
    "summary": "Acme service being moved from Flask to FastAPI.", "importance": 3,
    "stability": 3}},
  {{"name": "Flask", "entity_type": "Tool", "summary": "Framework the billing service leaves.",
    "importance": 2, "stability": 4}},
  {{"name": "FastAPI", "entity_type": "Tool", "summary": "New framework of the billing service.",
    "importance": 3, "stability": 4}},
  {{"name": "Acme", "entity_type": "Organization", "summary": "Lena's employer.",
    "importance": 3, "stability": 4}},
  {{"name": "pytest", "entity_type": "Tool", "summary": "Lena prefers it over unittest.",
    "importance": 2, "stability": 4}}]}}

Second example (source "message").
Episode: "user: I finally quit Globex, starting at Initech in Lyon next month.
assistant: Congratulations! Shall I update your calendar?
user: yes, and remember I'm allergic to peanuts for the welcome lunch."
Answer: {{"entities": [
  {{"name": "User", "entity_type": "Person",
    "summary": "Left Globex; starts at Initech in Lyon next month; allergic to peanuts.",
    "importance": 4, "stability": 5}},
  {{"name": "Globex", "entity_type": "Organization", "summary": "The user's former employer.",
    "importance": 2, "stability": 4}},
  {{"name": "Initech", "entity_type": "Organization",
    "summary": "The user's new employer from next month.", "importance": 4, "stability": 4}},
  {{"name": "Lyon", "entity_type": "Place", "summary": "Where the user's new job is.",
    "importance": 3, "stability": 4}},
  {{"name": "peanut allergy", "entity_type": "Preference",
    "summary": "The user is allergic to peanuts.", "importance": 5, "stability": 5}}]}}
"""


def build_messages(
    episode: EpisodeText, context: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``context``: the group's earlier episodes (``reference_time``, ``body``), newest first."""
    previous = (
        "\n".join(
            f"- ({c['reference_time']:%Y-%m-%d}) {c['body'][:500]}" for c in reversed(context)
        )
        or "(none)"
    )
    user = (
        f"PREVIOUS EPISODES (context only):\n{previous}\n\n"
        f"CURRENT EPISODE ({episode['source']}, {episode['reference_time']:%Y-%m-%d}, "
        f"name: {episode['name']!r}"
        + (f", source: {episode['source_description']}" if episode["source_description"] else "")
        + f"):\n{episode['body']}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
