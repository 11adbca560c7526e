"""Hardening as pure ASGI middleware (so it covers the REST tools and the ``/mcp`` mount alike).

* :class:`BodyLimitMiddleware` — a declared ``Content-Length`` over the limit is a 413 before
  anything reads the body (Litestar and the MCP transport also enforce it while reading).
* :class:`BearerAuthMiddleware` — when a token is configured every path except the exempt
  ones needs ``Authorization: Bearer <token>``; compared with :func:`hmac.compare_digest`.
* :class:`RateLimitMiddleware` — a token bucket per client address: ``limit`` requests a
  minute with bursts up to ``limit``; over it, 429 with ``Retry-After`` (seconds).
"""

from __future__ import annotations

import hmac
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

from service.errors import send_error

EXEMPT_PATHS = frozenset({"/health"})


def _header(scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value
    return None


class BodyLimitMiddleware:
    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            declared = _header(scope, b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                await send_error(send, 413, "payload_too_large",
                                 f"the request body has {int(declared)} bytes; "
                                 f"at most {self.max_bytes} are accepted")
                return
        await self.app(scope, receive, send)


class BearerAuthMiddleware:
    def __init__(self, app, token: str, exempt: Iterable[str] = EXEMPT_PATHS):
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._exempt = frozenset(exempt)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope.get("path") not in self._exempt:
            given = _header(scope, b"authorization") or b""
            if not hmac.compare_digest(given, self._expected):
                message = ("missing bearer token: send 'Authorization: Bearer <token>' "
                           "(SVC_KNOWLEDGE_API_TOKEN)" if not given else "invalid bearer token")
                await send_error(send, 401, "unauthorized", message,
                                 {"WWW-Authenticate": 'Bearer realm="workbench"'})
                return
        await self.app(scope, receive, send)


class TokenBuckets:
    """Per-key token buckets; thread-safe, bounded in size (least recently used evicted)."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 10_000):
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self.clock = clock
        self.max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Take one token; return 0 when allowed, else the seconds until one is available."""
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.pop(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
            wait = 0.0
            if tokens >= 1.0:
                tokens -= 1.0
            else:
                wait = (1.0 - tokens) / self.rate
            self._buckets[key] = (tokens, now)
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        return wait


class RateLimitMiddleware:
    """``buckets`` is shared: Litestar builds one middleware instance per route."""

    def __init__(self, app, buckets: TokenBuckets | None,
                 exempt: Iterable[str] = EXEMPT_PATHS):
        self.app = app
        self.buckets = buckets
        self._exempt = frozenset(exempt)

    async def __call__(self, scope, receive, send) -> None:
        if (self.buckets is not None and scope["type"] == "http"
                and scope.get("path") not in self._exempt):
            client = (scope.get("client") or ("unknown",))[0]
            wait = self.buckets.take(client)
            if wait > 0:
                retry = max(1, math.ceil(wait))
                await send_error(send, 429, "rate_limited",
                                 f"more than {int(self.buckets.capacity)} requests a minute "
                                 f"from {client}; retry in {retry} s",
                                 {"Retry-After": str(retry)})
                return
        await self.app(scope, receive, send)
