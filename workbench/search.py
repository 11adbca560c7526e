"""Search over memories: ``search_nodes`` (entities) and ``search_facts`` (facts). No LLM call.

One :class:`SearchEngine` owns, per memory kind, a :class:`~workbench.index.VectorIndex` and a
:class:`~workbench.keyword.KeywordIndex`, both loaded from the store at open (the store is the
source of truth) and kept in step by :meth:`SearchEngine.on_upsert` / :meth:`on_delete`.

A search:

1. validates its input (:mod:`workbench.search_input`) and embeds the query once;
2. takes the union of the vector top-N and the BM25 top-N (N = ``candidate_pool``, at least
   5 x the requested count) within the requested groups, computing the exact cosine for
   keyword-only candidates;
3. fetches those rows with the filters applied in SQL (:mod:`workbench.store.search`); when the
   filters leave fewer than asked for, it retries once with the uuids passing the filters as
   an allow-list (exact vector search over just them);
4. orders them by the weighted score of :mod:`workbench.search_score` and returns the top ones
   with the score and its parts;
5. records the access of every returned memory (:class:`~workbench.access.AccessTracker`).

Facts with a ``center_node_uuid`` (as in Graphiti): facts touching the centre entity come
first, then facts touching one of its 1-hop neighbours, then the rest, each tier ordered by
score; the centre's own facts always join the candidates. Each hit reports ``graph_distance``
(0, 1 or 2 for "further or unknown").
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from workbench.access import AccessTracker
from workbench.clock import Clock, utcnow
from workbench.errors import InvalidInput, NotFound
from workbench.index import KINDS, VectorIndex, load_index
from workbench.keyword import KeywordIndex
from workbench.metrics import Metrics
from workbench.search_input import (
    DEFAULT_STATES,
    check_groups_known,
    check_max,
    check_query,
    check_states,
    check_window,
    clean_list,
)
from workbench.search_score import Weights, combine, score_parts
from workbench.store import Store
from workbench.store import search as sql

__all__ = ["SearchEngine", "keyword_text"]

PREFILTER_LIMIT = 50_000  # above this many rows passing the filters, widen the pool instead


def keyword_text(kind: str, row: dict[str, Any]) -> str:
    """What the keyword index holds of a memory: entity ``name + summary``, or the fact."""
    if kind == "entity":
        if "name" in row:
            summary = (row.get("summary") or "").strip()
            return f"{row['name']}: {summary}" if summary else str(row["name"])
        return str(row.get("text") or "")
    return str(row["fact"] if "fact" in row else row.get("text") or "")


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
        ann_threshold: int = 50_000,
        candidate_pool: int = 50,
        max_results: int | None = None,
        access_background: bool = True,
        flush_interval: float = 1.0,
        query_cache_size: int = 256,
        index_options: dict[str, Any] | None = None,
    ):
        self.store = store
        self.embedder = embedder
        self.metrics = metrics or Metrics(enabled=False)
        self.clock = clock
        if weights is None:
            weights = Weights.from_settings(settings) if settings is not None else Weights()
        self.weights = weights
        self.max_results = max_results or (settings.search_max_results if settings else 100)
        self.ann_threshold = ann_threshold
        self.candidate_pool = candidate_pool
        self._index_options = index_options or {}
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_cache_size = query_cache_size
        self._lock = threading.RLock()
        self.tracker = AccessTracker(
            store, self.metrics, background=access_background, flush_interval=flush_interval
        )
        self.vectors: dict[str, VectorIndex] = {}
        self.keywords: dict[str, KeywordIndex] = {}
        self.rebuild()

    # --- keeping the indexes in step -----------------------------------------------------
    def rebuild(self) -> None:
        """(Re)load both indexes of both kinds from the store."""
        vectors, keywords = {}, {}
        for kind in KINDS:
            vectors[kind] = load_index(
                self.store, kind, self.ann_threshold, **self._index_options
            )
            keywords[kind] = KeywordIndex()
            rows = sql.load_texts(self.store, kind)
            keywords[kind].add(
                [r[0] for r in rows],
                [keyword_text(kind, _text_row(kind, r)) for r in rows],
                [r[1] for r in rows],
            )
        with self._lock:
            self.vectors, self.keywords = vectors, keywords

    def on_upsert(self, kind: str, rows: list[dict], vectors: np.ndarray | None) -> None:
        """Index new or changed memories (rows: uuid, group_id and name/summary or fact or
        text); call after they are written to the store."""
        _check_kind(kind)
        if not rows:
            return
        uuids = [r["uuid"] for r in rows]
        groups = [r["group_id"] for r in rows]
        with self._lock:
            if vectors is not None and len(vectors):
                self.vectors[kind].add(uuids, np.asarray(vectors), groups)
            self.keywords[kind].add(uuids, [keyword_text(kind, r) for r in rows], groups)

    def on_delete(self, kind: str, uuids: Sequence[str]) -> None:
        """Forget deleted memories; call after they are removed from the store."""
        _check_kind(kind)
        uuids = list(uuids)
        if not uuids:
            return
        with self._lock:
            self.vectors[kind].remove(uuids)
            self.keywords[kind].remove(uuids)

    def refresh_states(self) -> None:
        """After maintenance: write queued accesses and drop index entries whose memory row is
        gone (purged). Lifecycle states themselves are read from the store at search time."""
        self.flush()
        for kind in KINDS:
            present = set(r[0] for r in sql.load_texts(self.store, kind))
            gone = [u for u in self.keywords[kind].uuids() if u not in present]
            gone += [u for u in self.vectors[kind].uuids() if u not in present]
            if gone:
                self.on_delete(kind, sorted(set(gone)))

    def similar(
        self, kind: str, vectors: np.ndarray, group_id: str | None, k: int
    ) -> list[list[tuple[str, float]]]:
        """Per vector, its ``k`` nearest memories of ``kind`` in ``group_id``: (uuid, cosine).
        For ingestion's dedupe; no access is recorded."""
        _check_kind(kind)
        groups = None if group_id is None else [group_id]
        index = self.vectors[kind]
        return [index.search(v, k, group_ids=groups) for v in np.atleast_2d(vectors)]

    def flush(self) -> int:
        """Write queued access updates now (before maintenance reads ``last_accessed_at``)."""
        return self.tracker.flush()

    def close(self) -> None:
        """Stop the access flusher and write what it holds. The store stays open."""
        self.tracker.close()

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
    ) -> list[dict[str, Any]]:
        """Entities best matching ``query``, best first (see the module docstring)."""
        started = time.perf_counter()
        text = check_query(query)
        k = check_max("max_nodes", max_nodes, self.max_results)
        after, before = check_window(created_after, created_before)
        filters = sql.SearchFilters(
            group_ids=clean_list("group_ids", group_ids),
            states=check_states(states),
            created_after=after,
            created_before=before,
            entity_types=clean_list("entity_types", entity_types),
            now=self.clock(),
        )
        weights = self.weights if include_weighted_scores else self.weights.relevance_only()
        hits = self._search("entity", text, k, filters, weights)
        self.metrics.record_search(time.perf_counter() - started)
        return [_node_out(row, parts, score, weights) for row, parts, score, _ in hits]

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
    ) -> list[dict[str, Any]]:
        """Facts best matching ``query``, best first (see the module docstring)."""
        started = time.perf_counter()
        text = check_query(query)
        k = check_max("max_facts", max_facts, self.max_results)
        after, before = check_window(created_after, created_before)
        filters = sql.SearchFilters(
            group_ids=clean_list("group_ids", group_ids),
            states=check_states(states),
            created_after=after,
            created_before=before,
            relation_types=clean_list("relation_types", relation_types),
            include_invalidated=bool(include_invalidated),
            now=self.clock(),
        )
        centre = self._centre(center_node_uuid)
        hits = self._search("fact", text, k, filters, self.weights, centre)
        self.metrics.record_search(time.perf_counter() - started)
        return [_fact_out(row, parts, score, tier, centre is not None, self.weights)
                for row, parts, score, tier in hits]

    # --- internals ----------------------------------------------------------------------
    def _centre(self, center_node_uuid: str | None):
        if center_node_uuid is None or center_node_uuid == "":
            return None
        if not isinstance(center_node_uuid, str):
            raise InvalidInput("'center_node_uuid' must be an entity uuid (a string)")
        if not sql.entity_exists(self.store, center_node_uuid):
            raise NotFound(f"no entity with uuid {center_node_uuid} (center_node_uuid)")
        facts, neighbours = sql.neighbourhood(self.store, center_node_uuid)
        return center_node_uuid, facts, neighbours

    def _search(self, kind, text, k, filters, weights, centre=None) -> list[tuple]:
        with self._lock:
            vec, kw = self.vectors[kind], self.keywords[kind]
        if len(vec) == 0 and len(kw) == 0:
            return []
        if filters.group_ids is not None:
            check_groups_known(self.store, filters.group_ids, vec.groups() | kw.groups())
        query_vec = self._embed(text)
        extra = centre[1] if centre else ()
        pool = max(self.candidate_pool, 5 * k)
        rows, cands, more = self._fetch(kind, text, query_vec, pool, filters, None, extra)
        if len(rows) < k and more and filters.narrowing(DEFAULT_STATES):
            allowed = sql.filtered_uuids(self.store, kind, filters, PREFILTER_LIMIT)
            if len(allowed) <= PREFILTER_LIMIT:
                rows, cands, more = self._fetch(
                    kind, text, query_vec, pool, filters, set(allowed), extra)
        if len(rows) < k and more:  # the filters hid most candidates: widen the pool once
            rows, cands, more = self._fetch(kind, text, query_vec, pool * 20, filters, None,
                                            extra)
        ranked = self._rank(rows, cands, weights, centre)[:k]
        accessed = self.tracker.record(kind, [r for r, *_ in ranked], self.clock())
        return [(row, *rest) for row, (_, *rest) in zip(accessed, ranked)]

    def _fetch(self, kind, text, query_vec, pool, filters, allowed, extra):
        cands, more = self._candidates(kind, text, query_vec, pool, filters.group_ids,
                                       allowed, extra)
        with self.tracker.consistent_read():
            rows = sql.fetch_hits(self.store, kind, list(cands), filters)
            self.tracker.overlay(kind, rows)
        return rows, cands, more

    def _candidates(self, kind, text, query_vec, pool, groups, allowed, extra):
        """uuid -> [cosine, keyword score] over the vector and BM25 top ``pool``, and whether
        either index may hold more candidates."""
        vec, kw = self.vectors[kind], self.keywords[kind]
        by_vector = vec.search(query_vec, pool, groups, allowed)
        by_keyword = kw.search(text, pool, groups, allowed)
        cands: dict[str, list[float]] = {u: [s, 0.0] for u, s in by_vector}
        for uuid, _bm25, norm in by_keyword:
            cands.setdefault(uuid, [float("nan"), 0.0])[1] = norm
        extra = [u for u in extra if u not in cands]
        for uuid in extra:
            cands[uuid] = [float("nan"), 0.0]
        missing = [u for u, (s, _) in cands.items() if s != s]  # NaN: not in the vector top
        if missing:
            for uuid, sim in zip(missing, vec.similarity(query_vec, missing)):
                cands[uuid][0] = float(sim)
        if extra:  # the centre's facts: their keyword score too
            for uuid, _bm25, norm in kw.search(text, len(extra), None, set(extra)):
                cands[uuid][1] = norm
        more = len(by_vector) >= pool or len(by_keyword) >= pool
        return cands, more

    def _rank(self, rows, cands, weights, centre) -> list[tuple]:
        ranked = []
        for row in rows:
            sim, kw = cands[row["uuid"]]
            parts = score_parts(sim, kw, row["decay_score"], row["importance"])
            tier = _tier(row, centre) if centre else 0
            ranked.append((row, parts, combine(parts, weights), tier))
        ranked.sort(key=lambda h: (h[3], -h[2], h[0]["uuid"]))
        return ranked

    def _embed(self, text: str) -> np.ndarray:
        with self._lock:
            cached = self._query_cache.get(text)
            if cached is not None:
                self._query_cache.move_to_end(text)
                return cached
        vector = np.asarray(self.embedder.embed([text]), dtype=np.float32)[0]
        with self._lock:
            self._query_cache[text] = vector
            while len(self._query_cache) > self._query_cache_size:
                self._query_cache.popitem(last=False)
        return vector


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise InvalidInput(f"unknown memory kind {kind!r}; expected one of {', '.join(KINDS)}")


