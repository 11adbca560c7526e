"""The service app: ``create_app(workbench, settings) -> Litestar``.

Routes: ``POST /tools/<name>`` for every tool of :data:`service.api.tools.TOOLS` (JSON body = the
arguments, response = the facade's dict), ``GET /tools`` (the table), ``GET /health``, the
memory browser at ``/ui`` (:mod:`service.ui`), the MCP
streamable-HTTP endpoint at ``/mcp`` and the OpenAPI schema at ``/schema`` (JSON at
``/schema/openapi.json``). Handlers are thin: validate, call the facade in a worker thread,
return its dict. The facade's lifecycle (``start``/``stop``) belongs to the caller (the CLI).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
import time
import uuid as uuidlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any

from litestar import HttpMethod, Litestar, Request, Response, get, post, route
from litestar.handlers import HTTPRouteHandler, asgi
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.params import FromHeader, FromPath, HeaderParameter, JSONBody
from litestar.plugins.pydantic import PydanticPlugin
from litestar.response import Redirect
from litestar.types import Middleware, Receive, Scope, Send
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from service.api.access import (
    EXEMPT_PATHS,
    ScopedAuthMiddleware,
    TokenResolver,
    caller_of,
    tenancy_of,
)
from service.api.health import EmbedderProbe, details_allowed, health
from service.api.mcp_server import build_mcp_server, build_session_manager
from service.api.responses import ERRORS, RESULTS, ErrorBody, ToolTable
from service.api.tools import TOOLS, AddMemoryArgs, Tool, get_tool
from service.ui import exempt_paths, ui_routes
from serving import apidocs
from serving.asgi import for_litestar
from serving.errors import exception_handler
from serving.logs import RequestContextMiddleware
from serving.middleware import (
    BodyLimitMiddleware,
    Exposure,
    ExposureMiddleware,
    JsonBodyMiddleware,
    RateLimitMiddleware,
    TokenBuckets,
)
from serving.version import package_version
from workbench.config import Settings

if TYPE_CHECKING:
    from workbench.facade import Workbench

MIN_BODY_BYTES = 1024 * 1024
HEALTH_THREADS = 1


def max_body_bytes(settings: Settings) -> int:
    """Room for the largest episode even when every character is a JSON ``\\uXXXX`` escape."""
    return max(MIN_BODY_BYTES, settings.max_episode_chars * 6 + 64 * 1024)


IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        required=False,
        max_length=256,
        description="Makes a retried add_memory return the first result (the episode uuid is "
        "derived from it when the body names none).",
    ),
]
IDEMPOTENCY_NAMESPACE = uuidlib.UUID("5b0c8e6e-3f2a-4d0b-9a57-9f1f4b7c2d11")


def idempotent_uuid(workbench: Any, caller: Any, group: str | None, key: str) -> str:
    """The episode uuid an ``Idempotency-Key`` stands for: a retry with the same key (and the
    same episode) gets the first result instead of a second episode. Scoped to the caller
    (its token's name) and the group, and derived under the database's secret: another
    tenant's key of the same text is another uuid, which nobody else can compute."""
    who = caller.name if caller is not None else "admin"
    group = group or workbench.settings.default_group_id
    tenancy = vars(workbench).get("tenancy") if hasattr(workbench, "__dict__") else None
    if tenancy is None:  # a stand-in without a store: scoped, not secret
        return str(uuidlib.uuid5(IDEMPOTENCY_NAMESPACE, f"{who}\x00{group}\x00{key}"))
    return str(tenancy.scoped_uuid("idempotency", who, group, key))


ERROR_RESPONSES = {
    status: ResponseSpec(ErrorBody, description=meaning, generate_examples=False)
    for status, meaning in ERRORS.items()
}


def tool_route(workbench: Workbench, tool: Tool) -> HTTPRouteHandler:
    """``POST /tools/<name>``: the body is validated against the tool's argument model (a tool
    without arguments takes no body or ``{}``); the OpenAPI schema names its result model and
    the error body for every error status."""
    body: Any = JSONBody  # subscripted with the tool's model at run time, for the schema
    handler: Callable[..., dict[str, Any]]
    if tool.name == "add_memory":

        def add_handler(
            request: Request[Any, Any, Any], data: Any, idempotency_key: IdempotencyKey = None
        ) -> dict[str, Any]:
            args = tool.parse(data)
            assert isinstance(args, AddMemoryArgs)  # add_memory's model (TOOLS)
            caller = caller_of(request.scope)
            if idempotency_key and args.uuid is None:
                scoped = idempotent_uuid(workbench, caller, args.group_id, idempotency_key)
                args = args.model_copy(update={"uuid": scoped})
            return tool.invoke(workbench, args, caller)

        handler = add_handler
        handler.__annotations__["data"] = body[tool.args]
    elif tool.args_optional:

        def optional_handler(request: Request[Any, Any, Any], data: Any = None) -> dict[str, Any]:
            return tool.invoke(workbench, data, caller_of(request.scope))

        handler = optional_handler
        handler.__annotations__["data"] = body[tool.args | None]
    else:

        def args_handler(request: Request[Any, Any, Any], data: Any) -> dict[str, Any]:
            return tool.invoke(workbench, data, caller_of(request.scope))

        handler = args_handler
        handler.__annotations__["data"] = body[tool.args]
    handler.__annotations__["return"] = RESULTS[tool.name]  # the schema; the dict is sent as is
    handler.__name__ = handler.__qualname__ = tool.name
    return post(
        f"/tools/{tool.name}",
        sync_to_thread=True,
        status_code=200,
        operation_id=tool.name,
        summary=tool.description.split(". ")[0].rstrip(".") + ".",
        description=tool.description,
        tags=["tools"],
        responses=ERROR_RESPONSES,
    )(handler)


@post("/tools/{name:str}", status_code=200, include_in_schema=False)
async def unknown_tool(name: FromPath[str]) -> None:
    get_tool(name)  # raises NotFound naming the tools


@get("/", include_in_schema=False, sync_to_thread=False)
def root() -> Redirect:
    """A browser that opens the service's address lands on the API reference."""
    return Redirect(path="/schema")


@get(
    "/tools",
    tags=["tools"],
    summary="The tool table (names, descriptions, schemas).",
    responses={401: ERROR_RESPONSES[401]},  # once any token exists
)
async def list_tools() -> ToolTable:
    return ToolTable(tools=_tool_table())


@functools.cache
def _tool_table() -> list[dict[str, Any]]:
    """The table as ``GET /tools`` sends it, built once (every schema: ~10 ms of CPU)."""
    return [
        {
            "name": t.name,
            "description": t.description,
            "input_schema": t.input_schema(),
            "read_only": t.read_only,
            "destructive": t.destructive,
            "admin": t.admin,
        }
        for t in TOOLS
    ]


def health_route(
    workbench: Workbench,
    resolver: TokenResolver,
    embedder_loaded: threading.Event | None = None,
) -> HTTPRouteHandler:
    """``GET /health`` needs no token (probes); once a token is needed (the admin token is set,
    or the store holds any), only an admin caller sees the details (paths, models, URLs)."""
    probe = EmbedderProbe(workbench.embedder, loaded=embedder_loaded)
    # its own thread: a probe does not queue behind the searches in the tools' threads
    checks = ThreadPoolExecutor(HEALTH_THREADS, thread_name_prefix="health")

    @route(
        "/health",
        http_method=[HttpMethod.GET, HttpMethod.HEAD],  # probes of load balancers send HEAD
        tags=["health"],
        summary="Liveness and readiness: store, embedder, LLM.",
    )
    async def health_handler(
        authorization: FromHeader[str | None] = None,
    ) -> Response[dict[str, Any]]:
        run = functools.partial(contextvars.copy_context().run, health, workbench, probe)
        loop = asyncio.get_running_loop()
        body, ready = await loop.run_in_executor(checks, run)
        allowed = functools.partial(details_allowed, resolver, authorization)
        if not await loop.run_in_executor(checks, allowed):
            body = {k: body[k] for k in ("status", "live", "ready")}
        return Response(content=body, status_code=200 if ready else 503)

    return health_handler


def exposure_of(settings: Settings, extra_hosts: tuple[str, ...] = ()) -> Exposure:
    return Exposure(
        settings.host, settings.allowed_host_list + tuple(extra_hosts), settings.allowed_origin_list
    )


def middleware_stack(
    settings: Settings,
    rate_clock: Callable[[], float],
    exposure: Exposure,
    resolver: TokenResolver,
) -> list[Middleware]:
    per_minute = settings.rate_limit_per_minute
    buckets = TokenBuckets(per_minute, rate_clock) if per_minute > 0 else None
    stack: list[Middleware] = [
        for_litestar(RequestContextMiddleware),
        DefineMiddleware(for_litestar(ExposureMiddleware), exposure=exposure),
        DefineMiddleware(
            for_litestar(RateLimitMiddleware),
            buckets=buckets,
            trusted_proxies=settings.trusted_proxy_list,
            known=resolver.known,
        ),
        # the memory browser's static files hold no data: the page loads, then asks for a token
        DefineMiddleware(
            for_litestar(ScopedAuthMiddleware),
            resolver=resolver,
            exempt=EXEMPT_PATHS | exempt_paths(),
        ),
    ]
    stack.append(
        DefineMiddleware(for_litestar(BodyLimitMiddleware), max_bytes=max_body_bytes(settings))
    )
    stack.append(
        DefineMiddleware(for_litestar(JsonBodyMiddleware), max_bytes=max_body_bytes(settings))
    )
    return stack


def create_app(
    workbench: Workbench,
    settings: Settings,
    *,
    rate_clock: Callable[[], float] = time.monotonic,
    allowed_hosts: tuple[str, ...] = (),
    embedder_loaded: threading.Event | None = None,
) -> Litestar:
    """The service app around an opened workbench (its workers are started by the caller).

    ``allowed_hosts`` adds Host names the tools and the MCP endpoint answer, beside
    ``SVC_KNOWLEDGE_ALLOWED_HOSTS`` (bound to loopback, only 127.0.0.1, localhost and ::1 by
    default: DNS-rebinding protection). ``embedder_loaded``, when
    given, is set once a background-loading local model is ready (``/health`` says "loading"
    and is 503 until then).
    """
    exposure = exposure_of(settings, allowed_hosts)
    token = settings.api_token.get_secret_value() if settings.api_token else ""
    resolver = TokenResolver(tenancy_of(workbench), token)
    mcp_server = build_mcp_server(workbench, package_version())
    managers: list[
        StreamableHTTPSessionManager
    ] = []  # a fresh session manager per app start (one may run only once)

    @asgi("/mcp", is_mount=True, copy_scope=True)
    async def mcp_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        # the same ASGI call: Litestar types its scope and events as TypedDicts, mcp as mappings
        await managers[-1].handle_request(scope, receive, send)  # type: ignore[arg-type]

    @asynccontextmanager
    async def mcp_lifespan(_app: Litestar) -> AsyncIterator[None]:
        manager = build_session_manager(mcp_server, exposure, max_body_bytes(settings))
        managers.append(manager)
        async with manager.run():
            yield
        managers.remove(manager)

    return Litestar(
        route_handlers=[
            *(tool_route(workbench, t) for t in TOOLS),
            unknown_tool,
            list_tools,
            root,
            health_route(workbench, resolver, embedder_loaded),
            mcp_endpoint,
            apidocs.assets_route(),
            *ui_routes(),  # the memory browser at /ui
        ],
        middleware=middleware_stack(settings, rate_clock, exposure, resolver),
        exception_handlers={Exception: exception_handler},
        request_max_body_size=max_body_bytes(settings),
        lifespan=[mcp_lifespan],
        plugins=[PydanticPlugin(validate_strict=True)],  # "10" is not a number
        logging_config=None,  # serving.logs owns the log format
        openapi_config=OpenAPIConfig(
            title="Knowledge Workbench",
            version=package_version(),
            path="/schema",
            render_plugins=[apidocs.render_plugin()],  # local assets: readable offline
            description="Memory tools for AI assistants over REST; the same tools over MCP "
            "at /mcp.",
        ),
    )
