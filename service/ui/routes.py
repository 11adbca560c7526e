"""Routes of the memory browser (see :mod:`service.ui`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import HttpMethod, Request, Response, get, route
from litestar.openapi import ResponseSpec
from litestar.params import FromPath

from service.api.access import caller_of
from service.api.responses import ERRORS, ErrorBody
from workbench.errors import NotFound

STATIC = Path(__file__).with_name("static")
PREFIX = "/ui"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}


def static_files() -> dict[str, Path]:
    """The shipped files by their path under ``static/`` (only these are ever served)."""
    return {
        p.relative_to(STATIC).as_posix(): p
        for p in sorted(STATIC.rglob("*"))
        if p.is_file() and p.suffix in MEDIA_TYPES
    }


def exempt_paths() -> frozenset[str]:
    """The paths that need no bearer token: the page and its static files."""
    return frozenset({PREFIX, f"{PREFIX}/", *(f"{PREFIX}/{name}" for name in static_files())})


def _file(name: str) -> Response[bytes]:
    path = static_files().get(name)
    if path is None:
        raise NotFound(f"no file {PREFIX}/{name} in the memory browser")
    return Response(content=path.read_bytes(), media_type=MEDIA_TYPES[path.suffix], headers=HEADERS)


@route(
    [PREFIX, f"{PREFIX}/"],
    http_method=[HttpMethod.GET, HttpMethod.HEAD],
    include_in_schema=False,
    sync_to_thread=False,
)
def ui_page() -> Response[bytes]:
    return _file("index.html")


@route(
    f"{PREFIX}/{{name:path}}",
    http_method=[HttpMethod.GET, HttpMethod.HEAD],
    include_in_schema=False,
    sync_to_thread=False,
)
def ui_static(name: FromPath[str]) -> Response[bytes]:
    return _file(name.lstrip("/"))


@get(
    f"{PREFIX}/session",
    tags=["ui"],
    summary="Who the bearer token is: its groups and whether it may write (memory browser).",
    # once any token exists, a request without a valid one is refused as every tool's is
    responses={401: ResponseSpec(ErrorBody, description=ERRORS[401], generate_examples=False)},
    sync_to_thread=False,
)
def ui_session(request: Request[Any, Any, Any]) -> Response[dict[str, Any]]:
    caller = caller_of(request.scope)
    if caller is None:  # no token in use: the local user, every group, every tool
        body: dict[str, Any] = {"token": None, "admin": True, "read_only": False, "groups": None}
    else:
        groups = None if caller.admin else sorted(caller.groups or ())
        body = {
            "token": caller.name,
            "admin": caller.admin,
            "read_only": caller.read_only,
            "groups": groups,
        }
    return Response(content=body, headers={"Cache-Control": "no-store"})


def ui_routes() -> list[Any]:
    return [ui_page, ui_session, ui_static]
