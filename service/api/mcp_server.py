"""The tools over MCP (official ``mcp`` SDK, low-level ``Server``): streamable HTTP mounted at
``/mcp`` on the service app, and stdio for ``workbench mcp``.

Tools, names, descriptions and input schemas all come from :data:`service.api.tools.TOOLS`, the
same table REST uses. A tool result is the facade's dict as ``structuredContent`` plus the same
JSON as text; a failure is ``isError`` with ``{"error": {"type", "message"}}`` (and
``retry_after``, in seconds, for an error that passes by itself: REST's ``Retry-After``).
"""

from __future__ import annotations

import functools
import json
import logging
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from service.api.access import caller_of
from service.api.tools import TOOLS, TOOLS_BY_NAME, Tool
from serving.addresses import is_loopback
from serving.errors import describe, error_payload, retry_after_of
from serving.logs import REQUEST_ID, new_request_id
from serving.middleware import Exposure

if TYPE_CHECKING:
    from service.api.seam import ToolTarget
    from workbench.store.tenancy import Caller

log = logging.getLogger("service.mcp")

SERVER_NAME = "knowledge-workbench"
INSTRUCTIONS = (
    "Long-term memory. Use add_memory to remember information (what was said is searchable at "
    "once; facts are extracted in the background), search_memory to recall facts and what was "
    "said, search_memory_facts for relationships and events, search_memory_nodes for entities. "
    "Searches need no LLM and are cheap; prefer specific queries."
)


def mcp_tool(tool: Tool) -> types.Tool:
    return types.Tool(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema(),
        annotations=types.ToolAnnotations(
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive,
            idempotent_hint=tool.read_only,
            open_world_hint=False,
        ),
    )


def _result(payload: dict[str, Any], is_error: bool = False) -> types.CallToolResult:
    text = json.dumps(payload, default=str, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=payload, is_error=is_error
    )


async def call_tool(
    workbench: ToolTarget,
    name: str,
    arguments: dict[str, Any] | None,
    caller: Caller | None = None,
) -> types.CallToolResult:
    """Run one tool in a worker thread; every failure becomes an ``isError`` result."""
    token = REQUEST_ID.set(f"mcp-{new_request_id()}")
    try:
        tool = TOOLS_BY_NAME.get(name)
        if tool is None:
            return _result(
                error_payload(
                    "not_found", f"no tool named {name!r}; tools: {', '.join(TOOLS_BY_NAME)}"
                ),
                True,
            )
        try:
            result = await anyio.to_thread.run_sync(
                functools.partial(tool.invoke, workbench, arguments, caller)
            )
        except Exception as exc:  # noqa: BLE001 - mapped like HTTP errors, logged when a fault
            status, kind, message = describe(exc)
            if status == 500 and not getattr(exc, "relayed", False):
                log.error("tool %s failed", name, exc_info=exc)
                message = f"internal error; see the server log for request id {REQUEST_ID.get()}"
            elif status >= 500:
                log.warning("tool %s: %s: %s", name, kind, message)
            return _result(error_payload(kind, message, retry_after_of(exc)), True)
        log.info("tool %s ok", name, extra={"transport": "mcp"})
        return _result(result)
    finally:
        REQUEST_ID.reset(token)


def build_mcp_server(workbench: ToolTarget, version: str = "0.1.0") -> Server:
    tools = [mcp_tool(t) for t in TOOLS]
    schemas = {t.name: t.input_schema() for t in TOOLS}

    async def on_list_tools(
        _ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        # over HTTP the auth middleware put the caller into the request's scope; stdio has
        # no request (the local user: every group)
        request = getattr(ctx, "request", None)
        caller = caller_of(getattr(request, "scope", None))
        return await call_tool(workbench, params.name, params.arguments, caller)

    return Server(
        SERVER_NAME,
        version=version,
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
        get_tool_input_schema=schemas.get,
    )


def transport_security(exposure: Exposure) -> TransportSecuritySettings:
    """The SDK's own DNS-rebinding protection, with the same names and origins as the tools
    (:class:`~serving.middleware.Exposure`, which also guards ``/mcp`` first): on when the
    service is bound to loopback or names its hosts; off otherwise (the token protects it)."""
    if not is_loopback(exposure.bind_host) and not exposure.allowed_hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = ["127.0.0.1", "localhost", "[::1]", exposure.bind_host, *exposure.allowed_hosts]
    names = list(
        dict.fromkeys(f"[{n}]" if ":" in n and not n.startswith("[") else n for n in names)
    )
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[h for name in names for h in (name, f"{name}:*")],
        allowed_origins=[
            *(f"{scheme}://{name}:*" for name in names for scheme in ("http", "https")),
            *(f"{scheme}://{name}" for name in names for scheme in ("http", "https")),
            *exposure.allowed_origins,
        ],
    )


def build_session_manager(
    server: Server, exposure: Exposure, max_body_bytes: int
) -> StreamableHTTPSessionManager:
    """Stateless JSON-response streamable HTTP: every POST is self-contained."""
    return StreamableHTTPSessionManager(
        app=server,
        json_response=True,
        stateless=True,
        security_settings=transport_security(exposure),
        max_request_body_size=max_body_bytes,
    )


async def run_stdio(workbench: ToolTarget) -> None:
    """Serve MCP over this process's stdin/stdout until the client closes it."""
    from mcp.server.stdio import stdio_server

    server = build_mcp_server(workbench)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
