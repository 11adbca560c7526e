"""``workbench embed-server``: the OpenAI embeddings wire format on a local model.

``POST /v1/embeddings`` takes ``{"input": str | [str], "model"?, "encoding_format"?: "float" |
"base64", "dimensions"?, "input_type"?: "query" | "passage"}`` and answers ``{"object":
"list", "data": [{"object": "embedding", "index", "embedding"}], "model", "usage":
{"prompt_tokens", "total_tokens"}}``. With ``encoding_format=base64`` each embedding is the
base64 of little-endian float32 bytes, as the OpenAI API sends it. ``input_type`` (as several
hosted embedding APIs name it; ``document`` is taken for ``passage``) says what the texts
are: ``query`` embeds them as what a search asks (multilingual-e5-small's ``query: ``
prefix), ``passage`` (the default) as stored text; a model without the distinction embeds
both alike. ``GET /v1/models`` lists the one model; ``GET /health`` says it is up.

Bad input answers 4xx with the OpenAI error body
``{"error": {"message", "type", "param", "code"}}``; nothing a caller sends reaches a
traceback.
"""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
from litestar import Litestar, MediaType, Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.params import FromPath, RawBody

from serving.asgi import for_litestar
from serving.errors import retry_headers
from serving.logs import RequestContextMiddleware
from workbench.embedding import Embedder, check_texts
from workbench.embedding.base import embed_queries
from workbench.embedding.models import has_tokenizer, load_tokenizer, resolve_local_model
from workbench.errors import EmbedderError, InvalidInput

log = logging.getLogger("service.embed_server")

INPUT_TYPES = {"query": "query", "passage": "passage", "document": "passage"}
DEFAULT_MAX_ITEMS = 512
DEFAULT_MAX_CHARS = 32_000
MAX_BODY_BYTES = 16 * 1024 * 1024


class OpenAIError(Exception):
    """An error answered in the OpenAI shape."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status,
            message,
            type_,
            param,
            code,
        )


def openai_error_body(
    message: str, type_: str, param: str | None, code: str | None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def model_aliases(name: str) -> set[str]:
    """The names a caller may use for the served model."""
    base = name.rstrip("/").rsplit("/", 1)[-1]
    return {name, base, f"sentence-transformers/{base}"}


def parse_request(
    payload: Any, model: str, dimensions: int, max_items: int, max_chars: int
) -> tuple[list[str], str, str]:
    """Validate a request body; return ``(texts, encoding_format, input_type)`` or raise
    OpenAIError."""
    if not isinstance(payload, dict):
        raise OpenAIError(400, "the request body must be a JSON object")
    if "input" not in payload:
        raise OpenAIError(400, "'input' is required", param="input")
    raw = payload["input"]
    if isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
        raise OpenAIError(400, "token arrays are not supported; send strings", param="input")
    try:
        texts = check_texts(raw, max_items=max_items, max_chars=max_chars)
    except InvalidInput as exc:
        raise OpenAIError(400, exc.message, param="input") from None
    requested = payload.get("model")
    if requested is not None and requested not in model_aliases(model):
        raise OpenAIError(
            404,
            f"the model {requested!r} is not served here; this server serves {model!r}",
            param="model",
            code="model_not_found",
        )
    fmt = payload.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise OpenAIError(
            400, "'encoding_format' must be 'float' or 'base64'", param="encoding_format"
        )
    wanted = payload.get("dimensions")
    if wanted is not None and wanted != dimensions:
        raise OpenAIError(
            400,
            f"this model produces {dimensions} dimensions; 'dimensions' "
            f"{wanted!r} is not supported",
            param="dimensions",
        )
    return texts, fmt, input_type(payload.get("input_type"))


def input_type(value: Any) -> str:
    """``query`` or ``passage`` (the default) from a request's ``input_type``."""
    if value is None:
        return "passage"
    if value not in INPUT_TYPES:
        raise OpenAIError(
            400, "'input_type' must be 'query' or 'passage' (or 'document')", param="input_type"
        )
    return INPUT_TYPES[value]


