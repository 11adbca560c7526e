"""Split an episode into passages: short pieces of what was said, kept verbatim.

Pure functions over the episode's body and source (no I/O). A passage is at most
``MAX_CHARS`` characters (a long episode becomes many passages) and records its position in
the episode and, for a conversation, who spoke:

* ``message``: one turn a line, ``Speaker: what they said`` (a line without a ``Name:`` prefix
  continues the turn above it). Up to ``TURNS`` consecutive turns make a passage, each line
  keeping its speaker; a turn longer than a passage is cut at sentence ends, each piece again
  prefixed with its speaker. ``speaker`` is the passage's speakers in the order they first
  speak, joined by ", ".
* ``text``: by paragraphs (blank lines), consecutive short ones packed together; a paragraph
  longer than a passage is cut at sentence ends (and a sentence longer than a passage at
  word boundaries).
* ``json``: the document flattened to one ``key.path[0].leaf: value`` line per leaf, lines
  packed together; a body that is not valid JSON is split as text. A key path shows its last
  ``PATH_PARTS`` parts (keys and indexes; "…" stands for the ones before) and a key at most
  ``KEY_CHARS`` characters (cut with "…"): a path is repeated on every leaf under it, so a
  long key over many leaves would otherwise multiply the body.

**Bounds.** Whatever the source, an episode's passages hold at most ``GROWTH`` times its
body's characters plus ``SLACK``, and number at most one per ``CHARS_PER_PASSAGE``
characters of the body plus ``SLACK_PASSAGES``: past either, :func:`split_episode` refuses
the body (:class:`~workbench.errors.InvalidInput`, naming the bound) rather than drop any of
its text. Text and conversations stay near 1× by construction (a speaker's name of at most
60 characters prefixes a piece of at least 540); only JSON can repeat itself, through its key
paths.
"""

from __future__ import annotations

import json
import re
import uuid as uuidlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from workbench.errors import InvalidInput

__all__ = [
    "Passage",
    "split_episode",
    "passage_rows",
    "passage_uuid",
    "passage_bounds",
    "MAX_CHARS",
    "TURNS",
]

MAX_CHARS = 600  # a passage's longest text
TURNS = 3  # turns a message passage holds at most (chosen on LoCoMo: docs/performance.md)
_SPEAKER = re.compile(r"^\s*([^\s:][^:\n]{0,59}?)\s*:\s+(\S.*)$")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")
_PARAGRAPH = re.compile(r"\n\s*\n")
PATH_PARTS = 8  # the last parts of a JSON key path a line shows
KEY_CHARS = 40  # a JSON key's characters a line shows
GROWTH = 8  # an episode's passages hold at most GROWTH × its body's characters ...
SLACK = 2_000  # ... plus SLACK
CHARS_PER_PASSAGE = 12  # and at most one passage per 12 characters of the body ...
SLACK_PASSAGES = 16  # ... plus 16


@dataclass(frozen=True)
class Passage:
    """One passage of an episode: its position (from 0), speaker(s) when known, and text."""

    position: int
    text: str
    speaker: str | None = None


def split_episode(
    body: str, source: str, max_chars: int = MAX_CHARS, turns: int | None = None
) -> list[Passage]:
    """The passages of an episode's ``body`` of ``source`` ("message", "text", "json"), in
    order (``turns``: a message passage's turns, default :data:`TURNS`); an empty body has
    none."""
    turns = TURNS if turns is None else turns
    if max_chars < 20 or turns < 1:
        raise ValueError("a passage holds at least 20 characters and one turn")
    if source == "message":
        pieces = list(_message_pieces(body, max_chars, turns))
    elif source == "json":
        pieces = _json_pieces(body, max_chars)
    else:
        pieces = [(text, None) for text in _text_pieces(body, max_chars)]
    _check_bounds(body, source, len(pieces), sum(len(text) for text, _ in pieces))
    return [Passage(i, text, speaker) for i, (text, speaker) in enumerate(pieces)]


def passage_bounds(body_chars: int) -> tuple[int, int]:
    """(characters, passages) the passages of a body of ``body_chars`` characters may hold
    at most (see the module doc)."""
    return GROWTH * body_chars + SLACK, body_chars // CHARS_PER_PASSAGE + SLACK_PASSAGES


def _check_bounds(body: str, source: str, count: int, chars: int) -> None:
    most_chars, most_count = passage_bounds(len(body))
    if chars > most_chars or count > most_count:
        raise _refused(body, source, f"{count} passages of {chars} characters")


def _refused(body: str, source: str, made: str) -> InvalidInput:
    most_chars, most_count = passage_bounds(len(body))
    return InvalidInput(
        f"'episode_body' (source {source!r}, {len(body)} characters) would make {made}; "
        f"an episode's passages hold at most {most_chars} characters ({GROWTH}× the body + "
        f"{SLACK}) in at most {most_count} passages. A JSON document whose key paths repeat "
        "on many small leaves exceeds it: send it restructured, split or as source 'text'"
    )


def passage_uuid(episode_uuid: str, position: int) -> str:
    """A passage's uuid: the same for the same episode and position (an episode split again,
    by an import or a retry, names its passages as before)."""
    return str(uuidlib.uuid5(uuidlib.UUID(episode_uuid), f"passage:{position}"))


