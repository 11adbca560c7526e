"""The API docs pages at ``/schema``, from local assets only (they work offline).

Litestar's render plugins load their scripts, styles, fonts and favicon from CDNs by default,
so the pages are blank without internet. Swagger UI's files come instead from the
``swagger-ui-py`` package (Swagger UI 5, which reads OpenAPI 3.1) and are served by the
server at ``/schema/assets/``. Both servers (the knowledge service and the voice server) use
this leaf module; it imports nothing of either.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from litestar import get
from litestar.datastructures import CacheControlHeader
from litestar.exceptions import NotFoundException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.params import FromPath
from litestar.response import File

ASSETS_PATH = "/schema/assets"
# the files the page loads (the rest of the package's folder is never served)
ASSET_FILES = (
    "swagger-ui-bundle.js",
    "swagger-ui-standalone-preset.js",
    "swagger-ui.css",
    "favicon-32x32.png",
)


def swagger_assets_dir() -> Path:
    """The folder of Swagger UI's built files inside the installed ``swagger-ui-py``."""
    spec = importlib.util.find_spec("swagger_ui")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the swagger-ui-py package is missing: pip install swagger-ui-py")
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def render_plugin() -> SwaggerRenderPlugin:
    """Swagger UI at ``/schema`` (and ``/schema/swagger``), every URL on this server."""
    return SwaggerRenderPlugin(
        js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        css_url=f"{ASSETS_PATH}/swagger-ui.css",
        standalone_preset_js_url=f"{ASSETS_PATH}/swagger-ui-standalone-preset.js",
        favicon=f"<link rel='icon' type='image/png' href='{ASSETS_PATH}/favicon-32x32.png'>",
        path=["/", "/swagger"],
    )


def assets_route() -> HTTPRouteHandler:
    """``GET /schema/assets/<file>``: only the files the page loads, cached for a day."""
    folder = swagger_assets_dir()
    files = {name: folder / name for name in ASSET_FILES}
    missing = [str(path) for path in files.values() if not path.is_file()]
    if missing:
        raise RuntimeError(f"swagger-ui-py is incomplete, missing: {', '.join(missing)}")

    @get(
        f"{ASSETS_PATH}/{{name:str}}",
        include_in_schema=False,
        cache_control=CacheControlHeader(max_age=86400),
        sync_to_thread=False,
    )
    def api_docs_asset(name: FromPath[str]) -> File:
        if name not in files:
            raise NotFoundException(f"no API docs asset {name!r}")
        return File(files[name], filename=name, content_disposition_type="inline")

    return api_docs_asset
