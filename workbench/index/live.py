"""The live indexes: per memory kind a :class:`~workbench.index.vector.index.VectorIndex`, a
:class:`~workbench.index.keyword.bm25.KeywordIndex` and a :class:`~workbench.index.rows.RowCache`,
loaded from the store at open (the store is the source of truth) and kept in step with it.

Keeping in step: writers in this process tell :class:`LiveIndexes` through its
:class:`~workbench.index.publish.Publisher` (:meth:`~LiveIndexes.on_upsert` after writing or
changing memories: it re-reads those rows, so a changed summary or an invalidated fact only
needs ``[{"uuid": ..., "group_id": ...}]`` and ``vectors=None``; :meth:`~LiveIndexes.on_delete`
after deleting; :meth:`~LiveIndexes.refresh_states` after a maintenance run or a recovery).
What other processes write to a shared store arrives through its change log
(:class:`~workbench.index.sync.ChangeSync`). A maintenance run recorded in
``maintenance_runs`` is also noticed by itself (polled at most every ``sync_seconds``) and
reloads the rows in the background. The indexes are saved beside the database
(:mod:`workbench.index.saves`) at close, after a background graph build and periodically.

Every read or swap of the indexes holds :attr:`LiveIndexes.lock`; a search holds it only for
its reads (see :class:`workbench.search.searcher.Searcher`).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np

from workbench.errors import InvalidInput, StoreUnavailable
from workbench.index import row_snapshot
from workbench.index.access import AccessTracker
from workbench.index.keyword.bm25 import KeywordIndex
from workbench.index.publish import Publisher, Upsert
from workbench.index.row_snapshot import Stamp
from workbench.index.rows import RowCache
from workbench.index.saves import Current, IndexSaves
from workbench.index.sync import ChangeSync
from workbench.index.vector.index import KINDS, VectorIndex, load_index
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store import changes as changes_sql
from workbench.store import search as sql

__all__ = ["LiveIndexes", "check_kind", "keyword_text", "keyword_texts"]

log = logging.getLogger("workbench.index.live")

_TEXT_COLUMN = {"fact": "fact", "passage": "text"}
# rounds of the change log read at an open from row snapshots (each a bounded number of rows)
CATCH_UP_ROUNDS = 100


def keyword_text(kind: str, row: Mapping[str, Any]) -> str:
    """What the keyword index holds of a memory: entity ``name + summary``, the fact, or the
    passage's text."""
    if kind == "entity":
        return _entity_text(row["name"], row.get("summary"))
    return str(row[_TEXT_COLUMN[kind]])


def _entity_text(name: str | None, summary: str | None) -> str:
    summary = (summary or "").strip()
    return f"{name}: {summary}" if summary else str(name)


def keyword_texts(kind: str, cache: RowCache) -> list[str]:
    """:func:`keyword_text` of every row of the cache, in the order of its ``uuids()``."""
    if kind == "entity":
        return list(map(_entity_text, cache.texts("name"), cache.texts("summary")))
    return [str(t) for t in cache.texts(_TEXT_COLUMN[kind])]


def check_kind(kind: str) -> str:
    """``kind`` when it is a memory kind; else :class:`InvalidInput`."""
    if kind not in KINDS:
        raise InvalidInput(f"unknown memory kind {kind!r}; expected one of {', '.join(KINDS)}")
    return kind


