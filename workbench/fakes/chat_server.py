"""A fake chat-completions server that speaks the real wire format over loopback.

It is a real HTTP server on ``127.0.0.1`` (a free port), answering ``POST /v1/chat/completions``
with real chat-completions JSON (``id``, ``choices[].message.content`` or ``tool_calls``,
``finish_reason``, ``usage`` with ``prompt_tokens``/``completion_tokens``/``total_tokens``,
optional ``prompt_tokens_details.cached_tokens``, ``cache_read_tokens``/``cache_write_tokens``
and ``cost``) and ``GET /v1/models``. Drive it with the real ``openai`` client.

Usage (the ``fake_llm`` fixture of ``tests/fakes/fixtures.py`` yields a started server)::

    def test_something(fake_llm):
        client = openai.OpenAI(base_url=fake_llm.base_url, api_key="k")   # base_url ends in /v1
        fake_llm.script(FakeReply.rate_limited(retry_after=2), FakeReply.ok({"items": []}))
        ...
        assert len(fake_llm.requests) == 2           # every request body, in order
        assert fake_llm.structures() == ["Items", "Items"]

How a reply is chosen, for each request:

1. the next reply of the queue filled by ``script(*replies)`` (FIFO);
2. else the responder set with ``set_responder(fn)``: ``fn(request_json) -> FakeReply | dict |
   None`` (a dict is taken as the reply data; None falls through);
3. else a reply registered for the requested structure with ``on_structure(name, reply)``
   (``reply`` may be a ``FakeReply``, data, or a callable of the request);
4. else valid minimal data generated from the requested JSON schema (:func:`minimal_instance`).

The requested structure name is ``response_format.json_schema.name`` (json_schema mode),
``response_format.schema.title`` (json_object mode, the workbench puts the name there) or the
forced tool's name (tool mode): see :func:`structure_name`. Reply *data* is rendered the way the
request asked for it: as ``message.content`` text, or as the arguments of a tool call when the
request forced a tool.

Failure replies: ``FakeReply.rate_limited(retry_after=…)`` (429 + ``Retry-After``),
``FakeReply.server_error()`` (500), ``FakeReply.error(400, "…")``, ``FakeReply.slow(seconds)`` (a
reply that arrives after ``seconds``: pair it with a short client timeout),
``FakeReply.truncated()`` (cut-off JSON, ``finish_reason`` ``length``),
``FakeReply.schema_echo()`` (answers with the requested JSON schema instead of data),
``FakeReply.text("```json …```")`` (any raw content). ``server.latency`` adds a fixed delay to
every reply.
"""

from __future__ import annotations

import copy
import itertools
import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_UNSET: Any = object()
Responder = Callable[[dict[str, Any]], "FakeReply | dict[str, Any] | None"]


@dataclass(frozen=True)
class FakeReply:
    """One scripted answer. Token counts default to deterministic estimates (chars / 4)."""

    data: Any = _UNSET
    content: str | None = None
    finish_reason: str | None = None
    status: int = 200
    error_message: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    cost: float | None = None
    cost_details: dict[str, float] | None = None
    include_usage: bool = True
    echo_schema: bool = False
    truncate_at: int | None = None
    model: str | None = None
    body: dict[str, Any] | None = None

    # --- constructors ----------------------------------------------------------------------
    @classmethod
    def ok(cls, data: Any, **kw: Any) -> FakeReply:
        return cls(data=data, **kw)

    @classmethod
    def text(cls, content: str, **kw: Any) -> FakeReply:
        return cls(content=content, **kw)

    @classmethod
    def error(cls, status: int, message: str = "fake error", **kw: Any) -> FakeReply:
        return cls(status=status, error_message=message, **kw)

    @classmethod
    def rate_limited(cls, retry_after: float | None = 1.0, **kw: Any) -> FakeReply:
        headers = {} if retry_after is None else {"Retry-After": _num(retry_after)}
        return cls(status=429, error_message="Rate limit exceeded", headers=headers, **kw)

    @classmethod
    def server_error(
        cls, status: int = 500, message: str = "internal error", **kw: Any
    ) -> FakeReply:
        return cls(status=status, error_message=message, **kw)

    @classmethod
    def slow(cls, seconds: float, data: Any = _UNSET, **kw: Any) -> FakeReply:
        return cls(data=data, delay=seconds, **kw)

    @classmethod
    def truncated(cls, data: Any = _UNSET, keep_chars: int = 20, **kw: Any) -> FakeReply:
        """JSON cut after ``keep_chars`` characters, ``finish_reason`` ``length``."""
        return cls(data=data, truncate_at=keep_chars, finish_reason="length", **kw)

    @classmethod
    def schema_echo(cls, schema: dict[str, Any] | None = None, **kw: Any) -> FakeReply:
        """Answer with a JSON schema instead of data (the requested one when not given)."""
        if schema is not None:
            return cls(data=schema, **kw)
        return cls(echo_schema=True, **kw)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


