"""An error answer of the service, raised again in a client as the error of the same kind.

``workbench mcp`` and the CLI reach a database through the service that holds it
(:class:`~service.client.live.LiveService`); what the service answered must reach their caller
as it was: the same ``type``, the same message, the same HTTP status and ``Retry-After``. The
kinds are not listed here (a list is what a new kind is forgotten in): :func:`error_kinds` walks
the core's error tree (and any subclass a loaded module adds), and a kind the tree does not
name (``unauthorized``, ``rate_limited``, ``payload_too_large`` ... answered by the HTTP layer)
becomes a :class:`RelayedError` that carries its kind and status itself.
"""

from __future__ import annotations

from collections import deque

import httpx

from workbench.errors import WorkbenchError


class RelayedError(WorkbenchError):
    """An error answer whose kind no class of the core's tree names."""

    relayed = True

    def __init__(self, kind: str, status: int, message: str, retry_after: int | None = None):
        super().__init__(message, retry_after)
        self.kind = kind
        self.http_status = status


def error_kinds() -> dict[str, type[WorkbenchError]]:
    """Every ``kind`` of the error tree → its class (the most general class of a kind wins,
    e.g. ``ConfigError`` over a ``StartupError`` that keeps its kind)."""
    found: dict[str, type[WorkbenchError]] = {}
    pending: deque[type[WorkbenchError]] = deque([WorkbenchError])
    while pending:
        cls = pending.popleft()
        found.setdefault(cls.kind, cls)
        pending.extend(cls.__subclasses__())
    return found


def relayed(kind: str, status: int, message: str, retry_after: int | None) -> WorkbenchError:
    """The error the service answered: of the tree's class for ``kind`` when that class has the
    same HTTP status, else a :class:`RelayedError`; ``relayed`` is set on it (a 500 relayed is
    the service's fault, already logged there, and its message names the service's request)."""
    cls = error_kinds().get(kind)
    if cls is None or cls.http_status != status:
        return RelayedError(kind, status, message, retry_after)
    exc = cls.__new__(cls)  # some classes take other arguments (StructuredOutputError)
    WorkbenchError.__init__(exc, message, retry_after)
    exc.relayed = True  # type: ignore[attr-defined]
    return exc


def from_response(response: httpx.Response, body: object) -> WorkbenchError:
    """The error of an answer that is not 200 (``body``: its JSON, ``{}`` when none)."""
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    kind = error.get("type") if isinstance(error.get("type"), str) else None
    message = error.get("message")
    if not isinstance(message, str):
        message = response.text[:300] or f"HTTP {response.status_code}"
    status = response.status_code
    return relayed(kind or _kind_of(status), status, message, retry_after_of(response))


def retry_after_of(response: httpx.Response) -> int | None:
    value = response.headers.get("retry-after", "")
    return int(value) if value.isdigit() else None


def _kind_of(status: int) -> str:
    return "internal_error" if status >= 500 else "http_error"
