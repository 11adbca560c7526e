"""Search over memories: ``search_nodes`` (entities) and ``search_facts`` (facts). No LLM call.

One :class:`SearchEngine` owns, per memory kind, a :class:`~workbench.search.vectors.VectorIndex`, a
:class:`~workbench.search.bm25.KeywordIndex` and a :class:`~workbench.search.rows.RowCache`, all
loaded from the store at open (the store is the source of truth) and kept in step by
:meth:`SearchEngine.on_upsert` / :meth:`on_delete` / :meth:`refresh_states`.

A search:

1. validates its input (:mod:`workbench.search.filters`) and embeds the query once, running the
   BM25 search in a worker thread meanwhile;
2. takes the union of the vector top-N and the BM25 top-N (N = ``candidate_pool``, at least
   5 x the requested count) within the requested groups, with the exact cosine for
   keyword-only candidates;
3. applies the filters to the cached rows; when they leave fewer than asked for, it searches
   again with the memories passing the filters as an allow-list (exact vector search over just
   them), or with a 20x wider pool;
4. orders by the weighted score of :mod:`workbench.search.ranking` and returns the top ones with
   the score and its parts;
5. records the access of every returned memory (:class:`~workbench.search.access.AccessTracker`).

Facts with a ``center_node_uuid`` (as in Graphiti's centre-node search): facts touching the
centre entity come first, then facts touching one of its 1-hop neighbours, then the rest, each
tier ordered by score; the centre's own facts always join the candidates. Each hit then
reports ``graph_distance`` (0, 1, or 2 for "further").

Keeping in step: call :meth:`on_upsert` after writing or changing memories (it re-reads those
rows, so a changed summary or an invalidated fact only needs ``[{"uuid": ..., "group_id":
...}]`` and ``vectors=None``), :meth:`on_delete` after deleting, and :meth:`refresh_states`
after a maintenance run or a recovery. A maintenance run recorded in ``maintenance_runs`` is
also noticed by itself (polled at most every ``sync_seconds``) and reloads the rows in the
background.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from workbench.clock import Clock, utcnow
from workbench.embedding.base import embed_queries
from workbench.errors import InvalidInput, NotFound, StoreUnavailable
from workbench.metrics import Metrics
from workbench.search import shared_saves
from workbench.search.access import AccessTracker
from workbench.search.bm25 import KeywordIndex, tokenize
from workbench.search.filters import (
    SearchFilters,
    check_group_ids,
    check_groups_known,
    check_max,
    check_min_score,
    check_query,
    check_states,
    check_window,
    clean_list,
)
from workbench.search.follow import ChangeFollower
from workbench.search.hits import fact_out, node_out
from workbench.search.publish import Publisher
from workbench.search.ranking import Weights, keyword_weight_for, score_arrays
from workbench.search.rows import RowCache
from workbench.search.vectors import KINDS, VectorIndex, load_index
from workbench.store import Store
from workbench.store import changes as changes_sql
from workbench.store import search as sql

__all__ = ["SearchEngine", "keyword_text"]

SEARCH_WORKERS = 2  # BM25 searches running beside query embeddings; more run inline
# a keyword index this large is saved beside the database at close (reopened, not rebuilt)
KEYWORDS_SAVED_FROM = 1_000
log = logging.getLogger("workbench.search.engine")


def keyword_text(kind: str, row: dict[str, Any]) -> str:
    """What the keyword index holds of a memory: entity ``name + summary``, the fact, or the
    passage's text."""
    if kind == "entity":
        return _entity_text(row["name"], row.get("summary"))
    return str(row[_TEXT_COLUMN[kind]])


def _entity_text(name: str, summary: str | None) -> str:
    summary = (summary or "").strip()
    return f"{name}: {summary}" if summary else str(name)


def keyword_texts(kind: str, cache: RowCache) -> list[str]:
    """:func:`keyword_text` of every row of the cache, in the order of its ``uuids()``."""
    if kind == "entity":
        return list(map(_entity_text, cache.texts("name"), cache.texts("summary")))
    return [str(t) for t in cache.texts(_TEXT_COLUMN[kind])]


_TEXT_COLUMN = {"fact": "fact", "passage": "text"}


# the default of SVC_KNOWLEDGE_SEARCH_MIN_SIMILARITY (see the settings' table)
DEFAULT_FLOOR = 0.0
SAVE_GATE_SECONDS = 5.0  # how long a save waits for a moment between writes
NAMED_POOL = 20  # entities the keyword index offers as possibly named by a query
LINKED_FACTS = 200  # newest facts of a linked entity considered
FOLLOW = 2  # facts of the linked entity ranked right after the link