def _text_row(kind: str, row: tuple) -> dict[str, Any]:
    if kind == "entity":
        return {"name": row[2], "summary": row[3]}
    return {"fact": row[2]}


def _tier(row: dict, centre) -> int:
    uuid, _facts, neighbours = centre
    ends = (row["source_uuid"], row["target_uuid"])
    if uuid in ends:
        return 0
    return 1 if ends[0] in neighbours or ends[1] in neighbours else 2


def _iso(value) -> str | None:
    return None if value is None else value.isoformat()


def _memory_out(row: dict, parts: dict, score: float, weights: Weights) -> dict[str, Any]:
    return {
        "group_id": row["group_id"],
        "created_at": _iso(row["created_at"]),
        "lifecycle_state": row["lifecycle_state"],
        "importance": int(row["importance"]),
        "stability": int(row["stability"]),
        "decay_score": float(row["decay_score"]),
        "last_accessed_at": _iso(row["last_accessed_at"]),
        "access_count": int(row["access_count"]),
        "score": round(float(score), 6),
        "score_parts": parts,
        "score_weights": weights.as_dict(),
    }


def _node_out(row, parts, score, weights) -> dict[str, Any]:
    return {
        "uuid": row["uuid"],
        "name": row["name"],
        "entity_type": row["entity_type"],
        "summary": row["summary"],
        **_memory_out(row, parts, score, weights),
    }


def _fact_out(row, parts, score, tier, centred, weights) -> dict[str, Any]:
    out = {
        "uuid": row["uuid"],
        "fact": row["fact"],
        "relation": row["relation"],
        "source_node_uuid": row["source_uuid"],
        "source_node_name": row["source_name"],
        "target_node_uuid": row["target_uuid"],
        "target_node_name": row["target_name"],
        "episode_uuid": row["episode_uuid"],
        "valid_at": _iso(row["valid_at"]),
        "invalid_at": _iso(row["invalid_at"]),
        "expired_at": _iso(row["expired_at"]),
        **_memory_out(row, parts, score, weights),
    }
    if centred:
        out["graph_distance"] = tier
    return out