# --- reading requests ------------------------------------------------------------------------
def request_mode(request: dict[str, Any]) -> str | None:
    """``json_schema``, ``json_object``, ``tool`` or None (plain text)."""
    if request.get("tools") and request.get("tool_choice") not in (None, "none", "auto"):
        return "tool"
    kind = (request.get("response_format") or {}).get("type")
    return kind if kind in ("json_schema", "json_object") else None


def requested_schema(request: dict[str, Any]) -> dict[str, Any] | None:
    mode = request_mode(request)
    fmt = request.get("response_format") or {}
    if mode == "json_schema":
        return (fmt.get("json_schema") or {}).get("schema")
    if mode == "json_object":
        return fmt.get("schema")
    if mode == "tool":
        return _forced_tool(request).get("parameters")
    return None


def structure_name(request: dict[str, Any]) -> str | None:
    """The name of the structure the request asks for (see the module docstring)."""
    mode = request_mode(request)
    fmt = request.get("response_format") or {}
    if mode == "json_schema":
        return (fmt.get("json_schema") or {}).get("name")
    if mode == "json_object":
        return (fmt.get("schema") or {}).get("title")
    if mode == "tool":
        return _forced_tool(request).get("name")
    return None


def _forced_tool(request: dict[str, Any]) -> dict[str, Any]:
    tools = [t.get("function") or {} for t in request.get("tools") or []]
    choice = request.get("tool_choice")
    wanted = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    for tool in tools:
        if wanted is None or tool.get("name") == wanted:
            return tool
    return {}


def message_text(request: dict[str, Any]) -> str:
    """All message text of a request (content strings and text parts), joined by newlines."""
    out: list[str] = []
    for msg in request.get("messages") or []:
        content = msg.get("content")
        if isinstance(content, list):
            out.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        elif content:
            out.append(str(content))
    return "\n".join(out)


def minimal_instance(schema: dict[str, Any] | None, root: dict[str, Any] | None = None) -> Any:
    """Small data that validates against ``schema`` (required properties only)."""
    if not schema:
        return {}
    root = root or schema
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        defs = {**root.get("definitions", {}), **root.get("$defs", {})}
        return minimal_instance(
            {**defs.get(name, {}), **{k: v for k, v in schema.items() if k != "$ref"}}, root
        )
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        if schema.get(key):
            options = [o for o in schema[key] if o.get("type") != "null"] or schema[key]
            return minimal_instance(options[0], root)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: minimal_instance(props.get(k, {}), root) for k in schema.get("required", [])}
    if kind == "array":
        return [
            minimal_instance(schema.get("items") or {}, root)
            for _ in range(int(schema.get("minItems", 0)))
        ]
    if kind == "string":
        return "x" * max(1, int(schema.get("minLength", 1)))
    if kind == "integer":
        return int(schema.get("minimum", 0))
    if kind == "number":
        return float(schema.get("minimum", 0.0))
    if kind == "boolean":
        return False
    return None


