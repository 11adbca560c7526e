"""``search_memory``: facts and passages (what was said, verbatim) in one ranked list.

Both kinds are ranked by the search engine as ``search_memory_facts`` ranks facts, with the
same score (:mod:`workbench.search.ranking`: the calibrated cosine, the keyword score,
freshness and importance, with the same weights), so their scores are on one scale and the
two lists are merged by score. A passage never decays (it lives as long as its episode), so
its freshness is 1.

Near-duplicates: a result whose words are mostly those of a result of the same kind ranked
above it (the share of its distinct terms found in the other, :data:`NEAR_DUPLICATE` or
more, in either direction) is held back, so that the same thing said or stated again does
not fill the list in place of other evidence; held-back results fill the list only when too
few others are left. A fact and the passage it was extracted from are both kept: holding
those back too (``across_kinds``) lost evidence on the LoCoMo benchmark, where the turn and
its summary count for different things; the rule, the threshold and the plain merge by
score were chosen there (``bench/bench_locomo.py --with-sessions``; figures in
``docs/performance.md``).

:func:`fuse` is the pure part (tested alone); :func:`search_memory` runs the two searches,
records the access of what it returns, and shapes it.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workbench.errors import InvalidInput
from workbench.index.keyword.bm25 import tokenize
from workbench.index.rows import RowCache
from workbench.search.engine import SearchEngine
from workbench.search.filters import (
    DEFAULT_STATES,
    SearchFilters,
    check_about,
    check_date,
    check_max,
    check_min_score,
    check_query,
    check_window,
    clean_list,
)
from workbench.search.hits import fact_out, passage_out, successor
from workbench.search.query import check_now, check_superseded, time_boost
from workbench.search.ranking import Weights
from workbench.search.searcher import Ranked
from workbench.search.timewords import TimeWindow

__all__ = [
    "RECALL_KINDS",
    "NEAR_DUPLICATE",
    "Candidate",
    "Recalled",
    "fuse",
    "recall",
    "search_memory",
]

RECALL_KINDS = ("fact", "passage")
NEAR_DUPLICATE = 0.8  # share of a result's terms in a higher one that makes it a near-duplicate
OVERSAMPLE = 2  # each kind is ranked for this many times the results asked (room to skip)


@dataclass(frozen=True)
class Candidate:
    """One ranked memory: its kind, uuid, score and text (its terms are computed when first
    compared: most candidates never are)."""

    kind: str
    uuid: str
    score: float
    text: str

    @functools.cached_property
    def terms(self) -> frozenset[str]:
        return frozenset(tokenize(self.text))


def near_duplicate(a: frozenset[str], b: frozenset[str], threshold: float = NEAR_DUPLICATE) -> bool:
    """Whether most of the terms of one of ``a`` and ``b`` are in the other (empty: never)."""
    if not a or not b:
        return False
    return len(a & b) / min(len(a), len(b)) >= threshold


def fuse(
    candidates: Sequence[Candidate],
    k: int,
    threshold: float | None = NEAR_DUPLICATE,
    across_kinds: bool = False,
) -> list[Candidate]:
    """The best ``k`` candidates by score (ties: kind, then uuid), near-duplicates of a
    better one of the same kind (of any kind with ``across_kinds``) held back unless fewer
    than ``k`` others remain; ``threshold`` None keeps every candidate."""
    ordered = sorted(candidates, key=lambda c: (-c.score, c.kind, c.uuid))
    chosen: list[Candidate] = []
    held: list[Candidate] = []
    for cand in ordered:
        if len(chosen) >= k:
            break
        if threshold is not None and any(
            near_duplicate(cand.terms, other.terms, threshold)
            for other in chosen
            if across_kinds or other.kind == cand.kind
        ):
            held.append(cand)
        else:
            chosen.append(cand)
    if len(chosen) < k:
        chosen += held[: k - len(chosen)]
        chosen.sort(key=lambda c: (-c.score, c.kind, c.uuid))
    return chosen


def check_kinds(kinds: object) -> tuple[str, ...]:
    """``kinds``: None (both) or some of ``fact`` and ``passage``."""
    listed = clean_list("kinds", kinds)  # type: ignore[arg-type]
    if listed is None:
        return RECALL_KINDS
    unknown = [k for k in listed if k not in RECALL_KINDS]
    if unknown:
        raise InvalidInput(
            f"unknown kind(s) {', '.join(unknown)} in 'kinds'; expected some of "
            f"{', '.join(RECALL_KINDS)}"
        )
    return listed


def search_memory(
    engine: SearchEngine,
    query: str,
    group_ids: Sequence[str] | None = None,
    max_results: int = 10,
    kinds: Sequence[str] | None = None,
    min_score: float | None = None,
    created_after: datetime | str | None = None,
    created_before: datetime | str | None = None,
    **about: Any,
) -> list[dict[str, Any]]:
    """Facts and passages best matching ``query``, best first (see the module docstring);
    ``about``: the time arguments of :func:`recall`."""
    return recall(
        engine, query, group_ids, max_results, kinds, min_score, created_after, created_before,
        **about,
    ).results  # fmt: skip


@dataclass(frozen=True)
class Recalled:
    """What :func:`recall` found: the results, the window the query's time words named
    (None: none) and how many superseded facts were left out that would have ranked among
    the results."""

    results: list[dict[str, Any]]
    time_window: TimeWindow | None
    superseded_omitted: int


def recall(
    engine: SearchEngine,
    query: str,
    group_ids: Sequence[str] | None = None,
    max_results: int = 10,
    kinds: Sequence[str] | None = None,
    min_score: float | None = None,
    created_after: datetime | str | None = None,
    created_before: datetime | str | None = None,
    after: datetime | str | None = None,
    before: datetime | str | None = None,
    as_of: datetime | str | None = None,
    include_superseded: bool | None = None,
    now: datetime | str | None = None,
) -> Recalled:
    """:func:`search_memory` with what it read of time. ``after`` / ``before`` keep the
    memories about that window (a passage said in it, a fact valid at some time in it);
    ``as_of``: facts valid at that instant, superseded since or not; ``include_superseded``:
    superseded facts too; ``now``: when the question is asked (default the server clock),
    which the query's time words ("last week") and "current" are read against. The window
    those words name boosts the memories inside it, a question about the present the newer
    memories (:mod:`workbench.search.timewords`)."""
    started = time.perf_counter()
    text = check_query(query)
    k = check_max("max_results", max_results, engine.max_results)
    chosen_kinds = check_kinds(kinds)
    after_c, before_c = check_window(created_after, created_before)
    about_after, about_before = check_about(after, before)
    asked_at = check_now(now, engine.clock())
    filters = SearchFilters(
        group_ids=clean_list("group_ids", group_ids),
        states=DEFAULT_STATES,
        created_after=after_c,
        created_before=before_c,
        include_invalidated=check_superseded(include_superseded),
        now=asked_at,
        about_after=about_after,
        about_before=about_before,
        as_of=check_date("as_of", as_of),
    )
    floor = check_min_score(min_score)
    window, boost = time_boost(text, asked_at)
    counted = {
        kind: engine.ranked_counting(
            kind, text, k * OVERSAMPLE, filters, engine.searcher.weights, None, floor, boost
        )
        for kind in chosen_kinds
    }
    ranked = {kind: hits for kind, (hits, _) in counted.items()}
    best = fuse(_candidates(ranked), k)
    hits = _accessed(engine, ranked, best)
    engine.metrics.record_search(time.perf_counter() - started)
    # the superseded facts that would have ranked among the facts considered for the list
    omitted = counted["fact"][1] if "fact" in counted else 0
    return Recalled(_shaped(engine, best, hits), window, omitted)


def _candidates(ranked: dict[str, list[Ranked]]) -> list[Candidate]:
    text = {"fact": "fact", "passage": "text"}
    return [
        Candidate(kind, row["uuid"], score, row[text[kind]])
        for kind, hits in ranked.items()
        for row, _parts, score, _tier in hits
    ]


def _accessed(
    engine: SearchEngine, ranked: dict[str, list[Ranked]], best: list[Candidate]
) -> dict[tuple[str, str], Ranked]:
    """Record the access of the chosen hits (only those: the others were not returned)."""
    wanted = {(c.kind, c.uuid) for c in best}
    out: dict[tuple[str, str], Ranked] = {}
    for kind, hits in ranked.items():
        mine = [hit for hit in hits if (kind, hit[0]["uuid"]) in wanted]
        for hit in engine.searcher.accessed(kind, mine):
            out[(kind, hit[0]["uuid"])] = hit
    return out


def _shaped(
    engine: SearchEngine, best: list[Candidate], hits: dict[tuple[str, str], Ranked]
) -> list[dict[str, Any]]:
    out = []
    with engine.indexes.cached_rows() as (entities, facts):
        for cand in best:
            row, parts, score, _tier = hits[(cand.kind, cand.uuid)]
            if cand.kind == "fact":
                hit = fact_hit(row, parts, score, engine.searcher.weights, entities)
                out.append(hit | {"superseded_by": successor(facts, row)})
            else:
                out.append(passage_out(row, parts, score, engine.searcher.weights))
    return out


def fact_hit(
    row: dict[str, Any], parts: dict[str, float], score: float, weights: Weights,
    entities: RowCache,
) -> dict[str, Any]:  # fmt: skip
    """A fact as ``search_memory`` returns it: ``search_memory_facts``'s shape with its kind
    and the episodes it came from (none for an imported fact)."""
    hit = fact_out(row, parts, score, None, weights, entities)
    episodes = [row["episode_uuid"]] if row.get("episode_uuid") else []
    return {"kind": "fact", **hit, "episodes": episodes}
