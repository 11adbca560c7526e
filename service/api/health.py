"""``GET /health`` on the main port: liveness and readiness in one answer.

Ready means the store answers (and takes writes, once one failed for want of disk space) and
the embedder embeds (probed at most every ``ttl`` seconds).
No LLM is not "unready": episodes are accepted and wait, so the status is ``degraded`` and
the answer says how to configure one. A configured LLM whose recent calls fail (``failing``,
since when, with what error type) or that is known to be down (a local model server being
restarted) is ``degraded`` too: the ``llm`` check shows it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workbench.embedding import Embedder
    from workbench.facade import Workbench

LLM_HOWTO = "not configured: set SVC_KNOWLEDGE_COMPAT_BASE_URL and SVC_KNOWLEDGE_MODEL_NAME"


class EmbedderProbe:
    """Embed one short text, remembering the verdict for ``ttl`` seconds."""

    def __init__(
        self,
        embedder: Embedder,
        ttl: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        loaded: threading.Event | None = None,
    ):
        self.embedder = embedder
        self.ttl = ttl
        self.clock = clock
        self.loaded = loaded  # unset while a local model loads in the background
        self._lock = threading.Lock()
        self._verdict: tuple[float, dict[str, Any]] | None = None

    def check(self) -> dict[str, Any]:
        if self.loaded is not None and not self.loaded.is_set():
            return {
                "ok": False,
                "loading": True,
                "model": self.embedder.model,
                "dimensions": self.embedder.dimensions,
                "detail": "the local embedding model is loading",
            }
        with self._lock:
            now = self.clock()
            if self._verdict is None or now - self._verdict[0] > self.ttl:
                self._verdict = (now, self._probe())
            return self._verdict[1]

    def _probe(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "model": self.embedder.model,
            "dimensions": self.embedder.dimensions,
        }
        url = getattr(self.embedder, "base_url", None)
        if url:
            info["url"] = url
        try:
            self.embedder.embed(["health check"])
        except Exception as exc:  # noqa: BLE001 - reported, not raised
            return {"ok": False, **info, "detail": getattr(exc, "message", str(exc))}
        return {"ok": True, **info}


def store_check(workbench: Workbench) -> dict[str, Any]:
    """The store answers, and takes writes again if the last one failed (a full disk); a
    database server known to be down is reported from that state, without waiting for it."""
    outage = workbench.store.outage()
    if outage is not None:
        return {
            "ok": False,
            "path": workbench.store.path,
            "down_since": outage["since"],
            "detail": f"the database is unreachable: {outage['detail']}",
        }
    try:
        workbench.store.ping()
        if getattr(workbench.store, "write_failure", None):
            workbench.store.probe_write()
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return {
            "ok": False,
            "path": workbench.store.path,
            "detail": getattr(exc, "message", str(exc)),
        }
    return {"ok": True, "path": workbench.store.path}


def search_check(workbench: Workbench) -> dict[str, Any]:
    """The search indexes: memories per kind and whether the HNSW graph serves yet (search is
    exact, and slower on a large store, while it is built after a start). Informational:
    search works either way."""
    indexes = getattr(getattr(workbench, "search", None), "indexes", None)
    status = getattr(indexes, "status", None)
    return {"ok": True, **(status() if status is not None else {})}


def llm_check(workbench: Workbench) -> dict[str, Any]:
    chat = getattr(workbench, "chat", None)
    if chat is None:
        return {"ok": False, "configured": False, "detail": LLM_HOWTO}
    check = {"ok": True, "configured": True, "model": getattr(chat, "model", None)}
    prices = getattr(chat, "prices", None)
    if prices is not None and check["model"]:  # a model without a price counts at USD 0
        check["priced"] = check["model"] in prices
        if not check["priced"]:
            check["price_detail"] = (
                f"no price for model {check['model']!r}: its calls count at USD 0 and no "
                "group's daily budget is reached (add it with SVC_KNOWLEDGE_PRICE_TABLE_PATH)"
            )
    health = getattr(chat, "health", None)
    if health is not None:  # what the calls observed: a dead or refusing backend shows
        check.update(health.status())
        check["ok"] = check["state"] == "ok"
    return check


def health(workbench: Workbench, probe: EmbedderProbe) -> tuple[dict[str, Any], bool]:
    """``(body, ready)``: ``status`` is ok, degraded (no LLM, or it fails or is down) or
    unavailable (not ready)."""
    checks = {
        "store": store_check(workbench),
        "embedder": probe.check(),
        "llm": llm_check(workbench),
        "search": search_check(workbench),
    }
    ready = checks["store"]["ok"] and checks["embedder"]["ok"]
    status = "unavailable" if not ready else ("ok" if checks["llm"]["ok"] else "degraded")
    return {"status": status, "live": True, "ready": ready, "checks": checks}, ready
