"""Hardening as pure ASGI middleware (so it covers the REST tools and the ``/mcp`` mount alike).

* :class:`BodyLimitMiddleware` — a declared ``Content-Length`` over the limit is a 413 before
  anything reads the body (Litestar and the MCP transport also enforce it while reading).
* :class:`BearerAuthMiddleware` — when a token is configured every path except the exempt
  ones needs ``Authorization: Bearer <token>``; compared with :func:`hmac.compare_digest`.
* :class:`RateLimitMiddleware` — a token bucket per client (the bearer token when it is a valid
  one, else the address; behind a trusted proxy, the address it forwards): ``limit`` requests a
  minute with bursts up to ``limit``; over it, 429 with ``Retry-After`` (seconds).
* :class:`ExposureMiddleware` — what a browser page must not do: a ``Host`` the service does not
  answer to (DNS rebinding) is a 421, a state-changing request from a foreign ``Origin`` a 403,
  a request body that is not JSON a 415 (:class:`Exposure` holds the rules).
* :class:`JsonBodyMiddleware` — a JSON body that is not UTF-8 or nests deeper than
  ``MAX_JSON_DEPTH`` is a 400 before anything parses it.
"""

from __future__ import annotations

import hmac
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from serving.addresses import is_loopback
from serving.asgi import ASGIApp, Message, Receive, Scope, Send
from serving.errors import send_error
from workbench.safety import MAX_JSON_DEPTH, json_depth

EXEMPT_PATHS = frozenset({"/health"})

# answers from a middleware: (send, status, type, message, headers?) in the server's error shape
ErrorSender = Callable[..., Awaitable[None]]


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value)
    return None


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            declared = _header(scope, b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                await send_error(
                    send,
                    413,
                    "payload_too_large",
                    f"the request body has {int(declared)} bytes; "
                    f"at most {self.max_bytes} are accepted",
                )
                return
        await self.app(scope, receive, send)


# the answer to a request without a valid bearer token: 401, this header, bearer_refusal()
UNAUTHORIZED_HEADERS = {"WWW-Authenticate": 'Bearer realm="workbench"'}


def bearer_refusal(given: bool, setting: str) -> str:
    """What a 401 says: a token is missing (and ``setting``, where one is set) or wrong."""
    if not given:
        return f"missing bearer token: send 'Authorization: Bearer <token>' ({setting})"
    return "invalid bearer token"


class BearerAuthMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        token: str,
        exempt: Iterable[str] = EXEMPT_PATHS,
        setting: str = "SVC_KNOWLEDGE_API_TOKEN",
        error: ErrorSender = send_error,
    ):
        self.app = app
        self._error = error
        self._expected = f"Bearer {token}".encode()
        self._exempt = frozenset(exempt)
        self._setting = setting

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("path") not in self._exempt:
            given = _header(scope, b"authorization") or b""
            if not hmac.compare_digest(given, self._expected):
                message = bearer_refusal(bool(given), self._setting)
                await self._error(send, 401, "unauthorized", message, UNAUTHORIZED_HEADERS)
                return
        await self.app(scope, receive, send)


class TokenBuckets:
    """Per-key token buckets; thread-safe, bounded in size (least recently used evicted)."""

    def __init__(
        self, per_minute: int, clock: Callable[[], float] = time.monotonic, max_keys: int = 10_000
    ):
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


def client_key(
    scope: Scope,
    trusted_proxies: frozenset[str] = frozenset(),
    tokens: Iterable[str] = (),
    known: Callable[[bytes], bool] | None = None,
) -> str:
    """Whom a request's rate limit counts against: the token it sends when that is one of
    ``tokens`` (a digest of it, so clients behind one proxy keep their own buckets), else its
    address, or the address a trusted proxy forwards. Only a verified token counts: keyed by
    whatever token is sent, a new random one per request would escape every limit. ``known``
    vouches for the scoped tokens already verified (``service.api.access.TokenResolver.known``)."""
    token = _verified_token(scope, tokens, known)
    if token is not None:
        return "token:" + hmac.new(b"rate-limit", token, "sha256").hexdigest()[:16]
    address = (scope.get("client") or ("unknown",))[0]
    forwarded = _header(scope, b"x-forwarded-for")
    if forwarded and address in trusted_proxies:
        hops = [h.strip() for h in forwarded.decode("latin-1").split(",") if h.strip()]
        if hops:
            return hops[-1]  # the address the (last) trusted proxy saw
    return address


def _verified_token(
    scope: Scope, tokens: Iterable[str], known: Callable[[bytes], bool] | None = None
) -> bytes | None:
    auth = _header(scope, b"authorization") or b""
    if not auth.lower().startswith(b"bearer "):
        return None
    given = auth[7:].strip()
    if known is not None and given and known(given):
        return given
    for token in tokens:
        if token and hmac.compare_digest(given, token.encode()):
            return given
    return None


