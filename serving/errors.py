"""Errors map to HTTP here, once.

Every error response has the body ``{"error": {"type", "message", "request_id"}}``:

=================================  ======  =====================================
error                              status  type
=================================  ======  =====================================
``InvalidInput``, bad arguments    400     ``invalid_input``
missing/invalid bearer token       401     ``unauthorized``
foreign ``Origin``, ``Forbidden``   403     ``forbidden``
``NotFound``, unknown path/tool    404     ``not_found``
wrong method                       405     ``method_not_allowed``
``Conflict``                       409     ``conflict``
body over the limit                413     ``payload_too_large``
body not JSON                      415     ``unsupported_media_type``
foreign ``Host`` (DNS rebinding)   421     ``misdirected_request``
over the rate limit                429     ``rate_limited`` (+ ``Retry-After``)
``QueueFull`` (queue at its cap)   429     ``queue_full`` (+ ``Retry-After``)
``LLMError``                       502     its kind (``llm_error`` ...)
``StoreError``/``EmbedderError``   503     its kind (+ ``Retry-After`` when temporary)
``LLMNotConfigured``               503     ``llm_not_configured``
anything else                      500     ``internal_error`` (logged with traceback)
=================================  ======  =====================================

A 4xx says what was wrong; a 5xx never carries a stack trace, only the request id under
which the fault was logged. An error of a condition that passes by itself (the database server
unreachable, the embedder failing, the queue full, the rate limit) carries ``Retry-After`` in
whole seconds: the error's ``retry_after`` (:func:`retry_headers`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from pydantic import ValidationError

from serving.asgi import Send
from serving.logs import REQUEST_ID
from workbench.errors import WorkbenchError
from workbench.safety import scrub

log = logging.getLogger("service.errors")

_HTTP_KINDS = {
    400: "invalid_input",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    421: "misdirected_request",
    429: "rate_limited",
}


def error_payload(kind: str, message: str, retry_after: int | None = None) -> dict[str, Any]:
    """The error body; ``retry_after`` (seconds) only where no ``Retry-After`` header can carry
    it (an MCP tool result)."""
    error: dict[str, Any] = {"type": kind, "message": message, "request_id": REQUEST_ID.get()}
    if retry_after is not None:
        error["retry_after"] = retry_after
    return {"error": error}


def validation_message(errors: Sequence[Mapping[str, Any]], limit: int = 5) -> str:
    """``max_nodes: Input should be less than or equal to 100; query: Field required``."""
    parts = []
    for err in errors[:limit]:
        loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("body", "__root__"))
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    if len(errors) > limit:
        parts.append(f"... and {len(errors) - limit} more")
    return "; ".join(parts) or "invalid arguments"


def _litestar_validation_message(exc: ValidationException) -> str:
    extra = exc.extra if isinstance(exc.extra, list) else []
    parts = []
    for item in extra[:5]:
        if isinstance(item, dict):
            key = item.get("key")
            message = str(item.get("message", ""))
            if key == "data" and message.strip("'\"") == "data":  # no body at all
                return "the request has no body: send the arguments as a JSON object"
            message = message.removeprefix("Value error, ")
            parts.append(f"{key}: {message}" if key and key != "body" else message)
    detail = "; ".join(p for p in parts if p) or str(exc.detail)
    if "JSON" in detail or "decode" in detail.lower():
        return f"the request body is not valid JSON ({detail})"
    return detail


def describe(exc: BaseException) -> tuple[int, str, str]:
    """``(status, type, message)`` for any exception; unknown ones are internal errors. The
    message is scrubbed of secrets (an upstream's error text may echo a key)."""
    status, kind, message = _describe(exc)
    return status, kind, scrub(message) or ""  # a str in, a str out


def _describe(exc: BaseException) -> tuple[int, str, str]:
    if isinstance(exc, WorkbenchError):
        return exc.http_status, exc.kind, exc.message
    if isinstance(exc, ValidationError):
        return 400, "invalid_input", validation_message(exc.errors())
    if isinstance(exc, ValidationException):
        return 400, "invalid_input", _litestar_validation_message(exc)
    if isinstance(exc, HTTPException):
        status = exc.status_code
        kind = _HTTP_KINDS.get(status, "http_error" if status < 500 else "internal_error")
        message = str(exc.detail) if status < 500 else "internal error"
        if status == 413:
            message = "the request body is larger than the limit of this server"
        return status, kind, message
    return 500, "internal_error", "internal error"


def retry_after_of(exc: BaseException) -> int | None:
    """The whole seconds after which a retry may succeed (an error that passes by itself)."""
    seconds = exc.retry_after if isinstance(exc, WorkbenchError) else None
    return max(1, seconds) if seconds is not None else None


def retry_headers(exc: BaseException) -> dict[str, str]:
    """``{"Retry-After": seconds}`` for an error that passes by itself (its ``retry_after``),
    else nothing."""
    seconds = retry_after_of(exc)
    return {"Retry-After": str(seconds)} if seconds is not None else {}


def to_response(exc: BaseException, headers: dict[str, str] | None = None) -> Response[Any]:
    status, kind, message = describe(exc)
    rid = REQUEST_ID.get()
    if status >= 500:
        if status == 500 and not getattr(exc, "relayed", False):
            log.error("unhandled %s (request %s)", type(exc).__name__, rid, exc_info=exc)
            message = f"internal error; see the server log for request id {rid}"
        else:
            log.warning("%s: %s", kind, message)
    headers = {**retry_headers(exc), **(headers or {})}
    if isinstance(exc, HTTPException) and exc.headers:
        headers.update(exc.headers)
    return Response(
        content=error_payload(kind, message),
        status_code=status,
        media_type=MediaType.JSON,
        headers=headers,
    )


def exception_handler(_request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The one Litestar exception handler (registered for ``Exception``)."""
    return to_response(exc)


async def send_error(
    send: Send, status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> None:
    """Answer from a pure ASGI middleware (auth, rate limit) with the same body shape."""
    body = json.dumps(error_payload(kind, message)).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})