class SearchEngine:
    """Vector + BM25 search with weighted scores and access tracking; see the module doc."""

    def __init__(
        self,
        store: Store,
        embedder,
        metrics: Metrics | None = None,
        clock: Clock = utcnow,
        settings=None,
        *,
        weights: Weights | None = None,
        ann_threshold: int = 20_000,
        candidate_pool: int = 50,
        max_results: int | None = None,
        access_background: bool = True,
        flush_interval: float = 1.0,
        sync_seconds: float = 2.0,
        query_cache_size: int = 256,
        index_options: dict[str, Any] | None = None,
        graph_dir: str | Path | None | bool = True,
        follow: bool = True,
    ):
        self.store = store
        self.embedder = embedder
        # the cosine of unrelated texts under this model (see _calibrated)
        self._baseline = float(getattr(embedder, "similarity_baseline", 0.0))
        self.metrics = metrics or Metrics(enabled=False)
        self.clock = clock
        if weights is None:
            keyword = keyword_weight_for(embedder)
            weights = (
                Weights.from_settings(settings, keyword)
                if settings is not None
                else Weights(keyword=keyword)
            )
        self.weights = weights
        self.max_results = max_results or (settings.search_max_results if settings else 100)
        # a candidate less similar than this that shares no keyword with the query is noise
        self.min_similarity = settings.search_min_similarity if settings else DEFAULT_FLOOR
        # follow the link from an entity the query names to the one it asks about
        self.follow_links = settings.search_follow_links if settings else True
        self.ann_threshold = ann_threshold
        self.candidate_pool = candidate_pool
        self.sync_seconds = sync_seconds
        self._index_options = index_options or {}
        self.graph_dir = _graph_dir(store, graph_dir)
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_cache_size = query_cache_size
        self._lock = threading.RLock()
        self._save_lock = threading.Lock()  # one save of the indexes at a time
        self._sync_thread: threading.Thread | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._workers = threading.BoundedSemaphore(SEARCH_WORKERS)
        self._closed = False
        self.tracker = AccessTracker(
            store, self.metrics, background=access_background, flush_interval=flush_interval
        )
        self.vectors: dict[str, VectorIndex] = {}
        self.keywords: dict[str, KeywordIndex] = {}
        self.rows: dict[str, RowCache] = {}
        # a store shared with other processes: the change log position before loading
        shared = store.shared
        start = changes_sql.position(store) if shared else None
        if shared and self.graph_dir is not None:  # the indexes another replica saved
            shared_saves.fetch_saved(store, self.graph_dir, KINDS)
        self._open()
        # what writers of entities and facts tell this engine through, under its gate
        self.publisher = Publisher(self)
        # and what other processes write, through the store's change log
        self.follower: ChangeFollower | None = None
        if shared:
            self.follower = ChangeFollower(store, self, self.publisher, start=start)
            if follow:
                self.follower.start()

    def _open(self) -> None:
        """The first load: it reads every row and vector once, so DuckDB need not keep those
        blocks cached meanwhile (the start-up's peak memory) nor after."""
        try:
            with self.store.lean_cache():
                self.rebuild()
        except MemoryError:
            log.warning("the search indexes' load ran out of memory: loading them again, "
                        "DuckDB's cache unbounded", exc_info=True)  # fmt: skip
            self.rebuild()

    # --- keeping in step with the store ---------------------------------------------------
    def rebuild(self) -> None:
        """(Re)load the indexes and rows of both kinds from the store. Upserts and deletes
        told meanwhile wait for it (they would otherwise be lost in the swap)."""
        with self.tracker.consistent_read():
            marker = sql.maintenance_marker(self.store)
            # the two kinds in two threads: most of a load is in DuckDB, Arrow, numpy and
            # usearch, which release the GIL (1M + 1M memories: 27 s instead of 34, for
            # ~90 MB more resident: the allocators keep what two threads freed interleaved)
            with ThreadPoolExecutor(len(KINDS), thread_name_prefix="workbench-open") as pool:
                loaded = dict(zip(KINDS, pool.map(self._load_kind, KINDS)))
            vectors = {kind: loaded[kind][0] for kind in KINDS}
            caches = {kind: loaded[kind][1] for kind in KINDS}
            keywords = {kind: loaded[kind][2] for kind in KINDS}
            with self._lock:  # accesses recorded meanwhile are still queued: apply them all
                for kind in KINDS:
                    self._overlay(kind, caches[kind])
                self.vectors, self.keywords, self.rows = vectors, keywords, caches
                self._marker, self._checked = marker, time.monotonic()

    def _load_kind(self, kind: str) -> tuple[VectorIndex, RowCache, KeywordIndex]:
        """The vector index, rows and keyword index of ``kind``, from the store (and the
        indexes saved beside it)."""
        vectors = load_index(
            self.store,
            kind,
            self.ann_threshold,
            self.graph_dir,
            # a graph built in the background is saved at once (with the keywords): a
            # process killed later restarts from it
            on_built=functools.partial(self._save_built, kind),
            **self._index_options,
        )
        cache = RowCache(kind)
        cache.load(self.store)
        return vectors, cache, self._keyword_index(kind, cache)

    def _overlay(self, kind: str, cache: RowCache, uuids=None) -> None:
        """Apply to freshly read rows (these ``uuids``, or all) the accesses not yet written
        to the store."""
        for uuid, when, count in self.tracker.pending_of(kind, uuids):
            cache.access([uuid], when, count)

    def _keyword_index(self, kind: str, cache: RowCache) -> KeywordIndex:
        """The keyword index of these rows: the one saved beside the database caught up with
        them, else built."""
        uuids, texts, groups = cache.uuids(), keyword_texts(kind, cache), cache.group_ids()
        if self.graph_dir is not None:
            saved = KeywordIndex.open_saved(self._keyword_path(kind), uuids, texts, groups)
            if saved is not None:
                return saved[0]
        index = KeywordIndex()
        index.add(uuids, texts, groups)
        return index

    def _keyword_path(self, kind: str) -> Path:
        return self.graph_dir / f"{kind}.keywords.npz"

    def on_upsert(self, kind: str, rows: list[dict], vectors: np.ndarray | None = None) -> None:
        """Index new or changed memories of ``kind`` after they are written to the store.

        ``rows`` need ``uuid`` (and ``group_id``); the rest is re-read from the store.
        ``vectors`` replace the embeddings in the index of the first ``len(vectors)`` rows (one
        each); the other rows, or all with None, keep theirs.
        """
        _check_kind(kind)
        if vectors is not None and len(vectors) > len(rows):
            raise ValueError(f"{len(vectors)} vectors for {len(rows)} {kind} rows")
        if not rows:
            return
        with self.tracker.consistent_read(), self._lock:
            gone = self._upsert_locked(kind, rows, vectors)
        if gone:
            self.on_delete(kind, gone)

    def _upsert_locked(self, kind: str, rows: list[dict], vectors: np.ndarray | None) -> list:
        """:meth:`on_upsert` under the caller's locks; the uuids no longer in the store."""
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
        self.keywords[kind].add(
            [r["uuid"] for r in fresh],
            [keyword_text(kind, r) for r in fresh],
            [r["group_id"] for r in fresh],
        )
        return [u for u in uuids if u not in present]

    def on_insert(self, kind: str, rows: list[dict]) -> None:
        """Index memories of ``kind`` just inserted, whose rows are complete (every column
        the row cache holds: nothing to re-read from the store), without vectors yet."""
        _check_kind(kind)
        if not rows:
            return
        with self.tracker.consistent_read(), self._lock:
            self.rows[kind].put(rows)
            self.keywords[kind].add(
                [r["uuid"] for r in rows],
                [keyword_text(kind, r) for r in rows],
                [r["group_id"] for r in rows],
            )

    def on_vectors(self, kind: str, uuids: Sequence[str], vectors: np.ndarray) -> None:
        """The vectors of memories of ``kind`` already indexed (rows and words unchanged);
        those of memories no longer here are ignored."""
        _check_kind(kind)
        # consistent_read: a rebuild loading meanwhile swaps its indexes in first
        with self.tracker.consistent_read(), self._lock:
            cache = self.rows[kind]
            keep = [i for i, u in enumerate(uuids) if u in cache]
            if keep:
                self.vectors[kind].add(
                    [uuids[i] for i in keep],
                    np.asarray(vectors)[keep],
                    [cache.value(uuids[i], "group_id") for i in keep],
                )

    def groups(self) -> list[str]:
        """Every group that holds a searchable memory, from the in-memory indexes (no store
        read: a search names the groups it covered even while the database is away)."""
        found: set[str] = set()
        for index in list(self.keywords.values()):
            found |= index.groups()
        return sorted(found)

    def on_delete(self, kind: str, uuids: Sequence[str]) -> None:
        """Forget deleted memories; call after they are removed from the store."""
        _check_kind(kind)
        uuids = list(uuids)
        if not uuids:
            return
        # consistent_read: a refresh_states loading meanwhile (from a snapshot that may
        # still hold these rows) swaps its rows in first, then they are removed from them
        with self.tracker.consistent_read(), self._lock:
            self._delete_locked(kind, uuids)

    def _delete_locked(self, kind: str, uuids: list[str]) -> None:
        self.rows[kind].remove(uuids)
        self.vectors[kind].remove(uuids)
        self.keywords[kind].remove(uuids)

    def replace(self, removed: Mapping[str, Sequence[str]], changes: list) -> None:
        """Forget ``removed`` (kind -> uuids) and index ``changes`` ((kind, rows, vectors), as
        :meth:`on_upsert`) at once: a search sees the memories before or after, never a mix
        (a re-extraction's promote)."""
        with self.tracker.consistent_read(), self._lock:
            for kind, uuids in removed.items():
                if uuids:
                    self._delete_locked(_checked_kind(kind), list(uuids))
            for kind, rows, vectors in changes:
                if rows:
                    gone = self._upsert_locked(_checked_kind(kind), rows, vectors)
                    if gone:
                        self._delete_locked(kind, gone)

    def catch_up(self) -> int:
        """Apply what other processes sharing the store wrote since the last look (nothing
        on a DuckDB file); how many memories were re-read."""
        return self.follower.catch_up() if self.follower is not None else 0

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
                with self._lock:  # accesses recorded meanwhile are still queued: re-apply
                    self._overlay(kind, loaded)
                    old, self.rows[kind] = self.rows[kind], loaded
                # still under consistent_read: once it is released, an upsert may put a row
                # into another refresh's cache, and its vector would look purged here
                gone = [u for u in old.uuids() if u not in loaded]
                gone += [u for u in self.vectors[kind].uuids() if u not in loaded]
            if gone:
                self.on_delete(kind, sorted(set(gone)))
        with self._lock:
            self._marker = marker

    def _maybe_sync(self) -> None:
        """Notice a maintenance run done by someone else; reload the rows in the background."""
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

    @contextmanager
    def cached_rows(self) -> Iterator[tuple[RowCache, RowCache]]:
        """The (entity, fact) row caches, held still: for reads that must not see a
        half-applied update (:class:`workbench.ingest.reads.CachedReads`). Do not modify."""
        with self._lock:
            yield self.rows["entity"], self.rows["fact"]

    def similar(
        self, kind: str, vectors: np.ndarray, group_id: str | None, k: int
    ) -> list[list[tuple[str, float]]]:
        """Per vector, its ``k`` nearest memories of ``kind`` in ``group_id``: (uuid, cosine).
        For ingestion's dedupe; no access is recorded."""
        _check_kind(kind)
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

    def status(self) -> dict[str, dict[str, Any]]:
        """Per memory kind: how many memories are searchable and how the vector index
        searches them (see :attr:`VectorIndex.state`)."""
        with self._lock:
            rows, vectors = dict(self.rows), dict(self.vectors)
        # each index's own lock, after the engine's: a graph being saved holds its index's
        # lock for a while, and this must not hold the searches up meanwhile
        return {
            kind: {"memories": len(rows[kind]), "vector_index": vectors[kind].state}
            for kind in KINDS
        }

    def flush(self) -> int:
        """Write queued access updates now (before maintenance reads ``last_accessed_at``)."""
        return self.tracker.flush()

    def close(self) -> None:
        """Stop the access flusher and write what it holds; save finished HNSW graphs next to
        the database file (opened and caught up with the store at the next open) and call off
        graph builds under way. The store stays open."""
        if self.follower is not None:
            self.follower.stop()
        thread = self._sync_thread
        if thread is not None:
            thread.join(timeout=30)
        with self._lock:
            self._closed, executor, self._executor = True, self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        self.tracker.close()
        for kind in KINDS:
            self.vectors[kind].on_built = None
            self.vectors[kind].close()  # a graph still being built is called off
            self._save_indexes(kind)
        if self.store.shared and self.graph_dir is not None:
            shared_saves.remove(self.graph_dir)  # saved in the database

    def _save_built(self, kind: str, index: VectorIndex) -> None:
        """``VectorIndex.on_built``: the index of ``kind`` finished a background build."""
        if not self._closed:
            self._save_indexes(kind, index)

    def _save_indexes(self, kind: str, built: VectorIndex | None = None) -> None:
        """Save the finished HNSW graph and the keyword index of ``kind`` beside the database
        (opened and caught up with the store at the next open): at a clean stop, and when a
        background graph build is done (``built``: that index, which may not be the engine's
        yet while it opens)."""
        if self.graph_dir is None:
            return
        seq = self._vector_seq()
        with self._save_lock:
            with self._lock:
                vectors = built or self.vectors.get(kind)
                keywords = self.keywords.get(kind)
            if vectors is None:
                return
            if keywords is not None and len(keywords) >= KEYWORDS_SAVED_FROM:
                try:
                    keywords.save(self._keyword_path(kind))
                except OSError:
                    log.exception("saving the %s keyword index failed (rebuilt at open)", kind)
            if vectors.uses_ann:
                try:
                    saved = vectors.save_graph(self.graph_dir, kind, seq)
                except OSError:
                    log.exception("saving the %s graph failed (rebuilt at open)", kind)
                else:
                    if saved and self.store.shared:  # for every replica to start from
                        shared_saves.store_save(self.store, self.graph_dir, kind)

    def _vector_seq(self) -> int | None:
        """The newest vector write, every earlier one told to the indexes (what a save
        records so that the next open reads only the vectors written after it); None when it
        cannot be known now (a save without it is caught up from every vector)."""
        try:
            return self.publisher.between_writes(
                functools.partial(sql.latest_vector_seq, self.store), SAVE_GATE_SECONDS
            )
        except Exception:  # a closed or failing store: the save still serves, less quickly
            log.warning("could not read the newest vector write", exc_info=True)
            return None

    # --- the two searches ---------------------------------------------------------------
    def search_nodes(
        self,
        query: str,
        group_ids: Sequence[str] | None = None,
        max_nodes: int = 10,
        entity_types: Sequence[str] | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        states: Sequence[str] | None = None,
        include_weighted_scores: bool = True,
        min_score: float | None = None,
    ) -> list[dict[str, Any]]:
        """Entities best matching ``query``, best first (see the module docstring); with
        ``min_score``, only those scoring at least that."""
        started = time.perf_counter()
        text = check_query(query)
        k = check_max("max_nodes", max_nodes, self.max_results)
        after, before = check_window(created_after, created_before)
        filters = SearchFilters(
            group_ids=check_group_ids(group_ids),
            states=check_states(states),
            created_after=after,
            created_before=before,
            entity_types=clean_list("entity_types", entity_types),
            now=self.clock(),
        )
        weights = self.weights if include_weighted_scores else self.weights.relevance_only()
        hits = self._search("entity", text, k, filters, weights, None, check_min_score(min_score))
        self.metrics.record_search(time.perf_counter() - started)
        return [node_out(row, parts, score, weights) for row, parts, score, _ in hits]

    def search_facts(
        self,
        query: str,
        group_ids: Sequence[str] | None = None,
        max_facts: int = 10,
        center_node_uuid: str | None = None,
        created_after: datetime | str | None = None,
        created_before: datetime | str | None = None,
        relation_types: Sequence[str] | None = None,
        include_invalidated: bool = False,
        states: Sequence[str] | None = None,
        min_score: float | None = None,
    ) -> list[dict[str, Any]]:
        """Facts best matching ``query``, best first (see the module docstring); with
        ``min_score``, only those scoring at least that."""
        started = time.perf_counter()
        text = check_query(query)
        k = check_max("max_facts", max_facts, self.max_results)
        after, before = check_window(created_after, created_before)
        filters = SearchFilters(
            group_ids=check_group_ids(group_ids),
            states=check_states(states),
            created_after=after,
            created_before=before,
            relation_types=clean_list("relation_types", relation_types),
            include_invalidated=bool(include_invalidated),
            now=self.clock(),
        )
        centre = self._centre(center_node_uuid)
        hits = self._search(
            "fact", text, k, filters, self.weights, centre, check_min_score(min_score)
        )
        self.metrics.record_search(time.perf_counter() - started)
        with self._lock:  # a name read while a writer reuses the slot could be another's
            names = self.rows["entity"]
            return [
                fact_out(row, parts, score, tier if centre else None, self.weights, names)
                for row, parts, score, tier in hits
            ]

    # --- internals ----------------------------------------------------------------------
    def _centre(self, center_node_uuid: str | None):
        if center_node_uuid is None or center_node_uuid == "":
            return None
        if not isinstance(center_node_uuid, str):
            raise InvalidInput("'center_node_uuid' must be an entity uuid (a string)")
        with self._lock:
            if center_node_uuid not in self.rows["entity"]:
                raise NotFound(f"no entity with uuid {center_node_uuid} (center_node_uuid)")
            facts, neighbours = self.rows["fact"].neighbourhood(center_node_uuid)
        return center_node_uuid, facts, neighbours

    def ranked(self, kind, text, k, filters, weights, centre=None, min_score=None) -> list[tuple]:
        """The best ``k`` memories of ``kind`` for the checked query ``text``: (row, score
        parts, score, graph tier), best first; no access is recorded (see :meth:`accessed`)."""
        self._maybe_sync()
        with self._lock:
            vec, kw = self.vectors[kind], self.keywords[kind]
        if len(vec) == 0 and len(kw) == 0:
            return []
        if filters.group_ids is not None:
            check_groups_known(self.store, filters.group_ids, vec.groups() | kw.groups())
        pool = max(self.candidate_pool, 5 * k)
        query_vec, found = self._embed_and_match(vec, kw, text, pool, filters.group_ids)
        extra = centre[1] if centre else ()
        cands, more = self._candidates(
            kind, text, query_vec, pool, filters.group_ids, None, extra, found
        )
        rows = self._passing(kind, cands, filters)
        if len(rows) < k and more and filters.narrowing():
            allowed = self._allowed(kind, filters)
            cands, more = self._candidates(
                kind, text, query_vec, pool, filters.group_ids, allowed, extra
            )
            rows = self._passing(kind, cands, filters)
        if len(rows) < k and more:  # the filters hid most candidates: widen the pool once
            cands, more = self._candidates(
                kind, text, query_vec, pool * 20, filters.group_ids, None, extra
            )
            rows = self._passing(kind, cands, filters)
        link = None
        if kind == "fact" and self.follow_links and rows:
            link, rows = self._follow(text, filters, rows, cands, weights, centre, query_vec)
        return self._rank(kind, rows, cands, weights, centre, k, min_score, link)

    def _search(self, kind, text, k, filters, weights, centre=None, min_score=None) -> list[tuple]:
        ranked = self.ranked(kind, text, k, filters, weights, centre, min_score)
        return self.accessed(kind, ranked)

    def accessed(self, kind: str, ranked: list[tuple]) -> list[tuple]:
        """Record the access of these ranked hits of ``kind`` (what a search returns);
        the hits with their rows as they are after it."""
        now, seen = self.clock(), [row for row, *_ in ranked]
        with self._lock:
            accessed = self.tracker.record(kind, seen, now)
            # ranked without the lock: one changed meanwhile (an upsert, a refresh, another
            # search's access) gets this access applied to its current version, and one
            # deleted meanwhile stays deleted
            self.rows[kind].access([row["uuid"] for row in seen], now)
        self.tracker.settle()
        return [(row, *rest) for row, (_, *rest) in zip(accessed, ranked)]

    def _passing(self, kind, cands, filters) -> list[str]:
        """The candidates still cached that pass the filters."""
        uuids = list(cands)
        with self._lock:
            cache = self.rows[kind]
            keep = cache.accepting(cache.slots(uuids), filters)
        return [u for u, ok in zip(uuids, keep.tolist()) if ok]

    def _allowed(self, kind, filters) -> set[str]:
        with self._lock:
            cache = self.rows[kind]
            slots = cache.all_slots()
            return set(cache.uuids_at(slots[cache.accepting(slots, filters)]))

    def _embed_and_match(self, vec: VectorIndex, kw: KeywordIndex, text, pool, groups):
        """The query vector and the vector and BM25 top ``pool`` (None: not searched yet).
        Unless both workers are busy with other searches, BM25 runs in a worker thread while
        the query is embedded (the embedder waits on a model or a server without holding the
        GIL) and the vector index searched (usearch and numpy release it too), so on a
        machine with a free core the keyword search costs no wall time. A query embedded
        already (the second kind ``search_memory`` ranks) has nothing to overlap with: handing
        BM25 to a thread would only cost the hand-over (milliseconds on a busy machine)."""
        with self._lock:
            executor = self._executor_for_search()
            cached = text in self._query_cache
        if cached or executor is None or not self._workers.acquire(blocking=False):
            return self._embed(text), None  # both searched by _candidates, one after the other

        def match():
            try:
                return kw.search(text, pool, groups)
            finally:
                self._workers.release()

        try:
            matching = executor.submit(match)
        except BaseException:
            self._workers.release()
            raise
        try:
            vector = self._embed(text)
            by_vector = vec.search(vector, pool, groups)
        except BaseException:
            if matching.cancel():  # never started: its slot is still taken
                self._workers.release()
            raise
        return vector, (by_vector, matching.result())

    def _executor_for_search(self) -> ThreadPoolExecutor | None:
        """The worker threads of :meth:`_embed_and_match` (None after :meth:`close`)."""
        if self._closed:
            return None
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=SEARCH_WORKERS, thread_name_prefix="workbench-search"
            )
        return self._executor

    def _candidates(self, kind, text, query_vec, pool, groups, allowed, extra, found=None):
        """uuid -> [cosine, keyword score] over the vector and BM25 top ``pool``, and whether
        either index may hold more candidates. ``found``: the vector and BM25 top ``pool``
        when already known."""
        vec, kw = self.vectors[kind], self.keywords[kind]
        if found is None:
            found = (
                vec.search(query_vec, pool, groups, allowed),
                kw.search(text, pool, groups, allowed),
            )
        by_vector, by_keyword = found
        nan = float("nan")
        cands: dict[str, list[float]] = {u: [s, nan] for u, s in by_vector}
        for uuid, _bm25, norm in by_keyword:
            cands.setdefault(uuid, [nan, nan])[1] = norm
        for uuid in extra:
            cands.setdefault(uuid, [nan, nan])
        # every candidate gets both real scores: the similarity of one only BM25 found, the
        # keyword score of one only the vectors (or the centre) brought
        missing = [u for u, (s, _) in cands.items() if s != s]
        if missing:
            for uuid, sim in zip(missing, vec.similarity(query_vec, missing)):
                cands[uuid][0] = float(sim)
        unmatched = [u for u, (_, k) in cands.items() if k != k]
        if unmatched:
            for uuid, norm in zip(unmatched, kw.scores(text, unmatched)):
                cands[uuid][1] = norm
        more = len(by_vector) >= pool or len(by_keyword) >= pool
        return cands, more

    def _named(self, text: str, groups) -> set[str]:
        """The entities the query names: their whole name occurs in it (as words; anywhere,
        for a name in a script written without spaces)."""
        with self._lock:
            index = self.keywords["entity"]
        hits = index.search(text, NAMED_POOL, groups)  # the index has its own lock
        with self._lock:
            entities = self.rows["entity"]
            query = _spaced(text)
            return {u for u, *_ in hits if (name := entities.value(u, "name")) is not None
                    and _names_in(query, name)}  # fmt: skip

    def _follow(self, text, filters, rows, cands, weights, centre, query_vec):
        """Multi-hop questions ("where does Audrey's sister work?"): when the query names an
        entity with a possessive, the best-ranked fact of that entity that mentions the word
        after it ("Audrey's sister is called Sofia Tanaka") links to its other end; that
        entity's facts join the candidates and its best ones rank right after the link (see
        :meth:`_rank`). Returns
        ``(link uuid, linked fact uuids)`` or None, and the rows."""
        if "'" not in _apostrophes(text):
            return None, rows  # no possessive: nothing could link (see _bridges)
        named = self._named(text, filters.group_ids)
        if not named:
            return None, rows
        with self._lock:
            bridges = self._bridges(text, named)
        if not bridges:
            return None, rows
        order = self._rank("fact", rows, cands, weights, centre, len(rows))
        link = None
        with self._lock:
            facts = self.rows["fact"]
            for row, *_ in order:
                ends = {row["source_uuid"], row["target_uuid"]}
                if ends & named:
                    if bridges & set(tokenize(row["fact"])):
                        link = row["uuid"], ends
                    break  # only the best fact of a named entity may link
            if link is None:
                return None, rows
            # the other end's own facts: not those of a named entity again
            linked = [
                u
                for other in sorted(link[1] - named)
                for u in facts.neighbourhood(other, LINKED_FACTS)[0]
                if not set(facts.ends(u)) & named
            ]
        missing = [u for u in linked if u not in cands]
        if missing:
            vec, kw = self.vectors["fact"], self.keywords["fact"]
            sims = vec.similarity(query_vec, missing)
            norms = kw.scores(text, missing)
            for uuid, sim, norm in zip(missing, sims, norms):
                cands[uuid] = [float(sim), norm]
            known = set(rows)
            rows = rows + [u for u in self._passing("fact", missing, filters) if u not in known]
        return (link[0], set(linked)), rows

    def _calibrated(self, cosine: np.ndarray) -> np.ndarray:
        """Cosine mapped onto the model's own scale: ``(cosine - b) / (1 - b)`` where ``b``
        is the embedder's ``similarity_baseline``, the cosine of unrelated texts (0 for
        MiniLM; E5's cosines crowd into 0.7-1), so that similarity weighs against the keyword
        score, the floor and ``min_score`` alike whatever the model."""
        base = self._baseline
        return cosine if not base else (cosine - base) / (1.0 - base)

    def _bridges(self, text: str, named: set[str]) -> set[str]:
        """The words that follow a named entity's possessive in the query ("sister" in "Audrey's
        sister"): what a linking fact must mention."""
        lowered = _apostrophes(text.casefold())
        words: set[str] = set()
        for uuid in named:
            name = (self.rows["entity"].value(uuid, "name") or "").casefold()
            for match in re.finditer(re.escape(name) + r"'s?\s+([^\W\d_]+)", lowered):
                words.update(tokenize(match.group(1)))
        return words

    def _rank(self, kind, uuids, cands, weights, centre, k, min_score=None, link=None):
        """The best ``k`` of these memories: (row, score parts, score, graph tier), vectorised
        over the cached columns (a row dict is built for those ``k`` only). Those less similar
        than :attr:`min_similarity` without a keyword match, and those scoring below
        ``min_score``, are left out."""
        with self._lock:
            cache = self.rows[kind]
            slots = cache.slots(uuids)
            here = slots >= 0  # one deleted since it passed the filters is left out
            if not here.all():
                uuids, slots = [u for u, ok in zip(uuids, here) if ok], slots[here]
            decay = cache.column("decay_score", slots)
            importance = cache.column("importance", slots).astype(np.float64)
            ends = [cache.ends(u) for u in uuids] if centre else None
        sim = self._calibrated(np.array([cands[u][0] for u in uuids], dtype=np.float64))
        kw = np.array([cands[u][1] for u in uuids], dtype=np.float64)
        relevant = (sim >= self.min_similarity) | (kw > 0)
        if not relevant.all():
            uuids = [u for u, ok in zip(uuids, relevant) if ok]
            sim, kw, decay, importance = (a[relevant] for a in (sim, kw, decay, importance))
            ends = [e for e, ok in zip(ends, relevant) if ok] if ends is not None else None
        if not uuids:
            return []
        scores, parts = score_arrays(sim, kw, decay, importance, weights)
        if link is not None:
            scores = _after_link(uuids, scores, *link)
        tiers = np.array([_tier(e, centre) for e in ends]) if centre else np.zeros(len(uuids))
        chosen = np.arange(len(uuids))
        if min_score is not None:
            chosen = chosen[scores >= min_score]
        ids = np.array(uuids)[chosen]
        order = chosen[np.lexsort((ids, -scores[chosen], tiers[chosen]))][:k]
        names = list(parts)
        with self._lock:
            rows = [cache.get(uuids[i]) for i in order]
        return [
            (row, {n: float(parts[n][i]) for n in names}, float(scores[i]), int(tiers[i]))
            for row, i in zip(rows, order)
            if row is not None
        ]

    def _embed(self, text: str) -> np.ndarray:
        with self._lock:
            cached = self._query_cache.get(text)
            if cached is not None:
                self._query_cache.move_to_end(text)
                return cached
        vector = np.asarray(embed_queries(self.embedder, [text]), dtype=np.float32)[0]
        if self._query_cache_size:
            with self._lock:
                self._query_cache[text] = vector
                while len(self._query_cache) > self._query_cache_size:
                    self._query_cache.popitem(last=False)
        return vector


