"""The embedder protocol: ``embed(texts) -> float32 matrix`` (one row a text), unit vectors,
so that a dot product is the cosine similarity; and the checks every embedder shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from workbench.errors import InvalidInput

DEFAULT_BATCH = 32


@runtime_checkable
class Embedder(Protocol):
    """What the core needs of an embedder."""

    model: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a ``(len(texts), dimensions)`` float32 array of unit vectors."""
        ...


def embed_queries(embedder: Embedder, texts: Sequence[str]) -> np.ndarray:
    """Vectors for what a search asks. A model trained with separate query and document
    prefixes (E5) has ``embed_queries``; any other embedder embeds queries as it embeds
    stored text."""
    method = getattr(embedder, "embed_queries", None)
    return method(texts) if method is not None else embedder.embed(texts)


def normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


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
    return list(texts)  # type: ignore[arg-type]
