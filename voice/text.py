"""Splitting a message into sentences, and into the chunks that are synthesized one by one.

``plan_chunks`` is the streaming plan: every sentence is a chunk, except that a short head is
cut off the first sentence (at a clause mark, before a linking word, or after a few words; never
inside a word) so that the first sound only waits for a few words' synthesis. Each chunk says
what boundary follows it; ``voice.speech`` turns that into a pause.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# Abbreviations after which a full stop does not end a sentence.
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e approx no fig dept inc ltd co".split()
)
# A sentence ends at . ! ? … (followed by space) or at CJK 。！？ (no space needed).
_CLOSE = r"[\"'”’)\]]"
_BOUNDARY = re.compile(
    rf"(?<=[.!?…])\s+|(?<=[.!?…]{_CLOSE})\s+|(?<=[.!?…]{_CLOSE}{_CLOSE})\s+|(?<=[。！？])\s*|\n\s*\n"
)
_CLAUSE_MARKS = ",;:，、；："
_CLAUSE = re.compile(rf"(?<=[{_CLAUSE_MARKS}])\s*")
# English words a phrase naturally starts with: linking words and the auxiliary verbs that open
# a predicate. Cutting just before one keeps both halves whole phrases ("The nightly build
# finished | without errors.", "Version 3.5 of the tool | is out.").
_PHRASE_STARTS = frozenset(
    """and but or nor so yet because since although though while when whenever where after
    before until unless if than that which who whom whose with without within for from to into
    onto in on at by of about over under through during against between among via per
    is are was were has have had will would can could should may might must does did""".split()
)
_MIN_CLAUSE_WORDS = 2  # "Hello world, | how are you?" is a natural head

Boundary = Literal["sentence", "clause", "word"]


@dataclass(frozen=True)
class Chunk:
    """One piece of text synthesized in one engine call, and the boundary that follows it."""

    text: str
    ends: Boundary = "sentence"


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


def _whole_sentences(text: str) -> list[str]:
    pieces = [p.strip() for p in _BOUNDARY.split(text) if p and p.strip()]
    return _merge_abbreviations(pieces)


def split_sentences(text: str, max_chars: int = 300) -> list[str]:
    """Split ``text`` into sentences in order, none longer than ``max_chars`` where avoidable.

    >>> split_sentences("Build done. Dr. Smith said: all 3.5 tests pass!")
    ['Build done.', 'Dr. Smith said: all 3.5 tests pass!']
    """
    return [part.strip() for s in _whole_sentences(text) for part in _split_long(s, max_chars)]


def _word(token: str) -> str:
    return token.strip("\"'“”‘’()[]").lower()


def split_head(
    sentence: str, min_words: int = 3, max_words: int = 6, min_rest_words: int = 2
) -> list[str]:
    """Cut a short head off ``sentence`` so that it can be synthesized (and heard) first.

    Returns [head, rest], or [sentence] when it is too short to be worth a second engine call
    (the rest keeps at least ``min_rest_words`` words). The cut goes, in order of preference:
    after the first clause mark within the first ``max_words`` words (and after two at least);
    before the first word that starts a phrase ("and", "without", "to", "is", ...) with
    ``min_words`` to ``max_words`` words in front; else, when at least as many words follow,
    after ``max_words`` words (a blind cut only where it halves the first sound's wait at
    least). Never inside a word. Text written without spaces (Chinese, Japanese) is cut only at
    a clause mark.

    >>> split_head("The nightly build finished without errors.")
    ['The nightly build finished', 'without errors.']
    """
    words = sentence.split()
    if len(words) == 1:
        return _split_head_unspaced(sentence)
    last = min(max_words, len(words) - min_rest_words)
    at_clause = (n for n in range(_MIN_CLAUSE_WORDS, last + 1) if words[n - 1][-1] in _CLAUSE_MARKS)
    cut = next(at_clause, None)
    if cut is None and last >= min_words:
        at_phrase = (n for n in range(min_words, last + 1) if _word(words[n]) in _PHRASE_STARTS)
        cut = next(at_phrase, last if len(words) - last >= last else None)
    if cut is None:
        return [sentence]
    return [" ".join(words[:cut]), " ".join(words[cut:])]


def split_first(sentence: str, growth: float = 1.5, min_words: int = 3) -> list[str]:
    """The first sentence as a short head (:func:`split_head`) and then pieces that grow by
    at most ``growth`` times the previous piece's words.

    Each piece is synthesized while the one before it plays. With a real-time factor below
    1/``growth`` the next piece is ready before the previous one ends, so a long first sentence
    does not stop for seconds after its head. Cuts prefer the last clause mark, then the last
    word that starts a phrase, within the allowed length.

    >>> split_first("The nightly build finished without errors.")
    ['The nightly build finished', 'without errors.']
    """
    parts = split_head(sentence)
    if len(parts) == 1 or len(sentence.split()) == 1:
        return parts
    pieces, rest = [parts[0]], parts[1].split()
    previous = len(parts[0].split())
    while len(rest) > int(previous * growth):
        limit = max(min_words, int(previous * growth))
        cut = None
        # a natural cut that lets the pieces grow, else any natural cut, else a blind one
        for window in (range(max(min_words, previous), limit + 1), range(min_words, limit + 1)):
            cut = next(
                (n for n in reversed(window) if rest[n - 1][-1] in _CLAUSE_MARKS), None
            ) or next((n for n in reversed(window) if _word(rest[n]) in _PHRASE_STARTS), None)
            if cut:
                break
        cut = cut or limit
        if len(rest) - cut < _MIN_CLAUSE_WORDS:
            break
        pieces.append(" ".join(rest[:cut]))
        rest, previous = rest[cut:], cut
    pieces.append(" ".join(rest))
    return pieces


def _split_head_unspaced(sentence: str, min_chars: int = 4) -> list[str]:
    for mark in re.finditer(f"[{_CLAUSE_MARKS}]", sentence):
        head, rest = sentence[: mark.end()], sentence[mark.end() :].strip()
        if len(head) >= min_chars and rest:
            return [head, rest]
    return [sentence]


def plan_chunks(text: str, max_chars: int = 300, head: bool = True) -> list[Chunk]:
    """The chunks to synthesize, in order: sentences (cut at clause marks past ``max_chars``),
    the first one cut into a short head and growing pieces (:func:`split_first`) when
    ``head``.

    >>> [c.text for c in plan_chunks("The nightly build finished without errors. Bye.")]
    ['The nightly build finished', 'without errors.', 'Bye.']
    """
    chunks: list[Chunk] = []
    for index, sentence in enumerate(_whole_sentences(text)):
        parts = [p.strip() for p in _split_long(sentence, max_chars)]
        if head and index == 0:
            parts[:1] = split_first(parts[0])
        chunks += [Chunk(part, _boundary_after(part)) for part in parts[:-1]]
        chunks.append(Chunk(parts[-1], "sentence"))
    return chunks


def _boundary_after(part: str) -> Boundary:
    return "clause" if part[-1] in _CLAUSE_MARKS else "word"
