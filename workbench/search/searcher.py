"""Answering a search over the live indexes (:class:`~workbench.index.live.LiveIndexes`).

A search (one :class:`~workbench.search.query.Query`):

1. embeds the query once (cached), running the BM25 search in a worker thread meanwhile;
2. takes the union of the vector top-N and the BM25 top-N (N = ``candidate_pool``, at least
   5 x the requested count) within the requested groups, with the exact cosine for
   keyword-only candidates;
3. applies the filters to the cached rows; when they leave fewer than asked for, it searches
   again with the memories passing the filters as an allow-list (exact vector search over just
   them), or with a 20x wider pool;
4. follows a link between facts for a multi-hop question (:mod:`workbench.search.links`);
5. orders by the score of :mod:`workbench.search.ranking` (calibrated similarity, floor,
   centre tiers) and returns the top ones with the score and its parts.

:meth:`Searcher.accessed` then records the access of what a search returns.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from workbench.clock import Clock
from workbench.embedding.base import Embedder, embed_queries
from workbench.errors import InvalidInput, NotFound
from workbench.index.keyword.bm25 import KeywordIndex, tokenize
from workbench.index.live import LiveIndexes
from workbench.index.vector.index import VectorIndex
from workbench.search.filters import SearchFilters, check_groups_known
from workbench.search.links import (
    LINKED_FACTS,
    NAMED_POOL,
    bridge_words,
    names_in,
    possessive,
    spaced,
)
from workbench.search.query import Centre, Query
from workbench.search.ranking import (
    DEFAULT_FLOOR,
    Weights,
    after_link,
    best,
    boosted,
    calibrated,
    relevant,
    score_arrays,
    tier,
    time_parts,
)

__all__ = ["Ranked", "Searcher", "SEARCH_WORKERS"]

SEARCH_WORKERS = 2  # BM25 searches running beside query embeddings; more run inline

# uuid -> [cosine, keyword score] of one search's candidates
Candidates = dict[str, list[float]]
# one ranked memory: (row, score parts, score, graph tier)
Ranked = tuple[dict[str, Any], dict[str, float], float, int]
# a followed link: (the linking fact, the facts of its other end)
Link = tuple[str, set[str]]
Found = tuple[list[tuple[str, float]], list[tuple[str, float, float]]]


def _unless_about(kind: str, filters: SearchFilters) -> SearchFilters:
    """The filters the row cache applies: for entities, all but the window they are about
    (:meth:`Searcher._about_entities` applies it, reading their facts too)."""
    if kind != "entity" or (filters.about_after is None and filters.about_before is None):
        return filters
    return replace(filters, about_after=None, about_before=None)


class Searcher:
    """Ranks the memories of the live ``indexes`` for a query (see the module docstring)."""

    def __init__(
        self,
        indexes: LiveIndexes,
        embedder: Embedder,
        clock: Clock,
        weights: Weights,
        *,
        candidate_pool: int = 50,
        min_similarity: float = DEFAULT_FLOOR,
        follow_links: bool = True,
        query_cache_size: int = 256,
    ):
        self.indexes = indexes
        self.embedder = embedder
        self.clock = clock
        self.weights = weights
        self.candidate_pool = candidate_pool
        # a candidate less similar than this that shares no keyword with the query is noise
        self.min_similarity = min_similarity
        # follow the link from an entity the query names to the one it asks about
        self.follow_links = follow_links
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_cache_size = query_cache_size
        self._executor: ThreadPoolExecutor | None = None
        self._workers = threading.BoundedSemaphore(SEARCH_WORKERS)
        self._closed = False

    @property
    def _lock(self) -> threading.RLock:
        return self.indexes.lock

    @property
    def baseline(self) -> float:
        """The cosine of unrelated texts under the embedder (see :func:`ranking.calibrated`)."""
        return float(getattr(self.embedder, "similarity_baseline", 0.0))

    # --- the search -----------------------------------------------------------------------
    def centre(self, center_node_uuid: object) -> Centre | None:
        """The centre entity a fact search names (None: none)."""
        if center_node_uuid is None or center_node_uuid == "":
            return None
        if not isinstance(center_node_uuid, str):
            raise InvalidInput("'center_node_uuid' must be an entity uuid (a string)")
        with self._lock:
            if center_node_uuid not in self.indexes.rows["entity"]:
                raise NotFound(f"no entity with uuid {center_node_uuid} (center_node_uuid)")
            facts, neighbours = self.indexes.rows["fact"].neighbourhood(center_node_uuid)
        return Centre(center_node_uuid, facts, neighbours)

    def ranked(self, query: Query) -> list[Ranked]:
        """The best ``query.k`` memories of ``query.kind``, best first; no access is recorded
        (see :meth:`accessed`)."""
        return self.ranked_counting(query)[0]

    def ranked_counting(self, query: Query) -> tuple[list[Ranked], int]:
        """:meth:`ranked`, and how many superseded facts it left out that would have ranked
        among them (0 for other kinds, or when superseded facts are asked for)."""
        self.indexes.maybe_sync()
        kind, text, k, filters = query.kind, query.text, query.k, query.filters
        with self._lock:
            vec, kw = self.indexes.vectors[kind], self.indexes.keywords[kind]
        if len(vec) == 0 and len(kw) == 0:
            return [], 0
        if filters.group_ids is not None:
            check_groups_known(self.indexes.store, filters.group_ids, vec.groups() | kw.groups())
        pool = max(self.candidate_pool, 5 * k)
        query_vec, found = self._embed_and_match(vec, kw, text, pool, filters.group_ids)
        extra = query.centre.facts if query.centre else []
        cands, more = self._candidates(kind, text, query_vec, pool, filters, None, extra, found)
        rows = self._passing(kind, cands, filters)
        if len(rows) < k and more and filters.narrowing():
            allowed = self._allowed(kind, filters)
            cands, more = self._candidates(kind, text, query_vec, pool, filters, allowed, extra)
            rows = self._passing(kind, cands, filters)
        if len(rows) < k and more:  # the filters hid most candidates: widen the pool once
            cands, more = self._candidates(kind, text, query_vec, pool * 20, filters, None, extra)
            rows = self._passing(kind, cands, filters)
        link = None
        if kind == "fact" and self.follow_links and rows:
            link, rows = self.linked(query, rows, cands, query_vec)
        ranked = self._rank(query, rows, cands, query.k, query.min_score, link)
        return ranked, self._superseded_omitted(query, cands, rows, ranked)

    def _superseded_omitted(
        self, query: Query, cands: Candidates, rows: list[str], ranked: list[Ranked]
    ) -> int:
        """How many of the candidates left out only for being superseded would have ranked
        among ``ranked`` (scoring at least its last, or any while it holds fewer than k)."""
        filters = query.filters
        if query.kind != "fact" or filters.include_invalidated or filters.as_of is not None:
            return 0
        if filters.about_after is not None or filters.about_before is not None:
            return 0  # a window keeps the facts valid in it, superseded since or not
        shown = set(rows)
        everything = replace(filters, include_invalidated=True)
        superseded = [u for u in self._passing("fact", cands, everything) if u not in shown]
        if not superseded:
            return 0
        theirs = self._rank(query, superseded, cands, len(superseded), query.min_score)
        if len(ranked) < query.k:
            return len(theirs)
        last = ranked[-1][2]
        return sum(1 for _, _, score, _ in theirs if score >= last)

    def accessed(self, kind: str, ranked: list[Ranked]) -> list[Ranked]:
        """Record the access of these ranked hits of ``kind`` (what a search returns);
        the hits with their rows as they are after it."""
        now, seen = self.clock(), [row for row, *_ in ranked]
        tracker = self.indexes.tracker
        with self._lock:
            accessed = tracker.record(kind, seen, now)
            # ranked without the lock: one changed meanwhile (an upsert, a refresh, another
            # search's access) gets this access applied to its current version, and one
            # deleted meanwhile stays deleted
            self.indexes.rows[kind].access([row["uuid"] for row in seen], now)
        tracker.settle()
        return [(row, parts, score, tier) for row, (_, parts, score, tier) in zip(accessed, ranked)]

    def _passing(
        self, kind: str, cands: Candidates | list[str], filters: SearchFilters
    ) -> list[str]:
        """The candidates still cached that pass the filters."""
        uuids = list(cands)
        with self._lock:
            cache = self.indexes.rows[kind]
            keep = cache.accepting(cache.slots(uuids), _unless_about(kind, filters))
            passing = [u for u, ok in zip(uuids, keep.tolist()) if ok]
            return self._about_entities(passing, filters) if kind == "entity" else passing

    def _allowed(self, kind: str, filters: SearchFilters) -> set[str]:
        with self._lock:
            cache = self.indexes.rows[kind]
            slots = cache.all_slots()
            allowed = cache.uuids_at(slots[cache.accepting(slots, _unless_about(kind, filters))])
            return set(self._about_entities(allowed, filters) if kind == "entity" else allowed)

    def _about_entities(self, uuids: list[str], filters: SearchFilters) -> list[str]:
        """Those of these entities that are about the filters' window (``after`` /
        ``before``): one of their facts is valid in it (as a fact search reads validity), or
        they were first seen in it (an entity mentioned only then). Under the lock."""
        if filters.about_after is None and filters.about_before is None:
            return uuids
        entities, facts = self.indexes.rows["entity"], self.indexes.rows["fact"]
        window = SearchFilters(about_after=filters.about_after, about_before=filters.about_before)
        first_seen = entities.accepting(entities.slots(uuids), window)
        out = []
        for uuid, seen in zip(uuids, first_seen.tolist()):
            touching = list(facts.touching_of(uuid))
            if seen or (touching and facts.accepting(facts.slots(touching), window).any()):
                out.append(uuid)
        return out

    # --- candidates -----------------------------------------------------------------------
    def _embed_and_match(
        self, vec: VectorIndex, kw: KeywordIndex, text: str, pool: int,
        groups: tuple[str, ...] | None,
    ) -> tuple[np.ndarray, Found | None]:  # fmt: skip
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

        def match() -> list[tuple[str, float, float]]:
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

    def _candidates(
        self, kind: str, text: str, query_vec: np.ndarray, pool: int, filters: SearchFilters,
        allowed: set[str] | None, extra: list[str], found: Found | None = None,
    ) -> tuple[Candidates, bool]:  # fmt: skip
        """uuid -> [cosine, keyword score] over the vector and BM25 top ``pool`` (and the
        ``extra`` uuids), and whether either index may hold more candidates. ``found``: the
        vector and BM25 top ``pool`` when already known."""
        vec, kw = self.indexes.vectors[kind], self.indexes.keywords[kind]
        groups = filters.group_ids
        if found is None:
            found = (
                vec.search(query_vec, pool, groups, allowed),
                kw.search(text, pool, groups, allowed),
            )
        by_vector, by_keyword = found
        nan = float("nan")
        cands: Candidates = {u: [s, nan] for u, s in by_vector}
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

    # --- a link between facts -------------------------------------------------------------
    def _named(self, text: str, groups: tuple[str, ...] | None) -> set[str]:
        """The entities the query names: their whole name occurs in it (as words; anywhere,
        for a name in a script written without spaces)."""
        with self._lock:
            index = self.indexes.keywords["entity"]
        hits = index.search(text, NAMED_POOL, groups)  # the index has its own lock
        with self._lock:
            entities = self.indexes.rows["entity"]
            query = spaced(text)
            return {u for u, *_ in hits if (name := entities.value(u, "name")) is not None
                    and names_in(query, name)}  # fmt: skip

    def linked(
        self, query: Query, rows: list[str], cands: Candidates, query_vec: np.ndarray
    ) -> tuple[Link | None, list[str]]:
        """Follow a link for a multi-hop question (:mod:`workbench.search.links`): the link
        (its fact and the linked facts) or None, and the rows with the linked facts that pass
        the filters (scored into ``cands``)."""
        text, filters = query.text, query.filters
        if not possessive(text):
            return None, rows  # no possessive: nothing could link
        named = self._named(text, filters.group_ids)
        if not named:
            return None, rows
        with self._lock:
            entities = self.indexes.rows["entity"]
            names = [entities.value(u, "name") or "" for u in named]
        bridges = bridge_words(text, names)
        if not bridges:
            return None, rows
        order = self._rank(query, rows, cands, len(rows))
        found = None
        with self._lock:
            facts = self.indexes.rows["fact"]
            for row, *_ in order:
                ends = {row["source_uuid"], row["target_uuid"]}
                if ends & named:
                    if bridges & set(tokenize(row["fact"])):
                        found = row["uuid"], ends
                    break  # only the best fact of a named entity may link
            if found is None:
                return None, rows
            # the other end's own facts: not those of a named entity again
            linked = [
                u
                for other in sorted(found[1] - named)
                for u in facts.neighbourhood(other, LINKED_FACTS)[0]
                if not set(facts.ends(u) or ()) & named
            ]
        missing = [u for u in linked if u not in cands]
        if missing:
            vec, kw = self.indexes.vectors["fact"], self.indexes.keywords["fact"]
            sims = vec.similarity(query_vec, missing)
            norms = kw.scores(text, missing)
            for uuid, sim, norm in zip(missing, sims, norms):
                cands[uuid] = [float(sim), norm]
            known = set(rows)
            rows = rows + [u for u in self._passing("fact", missing, filters) if u not in known]
        return (found[0], set(linked)), rows

    # --- ranking --------------------------------------------------------------------------
    def _rank(
        self, query: Query, uuids: list[str], cands: Candidates, k: int,
        min_score: float | None = None, link: Link | None = None,
    ) -> list[Ranked]:  # fmt: skip
        """The best ``k`` of these memories, vectorised over the cached columns (a row dict is
        built for those ``k`` only). Those less similar than :attr:`min_similarity` without a
        keyword match, and those scoring below ``min_score``, are left out."""
        centre = query.centre
        with self._lock:
            cache = self.indexes.rows[query.kind]
            slots = cache.slots(uuids)
            here = slots >= 0  # one deleted since it passed the filters is left out
            if not here.all():
                uuids, slots = [u for u, ok in zip(uuids, here) if ok], slots[here]
            decay = cache.column("decay_score", slots)
            importance = cache.column("importance", slots).astype(np.float64)
            ends = [cache.ends(u) for u in uuids] if centre else None
            when = cache.about(slots)[0] if query.boost else None
        sim = calibrated(np.array([cands[u][0] for u in uuids], dtype=np.float64), self.baseline)
        kw = np.array([cands[u][1] for u in uuids], dtype=np.float64)
        keep = relevant(sim, kw, self.min_similarity)
        if not keep.all():
            uuids = [u for u, ok in zip(uuids, keep) if ok]
            sim, kw, decay, importance = (a[keep] for a in (sim, kw, decay, importance))
            ends = [e for e, ok in zip(ends, keep) if ok] if ends is not None else None
            when = when[keep] if when is not None else None
        if not uuids:
            return []
        scores, parts = score_arrays(sim, kw, decay, importance, query.weights)
        if when is not None:
            more = time_parts(when, query.boost)
            scores, parts = boosted(scores, more, query.boost), parts | more
        if link is not None:
            scores = after_link(uuids, scores, *link)
        if centre is not None and ends is not None:
            tiers = np.array([tier(e, centre.uuid, centre.neighbours) if e else 2 for e in ends])
        else:
            tiers = np.zeros(len(uuids))
        order = best(uuids, scores, tiers, k, min_score)
        names = list(parts)
        with self._lock:
            rows = [cache.get(uuids[i]) for i in order]
        return [
            (row, {n: float(parts[n][i]) for n in names}, float(scores[i]), int(tiers[i]))
            for row, i in zip(rows, order)
            if row is not None
        ]

    def _embed(self, text: str) -> np.ndarray:
        """The query's vector (the last ``query_cache_size`` queries' are kept)."""
        with self._lock:
            cached = self._query_cache.get(text)
            if cached is not None:
                self._query_cache.move_to_end(text)
                return cached
        vector: np.ndarray = np.asarray(embed_queries(self.embedder, [text]), dtype=np.float32)[0]
        if self._query_cache_size:
            with self._lock:
                self._query_cache[text] = vector
                while len(self._query_cache) > self._query_cache_size:
                    self._query_cache.popitem(last=False)
        return vector

    def close(self) -> None:
        """Stop the worker threads (searches after it run inline)."""
        with self._lock:
            self._closed, executor, self._executor = True, self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
