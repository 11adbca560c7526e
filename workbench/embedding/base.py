"""The embedder protocol: ``embed(texts) -> float32 matrix`` (one row a text), unit vectors,
so that a dot product is the cosine similarity; and the checks every embedder shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray

from workbench.errors import InvalidInput

DEFAULT_BATCH = 32


@runtime_checkable
class Embedder(Protocol):
    """What the core needs of an embedder."""

    model: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Return a ``(len(texts), dimensions)`` float32 array of unit vectors."""
        ...


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> NDArray[np.float32]:
    """Vectors for what a search asks. A model trained with separate query and document
    prefixes (E5) has ``embed_queries``; any other embedder embeds queries as it embeds
    stored text."""
    method = getattr(embedder, "embed_queries", None)
    vectors: NDArray[np.float32] = method(texts) if method is not None else embedder.embed(texts)
    return vectors


def normalise(matrix: npt.ArrayLike) -> NDArray[np.float32]:
    """``matrix`` (one vector, or one a row) as float32 unit rows; zero rows stay zero."""
    rows = np.asarray(matrix, dtype=np.float32)
    if rows.ndim == 1:
        rows = rows[None, :]
    norms: NDArray[np.float32] = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return rows / norms


def check_texts(texts: Sequence[object], max_items: int, max_chars: int) -> list[str]:
    """Validate an embedding request's input; raise :class:`InvalidInput` with the reason."""
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, list) or not texts:
        raise InvalidInput("'input' must be a non-empty string or list of strings")
    if len(texts) > max_items:
        raise InvalidInput(f"'input' has {len(texts)} items; at most {max_items} per request")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InvalidInput(f"'input[{i}]' must be a string")
        if not text.strip():
            raise InvalidInput(f"'input[{i}]' is empty")
        if len(text) > max_chars:
            raise InvalidInput(f"'input[{i}]' has {len(text)} characters; at most {max_chars}")
    return list(texts)