# --- the server ------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecordedRequest:
    """One received request; header names are lower-case."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


class _QuietServer(ThreadingHTTPServer):
    """A client that goes away mid-request (a killed service) is normal here, not a trace."""

    def handle_error(
        self, request: socket.socket | tuple[bytes, socket.socket], client_address: object
    ) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeLLMServer:
    """See the module docstring. Start with ``start()`` or ``with FakeLLMServer() as s:``."""

    def __init__(self, model: str = "fake-model", latency: float = 0.0) -> None:
        self.model = model
        self.latency = latency
        self.requests: list[dict[str, Any]] = []
        self.received: list[RecordedRequest] = []
        self._queue: deque[FakeReply] = deque()
        self._responder: Responder | None = None
        self._structures: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------
    def start(self) -> FakeLLMServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = _QuietServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "the fake server is not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # --- scripting -------------------------------------------------------------------------
    def script(self, *replies: FakeReply | dict[str, Any]) -> FakeLLMServer:
        """Queue replies (a dict is reply data) answered in order before anything else."""
        with self._lock:
            self._queue.extend(r if isinstance(r, FakeReply) else FakeReply.ok(r) for r in replies)
        return self

    def set_responder(self, responder: Responder | None) -> FakeLLMServer:
        self._responder = responder
        return self

    def on_structure(self, name: str, reply: Any) -> FakeLLMServer:
        """Answer requests for structure ``name`` with ``reply`` (FakeReply, data or
        ``callable(request) -> FakeReply | data``)."""
        self._structures[name] = reply
        return self

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self.received.clear()
        self._responder = None
        self._structures.clear()

    # --- assertions helpers ----------------------------------------------------------------
    def structures(self) -> list[str | None]:
        """The structure name of every chat request received, in order."""
        return [structure_name(r) for r in self.requests]

    def requests_for(self, structure: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if structure_name(r) == structure]

    @property
    def pending(self) -> int:
        """Scripted replies not yet consumed."""
        return len(self._queue)

    # --- answering -------------------------------------------------------------------------
    def _choose(self, request: dict[str, Any]) -> FakeReply:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        if self._responder is not None:
            reply = self._responder(request)
            if reply is not None:
                return reply if isinstance(reply, FakeReply) else FakeReply.ok(reply)
        name = structure_name(request)
        if name in self._structures:
            reply = self._structures[name]
            if callable(reply) and not isinstance(reply, FakeReply):
                reply = reply(request)
            return reply if isinstance(reply, FakeReply) else FakeReply.ok(reply)
        return FakeReply()

    def _record(
        self, method: str, path: str, headers: dict[str, str], body: dict[str, Any] | None
    ) -> None:
        with self._lock:
            self.received.append(RecordedRequest(method, path, headers, body))
            if body is not None and path.endswith("/chat/completions"):
                self.requests.append(body)

    def _wait(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def render(
        self, request: dict[str, Any], reply: FakeReply
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        """``(status, headers, JSON body)`` of ``reply`` to ``request``."""
        if reply.status >= 400:
            kind = "rate_limit_exceeded" if reply.status == 429 else "server_error"
            body: dict[str, Any] = {
                "error": {
                    "message": reply.error_message or "error",
                    "type": kind,
                    "code": reply.status,
                }
            }
            return reply.status, dict(reply.headers), reply.body or body
        if reply.body is not None:
            return reply.status, dict(reply.headers), reply.body
        text = self._reply_text(request, reply)
        tool_mode = request_mode(request) == "tool" and reply.content is None
        message: dict[str, Any] = {"role": "assistant", "content": None if tool_mode else text}
        finish = reply.finish_reason or ("tool_calls" if tool_mode else "stop")
        if tool_mode:
            message["tool_calls"] = [
                {
                    "id": f"call_{next(self._ids)}",
                    "type": "function",
                    "function": {"name": structure_name(request) or "tool", "arguments": text},
                }
            ]
        body = {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": reply.model or self.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
        }
        if reply.include_usage:
            body["usage"] = _usage(request, reply, text)
        return 200, dict(reply.headers), body

    def _reply_text(self, request: dict[str, Any], reply: FakeReply) -> str:
        if reply.content is not None:
            text = reply.content
        elif reply.echo_schema:
            text = json.dumps(requested_schema(request) or {"type": "object", "properties": {}})
        else:
            data = reply.data
            if data is _UNSET:
                data = minimal_instance(copy.deepcopy(requested_schema(request)))
            text = json.dumps(data)
        return text if reply.truncate_at is None else text[: reply.truncate_at]


def _usage(request: dict[str, Any], reply: FakeReply, text: str) -> dict[str, Any]:
    prompt = reply.prompt_tokens
    if prompt is None:
        prompt = max(1, len(json.dumps(request.get("messages") or [])) // 4)
    completion = reply.completion_tokens
    if completion is None:
        completion = max(1, len(text) // 4)
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reply.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_tokens}
    if reply.cache_read_tokens is not None:
        usage["cache_read_tokens"] = reply.cache_read_tokens
    if reply.cache_write_tokens is not None:
        usage["cache_write_tokens"] = reply.cache_write_tokens
    if reply.cost is not None:
        usage["cost"] = reply.cost
    if reply.cost_details is not None:
        usage["cost_details"] = dict(reply.cost_details)
    return usage


def _headers(headers: Message) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


class _Handler(BaseHTTPRequestHandler):
    fake: FakeLLMServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms stalls

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self.fake._record("GET", self.path, _headers(self.headers), None)
        if self.path.rstrip("/").endswith("/models"):
            self._send(
                200,
                {},
                {
                    "object": "list",
                    "data": [{"id": self.fake.model, "object": "model", "owned_by": "fake"}],
                },
            )
        else:
            self._send(404, {}, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send(400, {}, {"error": {"message": "body is not JSON"}})
            return
        self.fake._record("POST", self.path, _headers(self.headers), body)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {}, {"error": {"message": f"no route {self.path}"}})
            return
        reply = self.fake._choose(body)
        self.fake._wait(self.fake.latency + reply.delay)
        status, headers, payload = self.fake.render(body, reply)
        self._send(status, headers, payload)

    def _send(self, status: int, headers: dict[str, str], payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout test): nothing to answer


def chat_settings_env(server: FakeLLMServer, **extra: str) -> dict[str, str]:
    """``SVC_KNOWLEDGE_*`` variables for ``load_settings(environ=...)`` using ``server``."""
    env = {
        "SVC_KNOWLEDGE_LLM_PROVIDER": "compat",
        "SVC_KNOWLEDGE_MODEL_NAME": server.model,
        "SVC_KNOWLEDGE_COMPAT_BASE_URL": server.base_url,
        "SVC_KNOWLEDGE_COMPAT_API_KEY": "test-key",
        "SVC_KNOWLEDGE_LLM_REQUESTS_PER_MINUTE": "0",
    }
    env.update(extra)
    return env
