"""Names of entities and relations, normalised: one place for the keys ingestion stores and
evaluation compares.

Two name keys, on purpose:

* :func:`name_key` is what ingestion and import deduplicate entities by within a group, and
  it is *stored* (``entities.name_norm``): case, whitespace and punctuation do not matter.
  Changing it would split every existing database's entities from their new mentions, so it
  changes only with a migration that recomputes the column.
* :func:`loose_name_key` is what evaluation compares predicted names with labelled ones by: it
  also drops accents, apostrophes (``O'Brien`` = ``OBrien``) and a leading English article
  (``the``, ``a``, ``an``) when more words follow. A person labelling a set writes "Acme Corp"
  where the model wrote "The ACME-Corp." and both mean the same; for stored keys the looser rule
  would also merge entities a user keeps apart ("The Who" and "Who").

One relation rule, :func:`relation_name`, for both: ``"works at"``, ``"works-at"`` and
``"WorksAt"`` are ``WORKS_AT``; nothing left is ``RELATES_TO``; at most 80 characters.
"""

from __future__ import annotations

import re
import unicodedata

DEFAULT_RELATION = "RELATES_TO"
MAX_RELATION = 80

_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")
_ARTICLES = ("the", "a", "an")
_APOSTROPHES = "'\u2019\u02bc`"
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_ALNUM = re.compile(r"[^0-9A-Za-z]+")


def name_key(name: str) -> str:
    """The stored deduplication key of an entity name: case-, whitespace- and
    punctuation-insensitive."""
    return _SPACE.sub(" ", _PUNCT.sub(" ", name.casefold())).strip()


def loose_name_key(name: str) -> str:
    """The comparison key of evaluation: :func:`name_key`'s rules, and accents, apostrophes
    and a leading article dropped."""
    text = unicodedata.normalize("NFKD", str(name))
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).casefold()
    for ch in _APOSTROPHES:
        text = text.replace(ch, "")
    words = "".join(ch if ch.isalnum() else " " for ch in text).split()
    if len(words) > 1 and words[0] in _ARTICLES:
        words = words[1:]
    return " ".join(words)


def relation_name(relation: str) -> str:
    """``UPPER_SNAKE_CASE`` of a relation, camelCase split; ``RELATES_TO`` when empty."""
    text = _CAMEL.sub("_", str(relation).strip())
    text = _NOT_ALNUM.sub("_", text).strip("_").upper()[:MAX_RELATION].rstrip("_")
    return text or DEFAULT_RELATION