def _graph_dir(store: Store, graph_dir) -> Path | None:
    """``True``: ``<database file>.search/`` (none for in-memory or read-only stores); for a
    database server, a private folder the saves stored in the database are fetched into."""
    if graph_dir is True and store.shared and not store.read_only:
        return shared_saves.local_folder()
    if graph_dir is True:
        beside = store.beside_file(".search")
        if beside is None or store.read_only or ":" in beside.name:
            return None
        return beside
    return Path(graph_dir) if graph_dir else None


def _checked_kind(kind: str) -> str:
    _check_kind(kind)
    return kind


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise InvalidInput(f"unknown memory kind {kind!r}; expected one of {', '.join(KINDS)}")


_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def _apostrophes(text: str) -> str:
    """``text`` with the typographic apostrophe (U+2019) written as ``'``."""
    return text.replace("\u2019", "'")


def _spaced(text: str) -> str:
    """Lower-cased words separated by single spaces, with a space at both ends."""
    return f" {_NON_WORD.sub(' ', text.casefold()).strip()} "


def _names_in(query: str, name: str) -> bool:
    """Whether the whole ``name`` occurs in the (spaced) query: as words, or anywhere for a
    name in a script written without spaces."""
    spaced = _spaced(name)
    if spaced.strip() == "":
        return False
    return spaced in query or (not spaced.strip().isascii() and spaced.strip() in query)


def _after_link(uuids: list[str], scores: np.ndarray, link: str, linked: set[str]) -> np.ndarray:
    """The best ``FOLLOW`` linked facts rank right after the link (a copy of ``scores``)."""
    at = next((i for i, u in enumerate(uuids) if u == link), None)
    if at is None:
        return scores
    scores = scores.copy()
    chosen = sorted((i for i, u in enumerate(uuids) if u in linked),
                    key=lambda i: -scores[i])[:FOLLOW]  # fmt: skip
    for rank, i in enumerate(chosen):
        scores[i] = max(scores[i], scores[at] - 1e-4 * (rank + 1))
    return scores


def _tier(ends: tuple[str, str], centre) -> int:
    uuid, _facts, neighbours = centre
    if uuid in ends:
        return 0
    return 1 if ends[0] in neighbours or ends[1] in neighbours else 2
