"""The service app: ``create_app(workbench, settings) -> Litestar``.

Routes: ``POST /tools/<name>`` for every tool of :data:`service.tools.TOOLS` (JSON body = the
arguments, response = the facade's dict), ``GET /tools`` (the table), ``GET /health``, the MCP
streamable-HTTP endpoint at ``/mcp`` and the OpenAPI schema at ``/schema`` (JSON at
``/schema/openapi.json``). Handlers are thin: validate, call the facade in a worker thread,
return its dict. The facade's lifecycle (``start``/``stop``) belongs to the caller (the CLI).
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Response, get, post
from litestar.handlers import asgi
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.params import FromHeader, FromPath, JSONBody
from litestar.types import Receive, Scope, Send

from service.errors import exception_handler
from service.health import EmbedderProbe, health
from service.logs import RequestContextMiddleware
from service.mcp_server import build_mcp_server, build_session_manager
from service.middleware import (
    BearerAuthMiddleware,
    BodyLimitMiddleware,
    RateLimitMiddleware,
    TokenBuckets,
)
from service.tools import TOOLS, Tool, get_tool
from workbench.config import Settings

MIN_BODY_BYTES = 1024 * 1024


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("knowledge-workbench")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0.0.0"


def max_body_bytes(settings: Settings) -> int:
    """Room for the largest episode even when every character is a JSON ``\\uXXXX`` escape."""
    return max(MIN_BODY_BYTES, settings.max_episode_chars * 6 + 64 * 1024)


def tool_route(workbench: Any, tool: Tool):
    """``POST /tools/<name>``: the body is validated against the tool's argument model."""
    if not tool.takes_args:
        def handler() -> dict[str, Any]:
            return tool.invoke(workbench, None)
    elif tool.args_optional:
        def handler(data: Any = None) -> dict[str, Any]:
            return tool.invoke(workbench, data)
        handler.__annotations__["data"] = JSONBody[tool.args | None]
    else:
        def handler(data: Any) -> dict[str, Any]:
            return tool.invoke(workbench, data)
        handler.__annotations__["data"] = JSONBody[tool.args]
    handler.__name__ = handler.__qualname__ = tool.name
    return post(
        f"/tools/{tool.name}", sync_to_thread=True, status_code=200, operation_id=tool.name,
        summary=tool.description.split(". ")[0].rstrip(".") + ".",
        description=tool.description, tags=["tools"],
    )(handler)


@post("/tools/{name:str}", status_code=200, include_in_schema=False)
async def unknown_tool(name: FromPath[str]) -> None:
    get_tool(name)  # raises NotFound naming the tools


@get("/tools", tags=["tools"], summary="The tool table (names, descriptions, schemas).")
async def list_tools() -> dict[str, Any]:
    return {"tools": [{"name": t.name, "description": t.description,
                       "input_schema": t.input_schema(), "read_only": t.read_only,
                       "destructive": t.destructive} for t in TOOLS]}


def health_route(workbench: Any, settings: Settings,
                 embedder_loaded: threading.Event | None = None):
    """``GET /health`` needs no token (probes); with a token configured, only a caller that
    sends it sees the details (paths, models, URLs)."""
    probe = EmbedderProbe(workbench.embedder, loaded=embedder_loaded)
    token = settings.api_token.get_secret_value() if settings.api_token else ""

    @get("/health", sync_to_thread=True, tags=["health"],
         summary="Liveness and readiness: store, embedder, LLM.")
    def health_handler(authorization: FromHeader[str | None] = None) -> Response[dict[str, Any]]:
        body, ready = health(workbench, probe)
        if token and not hmac.compare_digest((authorization or "").encode(),
                                             f"Bearer {token}".encode()):
            body = {k: body[k] for k in ("status", "live", "ready")}
        return Response(content=body, status_code=200 if ready else 503)

    return health_handler


def middleware_stack(settings: Settings, rate_clock: Callable[[], float]) -> list:
    per_minute = settings.rate_limit_per_minute
    buckets = TokenBuckets(per_minute, rate_clock) if per_minute > 0 else None
    stack = [
        RequestContextMiddleware,
        DefineMiddleware(RateLimitMiddleware, buckets=buckets),
    ]
    if settings.api_token is not None and settings.api_token.get_secret_value():
        stack.append(DefineMiddleware(BearerAuthMiddleware,
                                      token=settings.api_token.get_secret_value()))
    stack.append(DefineMiddleware(BodyLimitMiddleware, max_bytes=max_body_bytes(settings)))
    return stack


def create_app(
    workbench: Any,
    settings: Settings,
    *,
    rate_clock: Callable[[], float] = time.monotonic,
    allowed_hosts: tuple[str, ...] = (),
    embedder_loaded: threading.Event | None = None,
) -> Litestar:
    """The service app around an opened workbench (its workers are started by the caller).

    ``allowed_hosts`` adds Host names the MCP endpoint accepts on loopback (DNS-rebinding
    protection allows 127.0.0.1, localhost and ::1 by default). ``embedder_loaded``, when
    given, is set once a background-loading local model is ready (``/health`` says "loading"
    and is 503 until then).
    """
    mcp_server = build_mcp_server(workbench, package_version())
    managers: list = []  # a fresh session manager per app start (one may run only once)

    @asgi("/mcp", is_mount=True, copy_scope=True)
    async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        await managers[-1].handle_request(scope, receive, send)

    @asynccontextmanager
    async def mcp_lifespan(_app: Litestar) -> AsyncIterator[None]:
        manager = build_session_manager(mcp_server, settings.host, max_body_bytes(settings),
                                        allowed_hosts)
        managers.append(manager)
        async with manager.run():
            yield
        managers.remove(manager)

    return Litestar(
        route_handlers=[*(tool_route(workbench, t) for t in TOOLS), unknown_tool, list_tools,
                        health_route(workbench, settings, embedder_loaded), mcp_endpoint],
        middleware=middleware_stack(settings, rate_clock),
        exception_handlers={Exception: exception_handler},
        request_max_body_size=max_body_bytes(settings),
        lifespan=[mcp_lifespan],
        logging_config=None,  # service.logs owns the log format
        openapi_config=OpenAPIConfig(
            title="Knowledge Workbench", version=package_version(), path="/schema",
            description="Memory tools for AI assistants over REST; the same tools over MCP "
                        "at /mcp."),
    )