def passage_rows(episode: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``passages`` rows of an episode (a dict with ``uuid``, ``group_id``, ``body``,
    ``source``, ``reference_time``, ``created_at`` and ``name``, which the rows carry as
    ``episode_name``: the search engine shows it, the table does not hold it)."""
    return [
        {
            "uuid": passage_uuid(episode["uuid"], p.position),
            "episode_uuid": episode["uuid"],
            "episode_name": episode.get("name"),
            "group_id": episode["group_id"],
            "position": p.position,
            "speaker": p.speaker,
            "text": p.text,
            "reference_time": episode["reference_time"],
            "created_at": episode["created_at"],
        }
        for p in split_episode(episode["body"], episode["source"])
    ]


# --- message ------------------------------------------------------------------------------
def turns_of(body: str) -> list[tuple[str | None, str]]:
    """The turns of a conversation: (speaker or None, what was said), one per ``Name: ...``
    line, later lines without a name joined to the turn above."""
    out: list[tuple[str | None, str]] = []
    for line in body.splitlines():
        if not line.strip():
            continue
        match = _SPEAKER.match(line)
        if match:
            out.append((match.group(1), match.group(2).strip()))
        elif out:
            speaker, said = out[-1]
            out[-1] = (speaker, f"{said} {line.strip()}")
        else:
            out.append((None, line.strip()))
    return out


def _message_pieces(body: str, max_chars: int, turns: int) -> Iterator[tuple[str, str | None]]:
    lines: list[tuple[str | None, str]] = []  # (speaker, line) of the passage being filled
    for speaker, said in turns_of(body):
        prefix = f"{speaker}: " if speaker else ""
        for part in _cut(said, max_chars - len(prefix)):
            line = prefix + part
            size = sum(len(t) + 1 for _, t in lines) + len(line)
            if lines and (len(lines) >= turns or size > max_chars):
                yield _joined(lines)
                lines = []
            lines.append((speaker, line))
    if lines:
        yield _joined(lines)


def _joined(lines: list[tuple[str | None, str]]) -> tuple[str, str | None]:
    speakers = list(dict.fromkeys(s for s, _ in lines if s))
    return "\n".join(t for _, t in lines), ", ".join(speakers) or None


# --- text ---------------------------------------------------------------------------------
def _text_pieces(body: str, max_chars: int) -> list[str]:
    units: list[str] = []
    for paragraph in _PARAGRAPH.split(body):
        paragraph = " ".join(paragraph.split())
        if paragraph:
            units.extend(_cut(paragraph, max_chars))
    return _packed(units, max_chars, " ")


def _cut(text: str, max_chars: int) -> list[str]:
    """``text`` in pieces of at most ``max_chars``: whole when it fits, else its sentences
    packed together, a sentence too long cut at word boundaries (a word too long, anywhere)."""
    text = text.strip()
    if len(text) <= max_chars:
        return [text] if text else []
    units: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        if len(sentence) <= max_chars:
            units.append(sentence)
        else:
            units.extend(_words(sentence, max_chars))
    return _packed(units, max_chars, " ")


def _words(text: str, max_chars: int) -> list[str]:
    units: list[str] = []
    for word in text.split():
        units.extend(word[i : i + max_chars] for i in range(0, len(word), max_chars))
    return _packed(units, max_chars, " ")


def _packed(units: list[str], max_chars: int, sep: str) -> list[str]:
    """Consecutive units joined by ``sep`` while they fit in ``max_chars`` (each unit fits)."""
    out: list[str] = []
    for unit in units:
        if out and len(out[-1]) + len(sep) + len(unit) <= max_chars:
            out[-1] = f"{out[-1]}{sep}{unit}"
        else:
            out.append(unit)
    return out


# --- json ---------------------------------------------------------------------------------
def _json_pieces(body: str, max_chars: int) -> list[tuple[str, str | None]]:
    try:
        document = json.loads(body)
    except ValueError:
        return [(t, None) for t in _text_pieces(body, max_chars)]
    lines: list[str] = []
    most, _ = passage_bounds(len(body))
    made = 0
    for path, value in _leaves(document, ()):
        line = f"{_path_text(path)}: {value}" if path else str(value)
        made += len(line)
        if made > most:  # stop early: a refused document is not split whole first
            raise _refused(body, "json", f"more than {most} characters of passages")
        lines.extend(_cut(line, max_chars))
    return [(t, None) for t in _packed(lines, max_chars, "\n")]


def _leaves(value: Any, path: tuple[str | int, ...]) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(key path: keys and indexes, scalar as text) of every leaf, in document order."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaves(child, (*path, str(key)))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _leaves(child, (*path, i))
    elif value is not None and str(value).strip():
        yield path, value if isinstance(value, str) else json.dumps(value)


def _path_text(path: tuple[str | int, ...]) -> str:
    """``key.path[0].leaf``: its last :data:`PATH_PARTS` parts ("…" before them when there
    were more), each key cut to :data:`KEY_CHARS` characters."""
    text = "…" if len(path) > PATH_PARTS else ""
    for part in path[-PATH_PARTS:]:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            key = part if len(part) <= KEY_CHARS else part[: KEY_CHARS - 1] + "…"
            text += f".{key}" if text else key
    return text
