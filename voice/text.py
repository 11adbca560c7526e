"""Splitting a message into sentences so that the first can play while the rest synthesize."""

from __future__ import annotations

import re

# Abbreviations after which a full stop does not end a sentence.
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e approx no fig dept inc ltd co".split()
)
# A sentence ends at . ! ? … (followed by space) or at CJK 。！？ (no space needed).
_CLOSE = r"[\"'”’)\]]"
_BOUNDARY = re.compile(
    rf"(?<=[.!?…])\s+|(?<=[.!?…]{_CLOSE})\s+|(?<=[.!?…]{_CLOSE}{_CLOSE})\s+|(?<=[。！？])\s*|\n\s*\n"
)
_CLAUSE = re.compile(r"(?<=[,;:，、；：])\s*")


def _ends_with_abbreviation(piece: str) -> bool:
    words = piece.rstrip().split()
    if not words or not words[-1].endswith("."):
        return False
    return words[-1][:-1].lower() in _ABBREVIATIONS


def _merge_abbreviations(pieces: list[str]) -> list[str]:
    merged: list[str] = []
    for piece in pieces:
        if merged and _ends_with_abbreviation(merged[-1]):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return merged


def _split_long(sentence: str, max_chars: int) -> list[str]:
    """Cut a sentence longer than ``max_chars`` at clause marks (never inside a word)."""
    if len(sentence) <= max_chars:
        return [sentence]
    parts: list[str] = []
    for clause in (c for c in _CLAUSE.split(sentence) if c.strip()):
        if parts and len(parts[-1]) + len(clause) + 1 <= max_chars:
            parts[-1] = f"{parts[-1]} {clause}"
        else:
            parts.append(clause)
    return parts


def split_sentences(text: str, max_chars: int = 300, first_max_chars: int = 80) -> list[str]:
    """Split ``text`` into sentences in order, none longer than ``max_chars`` where avoidable.

    The first sentence is also cut at clause marks when longer than ``first_max_chars``: the
    first sound waits for its synthesis, the rest is synthesized while it plays.

    >>> split_sentences("Build done. Dr. Smith said: all 3.5 tests pass!")
    ['Build done.', 'Dr. Smith said: all 3.5 tests pass!']
    """
    pieces = [p.strip() for p in _BOUNDARY.split(text) if p and p.strip()]
    sentences = _merge_abbreviations(pieces)
    if sentences:
        sentences[:1] = _split_long(sentences[0], min(max_chars, first_max_chars))
    return [part.strip() for s in sentences for part in _split_long(s, max_chars)]
