"""An OpenAI-wire embeddings client: ``POST <base>/embeddings`` to any server (ours:
``workbench embed-server``), with batching and a dimension check. With ``send_input_type``
it says what it sends (``"input_type": "query"`` for a search, ``"passage"`` for stored
text), so that a server running a model trained with both (multilingual-e5-small) embeds each
as it should; servers that do not know the field may refuse it, hence off by default."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import httpx
import numpy as np
from numpy.typing import NDArray

from workbench.embedding.base import normalise
from workbench.embedding.models import E5_KEYWORD_WEIGHT, E5_SIMILARITY_BASELINE, is_e5
from workbench.errors import DimensionMismatch, EmbedderError

log = logging.getLogger("workbench.embedding.compat")


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
        send_input_type: bool = False,
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
        self._send_input_type = send_input_type
        # a served E5 is fused as the local one is (see the search engine)
        if is_e5(model):
            self.similarity_baseline = E5_SIMILARITY_BASELINE
            self.keyword_weight = E5_KEYWORD_WEIGHT
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout, headers=headers)

    def probe(self) -> None:
        """Embed one text to check the server answers with vectors of the configured size."""
        self.embed(["dimension probe"])

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Stored text (``input_type`` ``passage`` when sent)."""
        return self._embed(texts, "passage")

    def embed_queries(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """What a search asks (``input_type`` ``query`` when sent)."""
        return self._embed(texts, "query")

    def _embed(self, texts: Sequence[str], kind: str) -> NDArray[np.float32]:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        parts = [
            self._embed_batch(texts[i : i + self._batch_size], kind)
            for i in range(0, len(texts), self._batch_size)
        ]
        return np.vstack(parts)

    def _embed_batch(self, texts: list[str], kind: str = "passage") -> NDArray[np.float32]:
        url = f"{self.base_url}/embeddings"
        body: dict[str, Any] = {"input": texts, "model": self.model, "encoding_format": "float"}
        if self._send_dimensions:
            body["dimensions"] = self.dimensions
        if self._send_input_type:
            body["input_type"] = kind
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

    def _parse(self, payload: dict[str, Any], expected: int, url: str) -> NDArray[np.float32]:
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
