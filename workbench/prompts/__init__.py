"""Prompt modules: each builds its messages and keeps its response schema beside it.

The system prompts are long, fixed texts placed first so that a provider's prompt cache can
reuse them across episodes; everything that varies goes in the last (user) message.
"""

from typing import Literal

ENTITY_TYPES = (
    "Person", "Organization", "Project", "Tool", "Place", "Preference", "Event", "Concept",
)
EntityType = Literal[
    "Person", "Organization", "Project", "Tool", "Place", "Preference", "Event", "Concept",
]
# Integer ranges as enums: grammar engines ignore minimum/maximum but honour enums.
Score = Literal[1, 2, 3, 4, 5]

SCORING_GUIDE = """\
Importance (1-5): how much an assistant serving this user would lose by forgetting it.
  1 trivia, 2 minor detail, 3 useful context (the default), 4 important to the user's work or
  life, 5 critical (identity, health, hard constraints, commitments with deadlines).
Stability (1-5): how long it is likely to stay true.
  1 changes within days (moods, today's plans), 2 weeks, 3 months (the default),
  4 years (employer, home city, long projects), 5 essentially permanent (birthplace, names,
  allergies, completed historical events).
"""
