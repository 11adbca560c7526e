"""Sync one process's live indexes with what other processes write to a shared store (not to be
confused with following links between facts: :mod:`workbench.search.links`).

Several processes (service replicas, ``workbench worker``, the CLI) may share one PostgreSQL
database; each holds its own in-memory rows and indexes. The database logs every write of a
memory (:mod:`workbench.store.changes`); a :class:`ChangeSync` reads that log after the
position its caches reflect and tells the indexes, as a writer in this process would: it holds
the publish gate, re-reads the changed rows and vectors, and forgets the deleted ones. It runs

* in a thread of its own, woken by ``NOTIFY`` (and at least every ``interval`` seconds), so a
  memory written elsewhere is searchable here within about a second;
* synchronously after the queue claims episodes (:meth:`catch_up`), so an episode is prepared
  on caches that hold everything written before its claim, by whichever process wrote it (the
  previous episode of its group, above all).

The process's own writes come back through the log too; it skips them (their ``origin`` is its
own). A sequence number is taken before its transaction commits, so a change may become
visible after higher numbers: a missing number is looked for again until every transaction
that was running when it was seen has ended (PostgreSQL's snapshot ``xmin``). A process that
falls further behind than the log keeps (it is pruned after an hour) re-reads everything, and
one that sees a maintenance run of another process re-reads its rows. A group replaced whole
(a re-extraction's promote: one change row of kind ``generation``) is swapped in at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from workbench.store import changes as log_sql
from workbench.store import search as sql

if TYPE_CHECKING:
    from workbench.index.publish import Upsert
    from workbench.index.rows import RowCache

log = logging.getLogger("workbench.index.sync")

CHUNK = 2048  # memories re-read per statement
RETENTION_SECONDS = 3600.0  # change rows kept (pruned by the syncs)


class Indexes(Protocol):
    """What the sync tells (:class:`~workbench.index.live.LiveIndexes`)."""

    def rebuild(self) -> None: ...

    def on_upsert(
        self, kind: str, rows: list[dict[str, Any]], vectors: np.ndarray | None = None
    ) -> None: ...

    def sync_maintenance(self) -> bool: ...

    def cached_rows(self) -> AbstractContextManager[tuple[RowCache, RowCache]]: ...

    def replace(self, removed: Mapping[str, Sequence[str]], changes: list[Upsert]) -> None: ...


class ChangeSync:
    """Applies the shared store's change log to one process's
    :class:`~workbench.index.live.LiveIndexes`."""

    def __init__(
        self,
        # a shared store: listen() and origin are PostgreSQL's, not on Store's type (#39 item 2)
        store: Any,
        indexes: Indexes,
        gate: AbstractContextManager[Any],
        interval: float = 1.0,
        start: tuple[int, dict[int, int]] | None = None,
    ):
        self.store = store
        self.indexes = indexes
        self.gate = gate
        self.interval = interval
        # the newest number applied, and the numbers missing when last read -> the xmax of
        # the snapshot that saw them
        self._last, self._gaps = start if start is not None else log_sql.position(store)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pruned = 0.0
        self.applied = 0  # memories re-read or forgotten since the start

    @property
    def position(self) -> tuple[int, dict[int, int]]:
        """The newest change applied and the numbers missing below it (see ``start``): taken
        under the publish gate, every change up to it is in the indexes."""
        with self._lock:
            return self._last, dict(self._gaps)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="workbench-change-sync", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)

    def _run(self) -> None:
        listener = None
        while not self._stop.is_set() and not getattr(self.store, "closed", False):
            try:
                if listener is None:
                    listener = self.store.listen(log_sql.CHANNEL)
                    self.catch_up()  # what was written while not listening
                listener.wait(self.interval)
                if self._stop.is_set():
                    break
                self.catch_up()
                self._maybe_prune()
            except Exception as exc:  # noqa: BLE001 - the database may be away: retry
                if getattr(self.store, "closed", False):
                    break
                log.warning(
                    "syncing from the change log failed (%s: %s); retrying in %.0f s",
                    type(exc).__name__,
                    str(exc).strip().splitlines()[0] if str(exc).strip() else "",
                    self.interval,
                )
                if listener is not None:
                    try:
                        listener.close()
                    except Exception:  # noqa: BLE001
                        pass
                    listener = None
                self._stop.wait(self.interval)
        if listener is not None:
            listener.close()

    def catch_up(self) -> int:
        """Apply the changes committed since the last call; how many memories it re-read.

        Holds the publish gate throughout, taken before its own lock: a claim calls this
        under the gate (the other order would deadlock with the sync's thread)."""
        with self.gate, self._lock:
            # the oldest transaction still running and the next to start, read before the
            # changes: a number missing now belongs to a transaction older than ``xmax``
            xmin, xmax, pruned = log_sql.horizon(self.store)
            if pruned > self._last:
                # the log no longer holds everything since this process's position
                log.warning("the change log was pruned past this process: re-reading all")
                self._last, self._gaps = log_sql.position(self.store)
                self.indexes.rebuild()
                return 0
            rows = log_sql.changes_since(self.store, self._last, sorted(self._gaps))
            seen = {seq for seq, *_ in rows}
            for seq in seen:
                self._gaps.pop(seq, None)
            top = max(seen, default=self._last)
            for missing in range(self._last + 1, top):
                if missing not in seen:
                    self._gaps.setdefault(missing, xmax)
            # a gap whose transactions have all ended is a rolled-back number: forget it
            self._gaps = {s: x for s, x in self._gaps.items() if xmin < x}
            self._last = max(self._last, top)
            # kind -> uuid -> whether its vector changed too
            wanted: dict[str, dict[str, bool]] = {"entity": {}, "fact": {}, "passage": {}}
            replaced: list[str] = []  # groups another process replaced whole (a promote)
            for _, kind, uuid, origin in rows:
                if origin == self.store.origin:
                    continue
                if kind == log_sql.GENERATION:
                    replaced.append(uuid)
                    continue
                base, _, vector = kind.partition("_")
                if base in wanted:
                    wanted[base][uuid] = wanted[base].get(uuid, False) or bool(vector)
            applied = 0
            for kind, changed in wanted.items():
                ids = list(changed)
                for start in range(0, len(ids), CHUNK):
                    chunk = ids[start : start + CHUNK]
                    applied += self._apply(kind, chunk, [u for u in chunk if changed[u]])
            for group in dict.fromkeys(replaced):
                applied += self._swap_group(group)
            self.applied += applied
            # a maintenance run elsewhere rewrote states and purged, without change rows
            self.indexes.sync_maintenance()
        return applied

    def _apply(self, kind: str, uuids: list[str], revectored: list[str]) -> int:
        """Re-read these memories of ``kind`` into the indexes, and the vectors of those in
        ``revectored``; those gone from the store are forgotten (``on_upsert`` does both)."""
        found, vectors = sql.vectors_of(self.store, kind, revectored)
        with_vector = set(found)
        ordered = found + [u for u in uuids if u not in with_vector]
        with self.gate:  # re-entered: held by catch_up
            self.indexes.on_upsert(
                kind, [{"uuid": u} for u in ordered], vectors if len(found) else None
            )
        return len(uuids)

    def _swap_group(self, group: str) -> int:
        """Re-read a group another process replaced whole (a re-extraction's promote): its
        memories now in the store, and those cached here that left it, swapped in with one
        ``replace``, so no search here sees some of the old generation and some of the new."""
        with self.indexes.cached_rows() as caches:
            cached = {
                kind: [u for u, g in zip(cache.uuids(), cache.group_ids()) if g == group]
                for kind, cache in zip(("entity", "fact"), caches)
            }
        changes: list[Upsert] = []
        for kind in ("entity", "fact"):
            stored = sql.group_uuids(self.store, kind, group)
            found, vectors = sql.vectors_of(self.store, kind, stored)
            have = set(found)
            rest = sorted({*stored, *cached[kind]} - have)
            rows: list[dict[str, Any]] = [{"uuid": u} for u in found + rest]
            changes.append((kind, rows, vectors))
        with self.gate:  # re-entered: held by catch_up
            self.indexes.replace({}, changes)
        return sum(len(rows) for _, rows, _ in changes)

    def _maybe_prune(self) -> None:
        now = time.monotonic()
        if now - self._pruned >= 60.0:
            self._pruned = now
            log_sql.prune(self.store, RETENTION_SECONDS)