class LiveIndexes:
    """The rows, keyword and vector indexes of every memory kind, in step with the store.

    On a shared store, ``sync`` starts the thread that applies other processes' writes at once
    (else only :meth:`catch_up` applies them); ``publisher``: the gate writers tell these
    indexes through (by default one of their own)."""

    def __init__(
        self,
        store: Store,
        metrics: Metrics,
        saves: IndexSaves,
        *,
        ann_threshold: int = 20_000,
        index_options: dict[str, Any] | None = None,
        sync_seconds: float = 2.0,
        access_background: bool = True,
        flush_interval: float = 1.0,
        sync: bool = True,
        publisher: Publisher | None = None,
    ):
        self.store = store
        self.saves = saves
        self.ann_threshold = ann_threshold
        self.sync_seconds = sync_seconds
        self._index_options = index_options or {}
        self.lock = threading.RLock()
        self._sync_thread: threading.Thread | None = None
        self._closed = False
        self._marker = -1  # the maintenance run the rows reflect (-1: not loaded yet)
        # the maintenance run the rows reflect while they are re-read after an older snapshot
        self._rows_marker: int | None = None
        self._checked = 0.0
        self.tracker = AccessTracker(
            store, metrics, background=access_background, flush_interval=flush_interval
        )
        self.vectors: dict[str, VectorIndex] = {}
        self.keywords: dict[str, KeywordIndex] = {}
        self.rows: dict[str, RowCache] = {}
        # what writers of entities and facts tell these indexes through, under its gate (the
        # owner's, telling the owner, when given: a search engine passes on what it is told)
        self.publisher = publisher if publisher is not None else Publisher(self)
        # a store shared with other processes: the change log position before loading
        shared = store.shared
        start = changes_sql.position(store) if shared else None
        self.saves.fetch(KINDS)  # the indexes another replica saved (a shared store)
        stamps = self._open()
        # and what other processes write, through the store's change log: from where the
        # oldest row snapshot loaded stands, else from before the load
        positions = [s.changes for s in stamps if s.changes is not None]
        if positions:
            start = row_snapshot.earliest(positions)
        self.replica_sync: ChangeSync | None = None
        if shared:
            self.replica_sync = ChangeSync(store, self, self.publisher, start=start)
        if positions:
            self._caught_up_from(stamps)
        if self.replica_sync is not None and sync:
            self.replica_sync.start()
        self.saves.start(self.save, KINDS)  # periodic saves of what changed (if set)

    def _open(self) -> list[Stamp]:
        """The first load: from the row snapshots saved with the graphs when they are
        current, else every row and vector read once, so DuckDB need not keep those blocks
        cached meanwhile (the start-up's peak memory) nor after; the stamps of the snapshots
        loaded."""
        try:
            with self.store.lean_cache():
                return self._load(snapshots=True)
        except MemoryError:
            log.warning("the search indexes' load ran out of memory: loading them again, "
                        "DuckDB's cache unbounded", exc_info=True)  # fmt: skip
            return self._load(snapshots=False)

    def _caught_up_from(self, stamps: list[Stamp]) -> None:
        """After rows were loaded from snapshots: what was written since, applied before the
        open returns (as a full read would hold it), and a maintenance run since re-read in
        the background (the rows serve meanwhile, as after a run of another process)."""
        with self.lock:
            # the run read before the load (the catch-up's own look at it must not re-read
            # every row now; a run during the open is re-read by that look, as always)
            marker = self._marker
            behind = [stamp.marker for stamp in stamps if stamp.marker != marker]
            # what a save stamps meanwhile: the states of the older run
            self._rows_marker = min(behind) if behind else None
        if self.replica_sync is not None:
            for _ in range(CATCH_UP_ROUNDS):  # the log is read a bounded number of rows a time
                before = self.replica_sync.position[0]
                self.replica_sync.catch_up()
                if self.replica_sync.position[0] == before:
                    break
        if behind:
            self._sync_thread = threading.Thread(
                target=self.refresh_states, name="workbench-search-sync", daemon=True
            )
            self._sync_thread.start()

    # --- loading ----------------------------------------------------------------------------
    def rebuild(self) -> None:
        """(Re)load the indexes and rows of every kind from the store. Upserts and deletes
        told meanwhile wait for it (they would otherwise be lost in the swap)."""
        self._load(snapshots=False)

    def _load(self, snapshots: bool) -> list[Stamp]:
        """:meth:`rebuild`; with ``snapshots``, the rows of a kind come from the snapshot
        saved with its graph when that is current (the stamps of those loaded so)."""
        with self.tracker.consistent_read():
            marker = sql.maintenance_marker(self.store)
            # the kinds in threads: most of a load is in DuckDB, Arrow, numpy and usearch,
            # which release the GIL (1M + 1M memories: 27 s instead of 34, for ~90 MB more
            # resident: the allocators keep what two threads freed interleaved)
            load = functools.partial(self._load_kind, snapshots=snapshots)
            with ThreadPoolExecutor(len(KINDS), thread_name_prefix="workbench-open") as pool:
                loaded = dict(zip(KINDS, pool.map(load, KINDS)))
            with self.lock:  # accesses recorded meanwhile are still queued: apply them all
                for kind in KINDS:
                    self._overlay(kind, loaded[kind][1])
                self.vectors = {kind: loaded[kind][0] for kind in KINDS}
                self.rows = {kind: loaded[kind][1] for kind in KINDS}
                self.keywords = {kind: loaded[kind][2] for kind in KINDS}
                self._marker, self._checked = marker, time.monotonic()
                self._rows_marker = None
        return [stamp for kind in KINDS if (stamp := loaded[kind][3]) is not None]

    def _load_kind(
        self, kind: str, snapshots: bool = False
    ) -> tuple[VectorIndex, RowCache, KeywordIndex, Stamp | None]:
        """The vector index, rows and keyword index of ``kind``, from the store (and the
        indexes saved beside it), and the stamp of the row snapshot they came from."""
        self.saves.verify(kind)  # a save not as written is removed: rebuilt, counted
        saved = self.saves.open_rows(kind) if snapshots else None
        vectors = load_index(
            self.store,
            kind,
            self.ann_threshold,
            self.saves.folder,
            # a graph built in the background is saved at once (with the keywords): a
            # process killed later restarts from it
            on_built=functools.partial(self._save_built, kind),
            # rows saved with the graph on a shared store: its vectors, caught up from the
            # change log as the rows are (not each memory's vector number read)
            held=self._held(saved),
            **self._index_options,
        )
        if saved is not None:
            cache, stamp = saved
            # a shared store: the keywords saved with those rows, caught up with them from
            # the change log (no fingerprint of every document)
            keywords = self.saves.keywords_as_saved(kind, stamp)
            if keywords is not None:
                return vectors, cache, keywords, stamp
        else:
            cache, stamp = RowCache(kind), None
            cache.load(self.store)
        return vectors, cache, self._keyword_index(kind, cache), stamp

    @staticmethod
    def _held(saved: tuple[RowCache, Stamp] | None) -> Callable[[str], str | None] | None:
        """What the store held at a row snapshot's stamp, when the change log catches the
        vectors up from it as well (each memory's group; None: not held)."""
        if saved is None or saved[1].changes is None:
            return None
        rows = saved[0]
        return functools.partial(rows.value, column="group_id")

    def _keyword_index(self, kind: str, cache: RowCache) -> KeywordIndex:
        """The keyword index of these rows: the one saved beside the database caught up with
        them, else built."""
        uuids, texts, groups = cache.uuids(), keyword_texts(kind, cache), cache.group_ids()
        saved = self.saves.open_keywords(uuids, texts, groups, kind)
        if saved is not None:
            return saved
        index = KeywordIndex()
        index.add(uuids, texts, groups)
        return index

    def _overlay(self, kind: str, cache: RowCache, uuids: set[str] | None = None) -> None:
        """Apply to freshly read rows (these ``uuids``, or all) the accesses not yet written
        to the store."""
        for uuid, when, count in self.tracker.pending_of(kind, uuids):
            cache.access([uuid], when, count)

    # --- told by writers (through the publisher) --------------------------------------------
    def on_upsert(
        self, kind: str, rows: list[dict[str, Any]], vectors: np.ndarray | None = None
    ) -> None:
        """Index new or changed memories of ``kind`` after they are written to the store.

        ``rows`` need ``uuid`` (and ``group_id``); the rest is re-read from the store.
        ``vectors`` replace the embeddings in the index of the first ``len(vectors)`` rows (one
        each); the other rows, or all with None, keep theirs.
        """
        check_kind(kind)
        if vectors is not None and len(vectors) > len(rows):
            raise ValueError(f"{len(vectors)} vectors for {len(rows)} {kind} rows")
        if not rows:
            return
        with self.tracker.consistent_read(), self.lock:
            gone = self._upsert_locked(kind, rows, vectors)
        if gone:
            self.on_delete(kind, gone)

    def _upsert_locked(
        self, kind: str, rows: list[dict[str, Any]], vectors: np.ndarray | None
    ) -> list[str]:
        """:meth:`on_upsert` under the caller's locks; the uuids no longer in the store."""
        self.saves.changed(kind)
        uuids = [r["uuid"] for r in rows]
        fresh = sql.load_rows(self.store, kind, uuids)
        present = {r["uuid"] for r in fresh}
        self.rows[kind].put(fresh)
        self._overlay(kind, self.rows[kind], present)
        if vectors is not None and len(vectors):
            keep = [i for i, u in enumerate(uuids[: len(vectors)]) if u in present]
            self.vectors[kind].add(
                [uuids[i] for i in keep],
                np.asarray(vectors)[keep],
                [self.rows[kind].value(uuids[i], "group_id") for i in keep],
            )
        self._index_words(kind, fresh)
        return [u for u in uuids if u not in present]

    def _index_words(self, kind: str, rows: Sequence[Mapping[str, Any]]) -> None:
        self.keywords[kind].add(
            [r["uuid"] for r in rows],
            [keyword_text(kind, r) for r in rows],
            [r["group_id"] for r in rows],
        )

    def on_insert(self, kind: str, rows: list[dict[str, Any]]) -> None:
        """Index memories of ``kind`` just inserted, whose rows are complete (every column
        the row cache holds: nothing to re-read from the store), without vectors yet."""
        check_kind(kind)
        if not rows:
            return
        with self.tracker.consistent_read(), self.lock:
            self.saves.changed(kind)
            self.rows[kind].put(rows)
            self._index_words(kind, rows)

    def on_vectors(self, kind: str, uuids: Sequence[str], vectors: np.ndarray) -> None:
        """The vectors of memories of ``kind`` already indexed (rows and words unchanged);
        those of memories no longer here are ignored."""
        check_kind(kind)
        # consistent_read: a rebuild loading meanwhile swaps its indexes in first
        with self.tracker.consistent_read(), self.lock:
            self.saves.changed(kind)
            cache = self.rows[kind]
            keep = [i for i, u in enumerate(uuids) if u in cache]
            if keep:
                self.vectors[kind].add(
                    [uuids[i] for i in keep],
                    np.asarray(vectors)[keep],
                    [cache.value(uuids[i], "group_id") for i in keep],
                )

    def on_delete(self, kind: str, uuids: Sequence[str]) -> None:
        """Forget deleted memories; call after they are removed from the store."""
        check_kind(kind)
        uuids = list(uuids)
        if not uuids:
            return
        # consistent_read: a refresh_states loading meanwhile (from a snapshot that may
        # still hold these rows) swaps its rows in first, then they are removed from them
        with self.tracker.consistent_read(), self.lock:
            self._delete_locked(kind, uuids)

    def _delete_locked(self, kind: str, uuids: list[str]) -> None:
        self.saves.changed(kind)
        self.rows[kind].remove(uuids)
        self.vectors[kind].remove(uuids)
        self.keywords[kind].remove(uuids)

    def replace(self, removed: Mapping[str, Sequence[str]], changes: list[Upsert]) -> None:
        """Forget ``removed`` (kind -> uuids) and index ``changes`` ((kind, rows, vectors), as
        :meth:`on_upsert`) at once: a search sees the memories before or after, never a mix
        (a re-extraction's promote)."""
        with self.tracker.consistent_read(), self.lock:
            for kind, uuids in removed.items():
                if uuids:
                    self._delete_locked(check_kind(kind), list(uuids))
            for kind, rows, vectors in changes:
                if rows:
                    gone = self._upsert_locked(check_kind(kind), rows, vectors)
                    if gone:
                        self._delete_locked(kind, gone)

    # --- other processes and maintenance ----------------------------------------------------
    def catch_up(self) -> int:
        """Apply what other processes sharing the store wrote since the last look (nothing
        on a DuckDB file); how many memories were re-read."""
        return self.replica_sync.catch_up() if self.replica_sync is not None else 0

    def sync_maintenance(self) -> bool:
        """Re-read every row now if another process ran maintenance since the last look;
        whether it did."""
        if sql.maintenance_marker(self.store) == self._marker:
            return False
        self.refresh_states()
        return True

    def refresh_states(self) -> None:
        """Re-read every row (after maintenance or a recovery: states, decay, purges)."""
        self.flush()
        marker = sql.maintenance_marker(self.store)
        for kind in KINDS:
            with self.tracker.consistent_read():
                loaded = RowCache(kind)
                loaded.load(self.store)  # the slow part, without blocking searches
                with self.lock:  # accesses recorded meanwhile are still queued: re-apply
                    self.saves.changed(kind)
                    self._overlay(kind, loaded)
                    old, self.rows[kind] = self.rows[kind], loaded
                # still under consistent_read: once it is released, an upsert may put a row
                # into another refresh's cache, and its vector would look purged here
                gone = [u for u in old.uuids() if u not in loaded]
                gone += [u for u in self.vectors[kind].uuids() if u not in loaded]
            if gone:
                self.on_delete(kind, sorted(set(gone)))
        with self.lock:
            self._marker, self._rows_marker = marker, None

    def maybe_sync(self) -> None:
        """Notice a maintenance run done by someone else (looked for at most every
        ``sync_seconds``); reload the rows in the background."""
        now = time.monotonic()
        if now - self._checked < self.sync_seconds or not self.store.available:
            return  # a database that is down: the search answers from memory meanwhile
        self._checked = now
        try:
            if sql.maintenance_marker(self.store) == self._marker:
                return
        except StoreUnavailable:
            return
        if self._sync_thread is None or not self._sync_thread.is_alive():
            self._sync_thread = threading.Thread(
                target=self.refresh_states, name="workbench-search-sync", daemon=True
            )
            self._sync_thread.start()

    # --- what ingestion reads ---------------------------------------------------------------
    @contextmanager
    def cached_rows(self) -> Iterator[tuple[RowCache, RowCache]]:
        """The (entity, fact) row caches, held still: for reads that must not see a
        half-applied update (:class:`workbench.ingest.reads.CachedReads`). Do not modify."""
        with self.lock:
            yield self.rows["entity"], self.rows["fact"]

    def similar(
        self, kind: str, vectors: np.ndarray, group_id: str | None, k: int
    ) -> list[list[tuple[str, float]]]:
        """Per vector, its ``k`` nearest memories of ``kind`` in ``group_id``: (uuid, cosine).
        For ingestion's dedupe; no access is recorded."""
        check_kind(kind)
        groups = None if group_id is None else [group_id]
        index = self.vectors[kind]
        return [index.search(v, k, group_ids=groups) for v in np.atleast_2d(vectors)]

    @contextmanager
    def bulk_load(self) -> Iterator[None]:
        """A bulk write (an import): graph builds wait until it is over (see
        :meth:`VectorIndex.defer_graph`)."""
        with ExitStack() as stack:
            for kind in KINDS:
                stack.enter_context(self.vectors[kind].defer_graph())
            yield

    # --- state ------------------------------------------------------------------------------
    def groups(self) -> list[str]:
        """Every group that holds a searchable memory, from the in-memory indexes (no store
        read: a search names the groups it covered even while the database is away)."""
        found: set[str] = set()
        for index in list(self.keywords.values()):
            found |= index.groups()
        return sorted(found)

    def status(self) -> dict[str, dict[str, Any]]:
        """Per memory kind: how many memories are searchable and how the vector index
        searches them (see :attr:`VectorIndex.state`)."""
        with self.lock:
            rows, vectors = dict(self.rows), dict(self.vectors)
        # each index's own lock, after this one's: a graph being saved holds its index's
        # lock for a while, and this must not hold the searches up meanwhile
        return {
            kind: {"memories": len(rows[kind]), "vector_index": vectors[kind].state}
            for kind in KINDS
        }

    def flush(self) -> int:
        """Write queued access updates now (before maintenance reads ``last_accessed_at``)."""
        return self.tracker.flush()

    # --- stopping and saving ----------------------------------------------------------------
    def close(self) -> None:
        """Stop following other processes and the access flusher (writing what it holds);
        save finished HNSW graphs beside the database file (opened and caught up with the
        store at the next open) and call off graph builds under way. The store stays open."""
        if self.replica_sync is not None:
            self.replica_sync.stop()
        self.saves.stop()
        thread = self._sync_thread
        if thread is not None:
            thread.join(timeout=30)
        with self.lock:
            self._closed = True
        self.tracker.close()
        for kind in KINDS:
            self.vectors[kind].graph.on_built = None
            self.vectors[kind].close()  # a graph still being built is called off
            self.save(kind)
        self.saves.closed()

    def _save_built(self, kind: str, index: VectorIndex) -> None:
        """``VectorIndex.on_built``: the index of ``kind`` finished a background build."""
        if self._closed:
            return
        if self.store.shared:
            # the accesses the rows hold are written first: the rows another replica starts
            # from then hold none the store lacks, but those of the last moment
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - written at the next flush, as always
                log.warning("writing accesses before saving the %s rows failed", kind)
        self.save(kind, index)

    def save(self, kind: str, built: VectorIndex | None = None, periodic: bool = False) -> None:
        """Save the finished HNSW graph and the keyword index of ``kind`` beside the database:
        at a clean stop, when a background graph build is done (``built``: that index, which
        may not be in :attr:`vectors` yet while the indexes open) and ``periodic``-ally."""

        def current() -> Current:
            with self.lock:
                rows = self.rows.get(kind)
                return (
                    built or self.vectors.get(kind),
                    self.keywords.get(kind),
                    (None if rows is None else functools.partial(self._rows_table, rows)),
                )

        self.saves.save(kind, current, self.publisher.between_writes, self._stamp,
                        force=built is not None, periodic=periodic)  # fmt: skip

    def _rows_table(self, rows: RowCache) -> Any:
        """A snapshot of these rows (an Arrow table), taken holding them still."""
        with self.lock:
            return rows.to_table()

    def _stamp(self) -> Stamp:
        """What the indexes hold now (read between two writes, see :meth:`save`): every
        vector write up to the newest, every change of the log up to this process's
        position, the maintenance run its rows reflect."""
        position = self.replica_sync.position if self.replica_sync is not None else None
        with self.lock:
            marker = self._marker if self._rows_marker is None else self._rows_marker
        return Stamp(marker, sql.latest_vector_seq(self.store), position)
