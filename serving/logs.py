"""Structured logs (one JSON object a line) with request ids, secrets redacted.

* :data:`REQUEST_ID` holds the id of the request being served (a context variable, so it
  follows the request into worker threads started with ``anyio.to_thread``).
* :class:`RequestContextMiddleware` (pure ASGI) takes a well-formed ``X-Request-ID`` from the
  caller or makes one, echoes it in the response and logs one access line per request.
* :func:`setup_logging` installs one handler on the root logger whose formatter redacts every
  registered secret value and anything that looks like a bearer token or API key, in the
  message and in tracebacks alike.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Iterable
from contextvars import ContextVar
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TextIO, TypeAlias

from serving.asgi import ASGIApp, Message, Receive, Scope, Send
from workbench.safety import Redactor

_ExcInfo: TypeAlias = (
    tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
)

REQUEST_ID: ContextVar[str] = ContextVar("workbench_request_id", default="-")
REQUEST_ID_HEADER = "x-request-id"
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")

access_log = logging.getLogger("service.access")


_STANDARD_ATTRS = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "color_message",
    "taskName",
}


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029]")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, request_id, extras, exc."""

    def __init__(self, redactor: Redactor | None = None):
        super().__init__()
        self.redactor = redactor or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
            "request_id": getattr(record, "request_id", None) or REQUEST_ID.get(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and key != "request_id":
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        text = json.dumps(entry, default=str, ensure_ascii=False)
        # json escapes C0 controls; these Python's splitlines and some readers also break on
        return self.redactor(_JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text))


# control characters (C0, DEL, C1) and the Unicode line and paragraph separators: what a
# terminal or a log reader may take for the end of a line, or an escape sequence
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
CONTINUATION = "  | "  # starts every line of a traceback: no log line starts so


def escape_controls(text: str) -> str:
    """``text`` with every control character written as an escape (``\\n``, ``\\x1b``):
    a value from a request (a path holding ``%0a``) cannot start a forged log line."""
    return _CONTROL.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    return match.group(0).encode("unicode_escape").decode("ascii")


class PlainFormatter(logging.Formatter):
    """Human-readable lines (``--log-format text``), redacted the same way. A record is one
    line whatever its fields hold (control characters escaped); a traceback follows on lines
    that start with ``  | ``."""

    def __init__(self, redactor: Redactor | None = None):
        super().__init__("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s")
        self.redactor = redactor or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        cached, record.exc_text = record.exc_text, None  # another formatter's is not escaped
        try:
            return self.redactor(super().format(record))
        finally:
            record.exc_text = cached

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return escape_controls(super().formatMessage(record))

    def formatException(self, ei: _ExcInfo) -> str:  # noqa: N802
        return _continuation(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:  # noqa: N802
        return _continuation(super().formatStack(stack_info))


def _continuation(text: str) -> str:
    return "\n".join(CONTINUATION + escape_controls(line) for line in text.splitlines())


def setup_logging(
    level: str = "INFO",
    secrets: Iterable[str | None] = (),
    fmt: str = "json",
    stream: TextIO | None = None,
) -> Redactor:
    """Send every log record to ``stream`` (stderr) through one redacting formatter."""
    redactor = Redactor(secrets)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(redactor) if fmt == "json" else PlainFormatter(redactor))
    handler._workbench = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    remove_handlers()
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True
    for noisy in ("httpx", "httpcore", "mcp.server.streamable_http_manager"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    return redactor


def remove_handlers() -> None:
    """Remove the handlers :func:`setup_logging` installed (and only those)."""
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_workbench", False):
            root.removeHandler(old)


def new_request_id() -> str:
    return uuid.uuid4().hex[:16]


class RequestContextMiddleware:
    """Pure ASGI: set the request id, echo it as ``X-Request-ID``, log an access line."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_id(scope) or new_request_id()
        token = REQUEST_ID.set(rid)
        state = {"status": 500}
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                state["status"] = message["status"]
                headers = list(message.get("headers", []))
                headers.append((REQUEST_ID_HEADER.encode(), rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            access_log.info(
                "%s %s -> %s",
                scope.get("method"),
                scope.get("path"),
                state["status"],
                extra={
                    "status": state["status"],
                    "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                    "client": (scope.get("client") or ("-",))[0],
                },
            )
            REQUEST_ID.reset(token)


def _incoming_id(scope: Scope) -> str | None:
    for key, value in scope.get("headers", []):
        if key == REQUEST_ID_HEADER.encode():
            text = value.decode("latin-1")
            return text if _VALID_ID.match(text) else None
    return None