class RateLimitMiddleware:
    """``buckets`` is shared: Litestar builds one middleware instance per route."""

    def __init__(
        self,
        app: ASGIApp,
        buckets: TokenBuckets | None,
        exempt: Iterable[str] = EXEMPT_PATHS,
        trusted_proxies: Iterable[str] = (),
        tokens: Iterable[str] = (),
        known: Callable[[bytes], bool] | None = None,
    ):
        self.app = app
        self.buckets = buckets
        self._exempt = frozenset(exempt)
        self._trusted = frozenset(trusted_proxies)
        self._tokens = tuple(tokens)  # the valid tokens: a request sending one counts on it
        self._known = known  # or a check of tokens verified before

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.buckets is not None
            and scope["type"] == "http"
            and scope.get("path") not in self._exempt
        ):
            client = client_key(scope, self._trusted, self._tokens, self._known)
            wait = self.buckets.take(client)
            if wait > 0:
                retry = max(1, math.ceil(wait))
                who = "this token" if client.startswith("token:") else client
                await send_error(
                    send,
                    429,
                    "rate_limited",
                    f"more than {int(self.buckets.capacity)} requests a minute "
                    f"from {who}; retry in {retry} s",
                    {"Retry-After": str(retry)},
                )
                return
        await self.app(scope, receive, send)


LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def host_name(value: str) -> str:
    """``Host`` header → name without port (``[::1]:8000`` → ``::1``), lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass(frozen=True)
class Exposure:
    """Which ``Host`` names and browser ``Origin`` s a server answers.

    Bound to loopback, it answers loopback names only (and ``allowed_hosts``): a page that
    rebinds its own name to 127.0.0.1 is refused. Bound elsewhere (a token is required then), it
    answers any name unless ``allowed_hosts`` lists them. An ``Origin`` is accepted when it is the
    server's own (same scheme-less host and port as the ``Host`` header) or listed in
    ``allowed_origins``.
    """

    bind_host: str
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()

    def host_allowed(self, host: str | None) -> bool:
        if not is_loopback(self.bind_host) and not self.allowed_hosts:
            return True
        names = {host_name(h) for h in self.allowed_hosts}
        names |= set(LOOPBACK_NAMES) | {host_name(self.bind_host)}
        return host is not None and host_name(host) in names

    def origin_allowed(self, origin: str, host: str | None) -> bool:
        origin = origin.strip().rstrip("/")
        if origin in self.allowed_origins:
            return True
        parts = urlsplit(origin)
        return (
            host is not None
            and bool(host)
            and parts.scheme in ("http", "https")
            and parts.netloc.lower() == host.strip().lower()
        )


class ExposureMiddleware:
    """421 for a foreign ``Host``, 403 for a foreign ``Origin`` on a state-changing request,
    415 for a request body that is not JSON (see :class:`Exposure`)."""

    def __init__(
        self,
        app: ASGIApp,
        exposure: Exposure,
        json_paths: tuple[str, ...] = ("/tools/",),
        error: ErrorSender = send_error,
    ):
        self.app = app
        self._error = error
        self.exposure = exposure
        self.json_paths = json_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = self.problem(scope)
            if problem is not None:
                await self._error(send, *problem)
                return
        await self.app(scope, receive, send)

    def problem(self, scope: Scope) -> tuple[int, str, str] | None:
        host = (_header(scope, b"host") or b"").decode("latin-1") or None
        if not self.exposure.host_allowed(host):
            return (
                421,
                "misdirected_request",
                f"this server does not answer to the host name {host!r}; add it to "
                "SVC_KNOWLEDGE_ALLOWED_HOSTS if it is yours",
            )
        if scope.get("method", "GET") in SAFE_METHODS:
            return None
        origin = _header(scope, b"origin")
        if origin is not None and not self.exposure.origin_allowed(origin.decode("latin-1"), host):
            return (
                403,
                "forbidden",
                f"cross-origin request from {origin.decode('latin-1')!r} refused; add the "
                "origin to SVC_KNOWLEDGE_ALLOWED_ORIGINS if the page is yours",
            )
        if scope.get("path", "").startswith(self.json_paths) and _has_body(scope):
            kind = (_header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
            if kind != b"application/json" and not kind.endswith(b"+json"):
                return (
                    415,
                    "unsupported_media_type",
                    "send the arguments as JSON with 'Content-Type: application/json'",
                )
        return None


def _has_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length")
    if length is not None:
        return length.strip() not in (b"", b"0")
    return _header(scope, b"transfer-encoding") is not None


class JsonBodyMiddleware:
    """Reads a JSON request body (up to ``max_bytes``), refuses one that is not UTF-8 or nests
    deeper than ``max_depth`` with a 400, and hands the body on unchanged."""

    def __init__(self, app: ASGIApp, max_bytes: int, max_depth: int = MAX_JSON_DEPTH):
        self.app = app
        self.max_bytes = max_bytes
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = (_header(scope, b"content-type") or b"").split(b";")[0].strip().lower()
        if scope["type"] != "http" or not (kind == b"application/json" or kind.endswith(b"+json")):
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay([message], receive), send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
            if size > self.max_bytes:
                await send_error(
                    send,
                    413,
                    "payload_too_large",
                    f"the request body is larger than {self.max_bytes} bytes",
                )
                return
        body = b"".join(chunks)
        problem = self.problem(body)
        if problem is not None:
            await send_error(send, 400, "invalid_input", problem)
            return
        await self.app(
            scope,
            _replay([{"type": "http.request", "body": body, "more_body": False}], receive),
            send,
        )

    def problem(self, body: bytes) -> str | None:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            return (
                f"the request body is not valid UTF-8 (byte {exc.start}): "
                "send JSON encoded as UTF-8"
            )
        if json_depth(body, self.max_depth) > self.max_depth:
            return f"the JSON body nests deeper than {self.max_depth} levels"
        return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` that gives the messages read already, then the client's own."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
