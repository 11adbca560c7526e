"""Short system prompts for the local profile (``SVC_KNOWLEDGE_LLM_PROFILE=local``).

The full prompts are long on purpose: a hosted provider caches a long fixed prefix, so its
length costs little there, and the examples and guides buy quality from large models. A small
model on the same machine pays for every token it reads (a first call per prompt before its
server's prefix cache holds it) and, above all, for every token it writes. These keep the
rules that shape the answer, one short example each, and ask for short summaries and facts,
so that replies stay within the profile's token budget. They answer the same response models
as the full prompts (the user message is unchanged).
"""

from __future__ import annotations

from typing import Any

from workbench.prompts import ENTITY_TYPES, extract_edges, extract_entities

MAX_ENTITIES = 12  # asked for in the prompt; the budget below is sized for it
MAX_FACTS = 12

EXTRACT_ENTITIES = f"""\
List the ENTITIES the CURRENT EPISODE mentions: people, organisations, projects, tools,
places, preferences, events, concepts. entity_type is one of: {", ".join(ENTITY_TYPES)}.
The user is "User" unless named. Use the fullest name given. No dates, numbers, pronouns or
generic nouns. Previous episodes are context only. At most {MAX_ENTITIES} entities.
summary: at most 12 words on what this episode says about it.
importance 1-5 (5 = critical: health, identity, deadlines); stability 1-5 (5 = permanent).
Answer JSON only: {{"entities": [{{"name": ..., "entity_type": ..., "summary": ...,
"importance": 3, "stability": 3}}]}}; nothing worth keeping gives {{"entities": []}}.
Example: "Lena moved the billing service to FastAPI." ->
{{"entities": [{{"name": "Lena", "entity_type": "Person", "summary": "Moved the billing
service to FastAPI.", "importance": 3, "stability": 4}}, {{"name": "FastAPI",
"entity_type": "Tool", "summary": "New framework of the billing service.", "importance": 3,
"stability": 4}}]}}
"""

EXTRACT_EDGES = f"""\
State the FACTS the CURRENT EPISODE gives between the listed ENTITIES. Each fact: source and
target names exactly as listed (different), relation in UPPER_SNAKE_CASE (WORKS_AT, LIVES_IN,
USES, PREFERS, MANAGES, PART_OF ...), fact = one short sentence (at most 15 words),
valid_at/invalid_at = ISO dates only when the text dates it, else null. If the episode shows
an EXISTING FACT is no longer true, put its id in "invalidates". Do not restate unchanged
facts. At most {MAX_FACTS} facts. importance and stability 1-5.
Answer JSON only: {{"edges": [{{"source": ..., "target": ..., "relation": ..., "fact": ...,
"valid_at": null, "invalid_at": null, "importance": 3, "stability": 3, "invalidates": []}}]}};
no fact gives {{"edges": []}}.
Example: ENTITIES: User (Person), Berlin (Place). EXISTING FACTS: [1] User LIVES_IN Munich.
Episode: "We moved to Berlin." -> {{"edges": [{{"source": "User", "target": "Berlin",
"relation": "LIVES_IN", "fact": "The user lives in Berlin.", "valid_at": null,
"invalid_at": null, "importance": 4, "stability": 4, "invalidates": [1]}}]}}
"""

SYSTEMS = {
    extract_entities.PROMPT_NAME: EXTRACT_ENTITIES,
    extract_edges.PROMPT_NAME: EXTRACT_EDGES,
}

# The longest valid answer, in tokens, of each prompt under these rules: items times what one
# item costs (names, a 12-15 word text, the keys, scores) plus the envelope. A reply that
# reaches it is cut off (and retried once with twice the budget by the chat model).
ANSWER_TOKENS = {
    extract_entities.PROMPT_NAME: 24 + MAX_ENTITIES * 56,
    extract_edges.PROMPT_NAME: 24 + MAX_FACTS * 80,
}


def compact(prompt_name: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with the short system prompt of ``prompt_name``, when it has one."""
    system = SYSTEMS.get(prompt_name)
    if system is None or not messages or messages[0].get("role") != "system":
        return messages
    return [{"role": "system", "content": system}, *messages[1:]]
