"""Search over memories: ``search_nodes`` (entities) and ``search_facts`` (facts). No LLM call.

A :class:`SearchEngine` wires the two halves of search together, each with its own reason to
change:

* the **live indexes** (:class:`~workbench.index.live.LiveIndexes`, package
  :mod:`workbench.index`): per memory kind the rows, the BM25 keyword index and the vector
  index, loaded at open and kept in step with the store (writers tell them through
  their own :attr:`~workbench.index.live.LiveIndexes.publisher`, never through this engine;
  other processes' writes arrive through the change log);
* the **searcher** (:class:`~workbench.search.searcher.Searcher`): one
  :class:`~workbench.search.query.Query` per search, its candidates, the link between facts,
  and the ranking (:mod:`workbench.search.ranking`); then the access of what it returns.

Facts with a ``center_node_uuid`` (as in Graphiti's centre-node search): facts touching the
centre entity come first, then facts touching one of its 1-hop neighbours, then the rest, each
tier ordered by score; the centre's own facts always join the candidates. Each hit then
reports ``graph_distance`` (0, 1, or 2 for "further").

The engine answers searches and nothing else: what is configured lives on the
:attr:`SearchEngine.searcher` (weights, embedder, similarity floor), what is indexed on
:attr:`SearchEngine.indexes` (rows, vectors, keywords, the publisher, saves, status).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any

from workbench.clock import Clock, utcnow
from workbench.config import Settings
from workbench.embedding.base import Embedder
from workbench.index import shared_saves
from workbench.index.live import LiveIndexes
from workbench.index.saves import IndexSaves
from workbench.metrics import Metrics
from workbench.search.filters import SearchFilters
from workbench.search.hits import fact_out, node_out, successor
from workbench.search.query import Centre, Query, fact_query, node_query
from workbench.search.ranking import DEFAULT_FLOOR, TimeBoost, Weights, keyword_weight_for
from workbench.search.searcher import Ranked, Searcher
from workbench.store import Store

__all__ = ["SearchEngine"]


class SearchEngine:
    """The live indexes of a store and the searcher over them; see the module doc."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        metrics: Metrics | None = None,
        clock: Clock = utcnow,
        settings: Settings | None = None,
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
        sync: bool = True,
    ):
        self.store = store
        self.metrics = metrics or Metrics(enabled=False)
        self.clock = clock
        if weights is None:
            keyword = keyword_weight_for(embedder)
            weights = (
                Weights.from_settings(settings, keyword)
                if settings is not None
                else Weights(keyword=keyword)
            )
        self.max_results: int = max_results or (settings.search_max_results if settings else 100)
        self.indexes = LiveIndexes(
            store,
            self.metrics,
            IndexSaves(
                store,
                _graph_dir(store, graph_dir),
                float(getattr(settings, "search_save_seconds", 0.0)),  # off without settings
                self.metrics,
            ),
            ann_threshold=ann_threshold,
            index_options=index_options,
            sync_seconds=sync_seconds,
            access_background=access_background,
            flush_interval=flush_interval,
            sync=sync,
        )
        self.searcher = Searcher(
            self.indexes,
            embedder,
            clock,
            weights,
            candidate_pool=candidate_pool,
            min_similarity=settings.search_min_similarity if settings else DEFAULT_FLOOR,
            follow_links=settings.search_follow_links if settings else True,
            query_cache_size=query_cache_size,
        )

    # --- the two searches -----------------------------------------------------------------
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
        after: datetime | str | None = None,
        before: datetime | str | None = None,
    ) -> list[dict[str, Any]]:
        """Entities best matching ``query``, best first (see
        :class:`~workbench.search.searcher.Searcher`); with ``min_score``, only those scoring
        at least that."""
        started = time.perf_counter()
        weights = (
            self.searcher.weights
            if include_weighted_scores
            else self.searcher.weights.relevance_only()
        )
        asked = node_query(
            query, weights, self.max_results, self.clock(), group_ids=group_ids,
            max_nodes=max_nodes, entity_types=entity_types, created_after=created_after,
            created_before=created_before, states=states, min_score=min_score, after=after,
            before=before,
        )  # fmt: skip
        hits = self.searcher.accessed("entity", self.searcher.ranked(asked))
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
        **about: Any,
    ) -> list[dict[str, Any]]:
        """Facts best matching ``query``, best first (see the module docstring); with
        ``min_score``, only those scoring at least that. ``about``: ``after``, ``before``,
        ``as_of``, ``include_superseded`` (see :meth:`search_facts_counting`)."""
        return self.search_facts_counting(
            query, group_ids, max_facts, center_node_uuid, created_after, created_before,
            relation_types, include_invalidated, states, min_score, **about,
        )[0]  # fmt: skip

    def search_facts_counting(
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
        after: datetime | str | None = None,
        before: datetime | str | None = None,
        as_of: datetime | str | None = None,
        include_superseded: bool | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """:meth:`search_facts` and how many superseded facts it left out that would have
        ranked among them. ``after`` / ``before``: facts valid at some time in that window;
        ``as_of``: facts valid at that instant, superseded since or not;
        ``include_superseded``: superseded facts too (each names its ``superseded_by``)."""
        started = time.perf_counter()
        asked = fact_query(
            query, self.searcher.weights, self.max_results, self.clock(), group_ids=group_ids,
            max_facts=max_facts, created_after=created_after, created_before=created_before,
            relation_types=relation_types, include_invalidated=include_invalidated,
            states=states, min_score=min_score, after=after, before=before, as_of=as_of,
            include_superseded=include_superseded,
        )  # fmt: skip
        centre = self.searcher.centre(center_node_uuid)
        if centre is not None:
            asked = replace(asked, centre=centre)
        ranked, omitted = self.searcher.ranked_counting(asked)
        hits = self.searcher.accessed("fact", ranked)
        self.metrics.record_search(time.perf_counter() - started)
        with self.indexes.lock:  # a name read while a writer reuses the slot could be another's
            names, facts = self.indexes.rows["entity"], self.indexes.rows["fact"]
            return [
                fact_out(row, parts, score, tier if centre else None, self.searcher.weights, names)
                | {"superseded_by": successor(facts, row)}
                for row, parts, score, tier in hits
            ], omitted

    def ranked(
        self,
        kind: str,
        text: str,
        k: int,
        filters: SearchFilters,
        weights: Weights,
        centre: Centre | None = None,
        min_score: float | None = None,
        boost: TimeBoost | None = None,
    ) -> list[Ranked]:
        """The best ``k`` memories of ``kind`` for the checked query ``text``: (row, score
        parts, score, graph tier), best first; no access is recorded (see :meth:`accessed`)."""
        return self.ranked_counting(kind, text, k, filters, weights, centre, min_score, boost)[0]

    def ranked_counting(
        self,
        kind: str,
        text: str,
        k: int,
        filters: SearchFilters,
        weights: Weights,
        centre: Centre | None = None,
        min_score: float | None = None,
        boost: TimeBoost | None = None,
    ) -> tuple[list[Ranked], int]:
        """:meth:`ranked` and how many superseded facts it left out that would have ranked
        among them (:meth:`Searcher.ranked_counting`)."""
        asked = Query(kind, text, k, filters, weights, centre, min_score, boost or TimeBoost())
        return self.searcher.ranked_counting(asked)

    def close(self) -> None:
        """Stop the search workers, then close the live indexes (see
        :meth:`LiveIndexes.close`: accesses written, graphs saved). The store stays open."""
        self.searcher.close()
        self.indexes.close()


def _graph_dir(store: Store, graph_dir: str | Path | None | bool) -> Path | None:
    """Where the HNSW graphs and keyword indexes are saved and opened from (the one place
    that decides it): ``True``: ``<database file>.search/`` (none for in-memory or read-only
    stores); for a database server, a private folder the saves stored in the database are
    fetched into, and each save is stored back from (:mod:`workbench.index.shared_saves`)."""
    if graph_dir is True and store.shared and not store.read_only:
        return shared_saves.local_folder()
    if graph_dir is True:
        beside = store.beside_file(".search")
        if beside is None or store.read_only or ":" in beside.name:
            return None
        return beside
    return Path(graph_dir) if graph_dir else None
