"""Prompt modules: each builds its messages and keeps its response schema beside it.

The system prompts are long, fixed texts placed first so that a provider's prompt cache can
reuse them across episodes; everything that varies goes in the last (user) message.
"""

from datetime import datetime
from typing import Literal, TypedDict, get_args

EntityType = Literal[
    "Person",
    "Organization",
    "Project",
    "Tool",
    "Place",
    "Preference",
    "Event",
    "Concept",
]
# the one list of entity types: extraction asks for them, evaluation's labels use them
ENTITY_TYPES: tuple[str, ...] = get_args(EntityType)
# Integer ranges as enums: grammar engines ignore minimum/maximum but honour enums.
Score = Literal[1, 2, 3, 4, 5]


class EpisodeText(TypedDict):
    """What the extraction prompts show of an episode (a subset of the episode row that
    ingestion reads, ``workbench.ingest.records.EpisodeRow``)."""

    name: str
    body: str
    source: str
    source_description: str
    reference_time: datetime


SCORING_GUIDE = """\
Importance (1-5): how much an assistant serving this user would lose by forgetting it.
  1 trivia, 2 minor detail, 3 useful context (the default), 4 important to the user's work or
  life, 5 critical (identity, health, hard constraints, commitments with deadlines).
Stability (1-5): how long it is likely to stay true.
  1 changes within days (moods, today's plans), 2 weeks, 3 months (the default),
  4 years (employer, home city, long projects), 5 essentially permanent (birthplace, names,
  allergies, completed historical events).
"""

SOURCE_GUIDE = """\
How to read an episode:
- source "text": free notes written by the assistant about its user. "The user", "they" or
  "I" (when the note quotes the user) all mean the user.
- source "message": a conversation transcript, one turn per line, such as "user: ..." and
  "assistant: ...". What the user states about themselves is reliable; what the assistant
  guesses or proposes is not a fact unless the user confirms it. Ignore greetings,
  thanks and small talk.
- source "json": a structured record (for example a calendar entry, a CRM row or a settings
  export). Keys name attributes; values are the information. Ignore ids, hashes, URLs and
  technical metadata unless they name something the user cares about.
- The reference date given with the episode is when it was written: resolve relative dates
  ("yesterday", "next Monday", "since last spring") against it.
- Negations and plans matter: "stopped using X" ends a fact about X; "might switch to Y" is not
  yet a fact about Y; "wants to learn Z" is a goal (a Preference or Concept), not a skill.
- Keep the user's privacy in mind but do not censor: if the text states it, it may be stored.
"""

NAMING_GUIDE = """\
Names:
- Keep one canonical name per real-world thing and reuse it exactly: the full personal name
  for people ("Priya Raman", not "Priya" once the full name is known), the official name for
  organisations and products ("Visual Studio Code" may appear as "VS Code": keep the form the
  text uses most), the city for places unless a more precise place matters.
- Do not fold two different things into one entity because they share a word ("Python" the
  language and "Python 3.12 upgrade" the project are two entities).
- Do not create entities for the assistant itself, for pronouns, for generic roles ("my
  manager" without a name is not an entity; the manager becomes one once named), for
  quantities, dates, durations, prices or file names.
"""
