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

One rule for group names, :func:`group_id` (and :func:`group_ids` for a list, at most
:data:`MAX_GROUP_IDS` a call): every tool, the importer's lines and the CLI check a group name
with it, so no way in stores a name another way cannot name again (``clear_graph`` must be
able to clear every group that exists). A name is 1-128 ASCII letters, digits, ``_``, ``-``,
``.`` and ``:`` starting with a letter or digit; the whole text must match (no trailing
newline, no path such as ``../x``); an empty name is an error, never "every group".
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from typing import TypeGuard

from workbench.errors import InvalidInput

DEFAULT_RELATION = "RELATES_TO"
MAX_RELATION = 80

_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")
_ARTICLES = ("the", "a", "an")
_APOSTROPHES = "'\u2019\u02bc`"
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_ALNUM = re.compile(r"[^0-9A-Za-z]+")

MAX_GROUP_ID = 128
MAX_GROUP_IDS = 100
# the same rule for JSON Schema (ECMA-262: ``$`` is the end of the text, never before a newline)
GROUP_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}$"
_GROUP_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,127}", re.ASCII)
GROUP_ID_RULE = (
    "1-128 characters of letters, digits, '_', '-', '.', ':' starting with a letter or digit"
)


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


def is_group_id(value: object) -> TypeGuard[str]:
    """True when ``value`` is a valid group name (the whole text matches the rule)."""
    return isinstance(value, str) and _GROUP_ID.fullmatch(value) is not None


def group_id(value: object, field: str = "group_id") -> str:
    """``value`` when it is a valid group name, else :class:`InvalidInput` naming ``field``."""
    if not is_group_id(value):
        shown = value[:60] + "..." if isinstance(value, str) and len(value) > 60 else value
        raise InvalidInput(
            f"'{field}' {shown!r} is not valid: {GROUP_ID_RULE} (omit it for the default group)"
        )
    return value


def group_ids(
    values: Sequence[str] | None, field: str = "group_ids", limit: int = MAX_GROUP_IDS
) -> list[str] | None:
    """A list of valid group names, repeats dropped, at most ``limit``; None or [] -> None."""
    if values is None:
        return None
    if isinstance(values, str) or not isinstance(values, list | tuple | set | frozenset):
        raise InvalidInput(f"'{field}' must be a list of strings (group names)")
    if len(values) > limit:
        raise InvalidInput(
            f"'{field}' names {len(values)} groups; at most {limit} are accepted a call "
            "(split the call)"
        )
    return list(dict.fromkeys(group_id(v, field) for v in values)) or None