def encode_vector(vector: np.ndarray, fmt: str) -> list[float] | str:
    if fmt == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]


class TokenCounter:
    """Tokens as the model's own tokenizer counts them (``tokenizer.json`` of a local model
    folder, special tokens included), else an estimate of one token a word."""

    def __init__(self, model: str):
        self._tokenizer = None
        try:
            folder = Path(resolve_local_model(model))
            if has_tokenizer(folder):
                self._tokenizer = load_tokenizer(folder)
                self._tokenizer.no_padding()  # count real tokens, not the padded batch
        except Exception as exc:  # noqa: BLE001 - a count is not worth failing start-up
            log.debug("no tokenizer for %s (%s); estimating tokens from words", model, exc)

    def __call__(self, texts: list[str]) -> int:
        if self._tokenizer is not None:
            return sum(len(e.ids) for e in self._tokenizer.encode_batch(texts))
        return sum(max(1, len(t.split())) for t in texts)


def embeddings_response(
    embedder: Embedder, texts: list[str], fmt: str, count: TokenCounter, kind: str = "passage"
) -> dict[str, Any]:
    vectors = embed_queries(embedder, texts) if kind == "query" else embedder.embed(texts)
    tokens = count(texts)
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": encode_vector(v, fmt)}
            for i, v in enumerate(vectors)
        ],
        "model": embedder.model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _handle_error(_request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    headers: dict[str, str] = {}
    if isinstance(exc, OpenAIError):
        status, body = exc.status, openai_error_body(exc.message, exc.type, exc.param, exc.code)
    elif isinstance(exc, EmbedderError):
        status, body = 503, openai_error_body(exc.message, "server_error", None, exc.kind)
        headers = retry_headers(exc)
    elif isinstance(exc, HTTPException) and exc.status_code < 500:
        detail = str(exc.detail)
        if exc.status_code == 413:
            detail = "the request body is larger than this server accepts"
        status = exc.status_code
        body = openai_error_body(detail, "invalid_request_error", None, None)
    else:
        log.error("embedding request failed", exc_info=exc)
        status, body = 500, openai_error_body("internal error", "server_error", None, None)
    return Response(content=body, status_code=status, media_type=MediaType.JSON, headers=headers)


def create_embed_app(
    embedder: Embedder,
    max_items: int = DEFAULT_MAX_ITEMS,
    max_chars: int = DEFAULT_MAX_CHARS,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> Litestar:
    """The embeddings server around one embedder (usually a warmed-up LocalEmbedder)."""
    count = TokenCounter(embedder.model)

    @post("/v1/embeddings", sync_to_thread=True, status_code=200)
    def embeddings(body: RawBody) -> dict[str, Any]:
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise OpenAIError(400, "the request body is not valid JSON") from None
        texts, fmt, kind = parse_request(
            payload, embedder.model, embedder.dimensions, max_items, max_chars
        )
        return embeddings_response(embedder, texts, fmt, count, kind)

    @get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(embedder)]}

    @get("/v1/models/{model_id:path}")
    async def model(model_id: FromPath[str]) -> dict[str, Any]:
        if model_id.lstrip("/") not in model_aliases(embedder.model):
            raise OpenAIError(
                404,
                f"the model {model_id.lstrip('/')!r} is not served here",
                param="model",
                code="model_not_found",
            )
        return _model_card(embedder)

    @get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": embedder.model, "dimensions": embedder.dimensions}

    return Litestar(
        route_handlers=[embeddings, models, model, health],
        exception_handlers={Exception: _handle_error},
        middleware=[for_litestar(RequestContextMiddleware)],
        request_max_body_size=max_body_bytes,
        openapi_config=None,
        logging_config=None,  # serving.logs owns the log format
    )


def _model_card(embedder: Embedder) -> dict[str, Any]:
    return {
        "id": embedder.model,
        "object": "model",
        "created": 0,
        "owned_by": "workbench",
        "dimensions": embedder.dimensions,
    }
