"""The metrics port (9090, or 9091 with ``--dev``): ``GET /metrics`` and ``GET /health/decay``.

A separate small Litestar app so that Prometheus scrapes never queue behind tool calls and the
port can be firewalled differently from the tools. It binds ``SVC_KNOWLEDGE_METRICS_HOST``
(loopback by default, whatever the tools' ``--host``); with ``SVC_KNOWLEDGE_METRICS_TOKEN`` both
paths need ``Authorization: Bearer <token>`` (Prometheus: ``authorization.credentials``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from litestar import Litestar, Response, get
from litestar.middleware import DefineMiddleware

from serving.asgi import for_litestar
from serving.errors import exception_handler
from serving.middleware import BearerAuthMiddleware
from workbench.metrics import CONTENT_TYPE

if TYPE_CHECKING:
    from workbench.facade import Workbench

log = logging.getLogger("service.metrics")

METRICS_PATH = "/metrics"


def refresh_gauges(workbench: Workbench) -> None:
    """Bring the gauges (memories by state, averages, queue depth) up to the database."""
    workbench.refresh_gauges()


def scrape(workbench: Workbench) -> bytes:
    """The text exposition of the workbench registry, gauges refreshed first."""
    try:
        refresh_gauges(workbench)
    except Exception as exc:  # noqa: BLE001 - a stale gauge must not fail the scrape
        log.warning("gauge refresh failed before a scrape: %s", exc)
    return workbench.metrics.exposition()


def create_metrics_app(workbench: Workbench, token: str | None = None) -> Litestar:
    @get(METRICS_PATH, sync_to_thread=True)
    def metrics() -> Response[bytes]:
        # Litestar appends the charset to a text media type itself: name the type without it
        return Response(content=scrape(workbench), media_type=CONTENT_TYPE.split("; charset")[0])

    @get("/health/decay", sync_to_thread=True)
    def health_decay() -> dict[str, Any]:
        # always 200: the spec's JSON carries the verdict in "status" (healthy/degraded/...)
        return cast("dict[str, Any]", workbench.get_knowledge_health())  # a TypedDict, sent as is

    return Litestar(
        route_handlers=[metrics, health_decay],
        middleware=[
            DefineMiddleware(
                for_litestar(BearerAuthMiddleware),
                token=token,
                exempt=(),
                setting="SVC_KNOWLEDGE_METRICS_TOKEN",
            )
        ]
        if token
        else [],
        exception_handlers={Exception: exception_handler},
        openapi_config=None,
        logging_config=None,  # serving.logs owns the log format
    )
