"""Access tracking for search hits: metrics now, database writes batched off the hot path.

Every memory a search returns is an access (``docs/decay.md``): ``last_accessed_at = now``,
``access_count + 1``, ``decay_score = 0`` and DORMANT/ARCHIVED -> ACTIVE (a reactivation).

:meth:`AccessTracker.record` does the bookkeeping in memory (metrics, and the new values on the
returned rows) and queues the change; the queue is written with one UPDATE per memory kind
(:func:`workbench.store.access.apply_accesses`) by a background flusher every
``flush_interval`` seconds, synchronously when ``max_pending`` memories wait, and on
:meth:`flush` / :meth:`close` — so no access is lost on an orderly shutdown. A read-only store
records none (it cannot be written). The search engine
applies the new values to its row cache at once; when it re-reads rows from the store it holds
:meth:`consistent_read` and re-applies what is not written yet (:meth:`pending_of`; no double
reactivation, no lost count). ``background=False`` writes at the end of every search.

Lock order (to stay deadlock-free): the flush lock, then the caller's lock, then this
tracker's lock, then the store's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workbench.clock import as_utc
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store.access import REACTIVATED_FROM, apply_accesses

log = logging.getLogger("workbench.index.access")

__all__ = ["AccessTracker", "access_update", "days_between"]


@dataclass
class _Pending:
    accessed_at: datetime
    count: int


def days_between(earlier: datetime | None, later: datetime) -> float | None:
    if earlier is None:
        return None
    since = as_utc(earlier)
    if since is None:
        return None
    return max(0.0, (later - since).total_seconds() / 86_400.0)


def access_update(row: dict[str, Any], now: datetime) -> tuple[dict[str, Any], str | None]:
    """The row after one access at ``now`` and the state it was reactivated from (or None)."""
    state = row["lifecycle_state"]
    reactivated = state if state in REACTIVATED_FROM else None
    updated = dict(row)
    updated["last_accessed_at"] = now
    updated["access_count"] = int(row.get("access_count") or 0) + 1
    updated["decay_score"] = 0.0
    if reactivated:
        updated["lifecycle_state"] = "ACTIVE"
    return updated, reactivated


class AccessTracker:
    """Records accesses of returned memories; see the module docstring."""

    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        background: bool = True,
        flush_interval: float = 1.0,
        max_pending: int = 10_000,
    ):
        self._store = store
        self._metrics = metrics
        self._background = background
        self._interval = flush_interval
        self._max_pending = max_pending
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    # --- the hot path -------------------------------------------------------------------
    def pending_of(
        self, kind: str, uuids: Iterable[str] | None = None
    ) -> list[tuple[str, datetime, int]]:
        """The accesses of ``kind`` (of these ``uuids``, or all) not yet written: (uuid, latest
        access, count), to apply to rows just read from the store
        (:meth:`~workbench.index.rows.RowCache.access`)."""
        with self._lock:
            if uuids is None:
                return [(u, p.accessed_at, p.count) for (k, u), p in self._pending.items()
                        if k == kind]  # fmt: skip
            found = ((u, self._pending.get((kind, u))) for u in uuids)
            return [(u, p.accessed_at, p.count) for u, p in found if p is not None]

    def record(self, kind: str, rows: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
        """Account one access of each row at ``now``; return the rows as they are after it.
        The write is queued: call :meth:`settle` afterwards (outside the caller's locks).
        On a read-only store (a reader of a file no service holds) a search is no access:
        nothing is counted or queued, and the rows come back as they are."""
        if self._store.read_only:
            return rows
        out = []
        for row in rows:
            updated, reactivated = access_update(row, now)
            days = days_between(row.get("last_accessed_at"), now)
            self._metrics.record_access(int(row["importance"]), row["lifecycle_state"], days)
            if reactivated:
                self._metrics.record_reactivation(reactivated)
            out.append(updated)
        self._queue(kind, [r["uuid"] for r in rows], now)
        return out

    def _queue(self, kind: str, uuids: list[str], now: datetime) -> None:
        if not uuids:
            return
        with self._lock:
            for uuid in uuids:
                pending = self._pending.get((kind, uuid))
                if pending is None:
                    self._pending[(kind, uuid)] = _Pending(now, 1)
                else:
                    pending.accessed_at = max(pending.accessed_at, now)
                    pending.count += 1

    def settle(self) -> None:
        """After :meth:`record`, outside any lock of the caller: write now when writing is
        synchronous or the queue is full, else make sure the background flusher runs."""
        with self._lock:
            size = len(self._pending)
        if not size:
            return
        if not self._background or self._closed or size >= self._max_pending:
            self.flush()
        else:
            self._ensure_thread()

    # --- writing ------------------------------------------------------------------------
    def flush(self) -> int:
        """Write every queued access; return how many memories were updated."""
        with self._flush_lock:
            with self._lock:
                batch, self._pending = self._pending, {}
            if not batch:
                return 0
            written: set[str] = set()
            try:
                for kind in ("entity", "fact", "passage"):
                    items = [(u, p) for (k, u), p in batch.items() if k == kind]
                    if items:
                        apply_accesses(
                            self._store,
                            kind,
                            [u for u, _ in items],
                            [p.accessed_at for _, p in items],
                            [p.count for _, p in items],
                        )
                    written.add(kind)
            except BaseException:
                self._merge_back({k: p for k, p in batch.items() if k[0] not in written})
                raise
            return len(batch)

    def _merge_back(self, batch: dict[tuple[str, str], _Pending]) -> None:
        with self._lock:
            for key, old in batch.items():
                current = self._pending.get(key)
                if current is None:
                    self._pending[key] = old
                else:
                    current.count += old.count
                    current.accessed_at = max(current.accessed_at, old.accessed_at)

    @contextmanager
    def consistent_read(self) -> Iterator[None]:
        """Hold while fetching rows and calling :meth:`overlay`: no flush runs meanwhile, so a
        row is either already updated in the store or still covered by the queue."""
        with self._flush_lock:
            yield

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    # --- the background flusher ---------------------------------------------------------
    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._run, name="workbench-access-flusher", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self.flush()
            except Exception:  # keep the queue; the next flush (or close) retries
                log.exception("writing access updates failed; will retry")

    def close(self) -> None:
        """Stop the flusher and write everything still queued."""
        self._closed = True
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=10)
        self.flush()
