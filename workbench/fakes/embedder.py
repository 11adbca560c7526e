"""A deterministic bag-of-words embedder: texts sharing words get similar vectors.

It satisfies the :class:`~workbench.embedding.Embedder` protocol with real vectors, so stores,
indexes and ranking run unchanged on it; benchmarks and tests use it to measure or check
everything but the model, which takes seconds to load.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from workbench.embedding import normalise


@functools.lru_cache(maxsize=1 << 16)
def _word_hash(word: str) -> int:
    return int(hashlib.blake2b(word.encode(), digest_size=8).hexdigest(), 16)


class HashEmbedder:
    """Deterministic bag-of-words embedder: texts sharing words get similar vectors.

    Not a mock: it satisfies the Embedder protocol with real vectors, so stores, indexes and
    ranking code run unchanged; it only avoids loading the 7-second model in fast tests.
    """

    model = "hash-bow"

    def __init__(self, dimensions: int = 384) -> None:
        self.dimensions = dimensions
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.calls += 1
        rows: list[int] = []
        cols: list[int] = []
        for i, text in enumerate(texts):
            words = re.findall(r"\w+", text.lower())
            rows += [i] * len(words)
            cols += [_word_hash(word) % self.dimensions for word in words]
        # one count for all words (a numpy += per word cost ~1 ms an episode)
        flat = np.asarray(rows, dtype=np.intp) * self.dimensions + np.asarray(cols, dtype=np.intp)
        out = np.bincount(flat, minlength=len(texts) * self.dimensions).astype(np.float32)
        out = out.reshape(len(texts), self.dimensions)
        out[~out.any(axis=1), 0] = 1.0
        return normalise(out)
