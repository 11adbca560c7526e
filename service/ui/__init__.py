"""The memory browser: a page at ``/ui`` that shows, searches and corrects what the memory
holds, through the same tools (``POST /tools/<name>``) and checks as REST and MCP.

* :func:`ui_routes` — the page's static files (shipped in ``static/``, no build step, nothing
  fetched from elsewhere) and ``GET /ui/session`` (who the bearer token is: its groups,
  whether it is read-only or admin), which the token guard covers like the tools.
* :data:`HEADERS` — every file goes out with a strict Content-Security-Policy (scripts and
  styles from the service only, no inline code, no framing, no form posts, requests only to
  the service), ``nosniff`` and no referrer.
* :func:`exempt_paths` — the static files need no token (they hold no data: the page asks
  for the token, then the tools answer within its scope).
"""

from __future__ import annotations

from service.ui.routes import HEADERS, STATIC, exempt_paths, ui_routes

__all__ = ["HEADERS", "STATIC", "exempt_paths", "ui_routes"]
