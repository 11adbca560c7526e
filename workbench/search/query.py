"""One search, checked once: :class:`Query` holds what a search asks (the memory kind, the
query text, how many, the row filters, the weights, the centre entity and the score floor),
built by :func:`node_query` / :func:`fact_query` from the arguments of ``search_nodes`` /
``search_facts`` (every problem an :class:`~workbench.errors.InvalidInput`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from workbench.errors import InvalidInput
from workbench.index.rows import to_micros
from workbench.search.filters import (
    SearchFilters,
    check_about,
    check_date,
    check_group_ids,
    check_max,
    check_min_score,
    check_query,
    check_states,
    check_window,
    clean_list,
)
from workbench.search.ranking import TimeBoost, Weights
from workbench.search.timewords import TimeWindow, asks_present, read_window

__all__ = ["Centre", "Query", "check_now", "fact_query", "node_query", "time_boost"]


@dataclass(frozen=True)
class Centre:
    """The centre entity of a fact search: its facts (which always join the candidates) and
    its 1-hop neighbours (which make the second tier)."""

    uuid: str
    facts: list[str]
    neighbours: set[str]


@dataclass(frozen=True)
class Query:
    """What one search of one memory kind asks, checked."""

    kind: str
    text: str
    k: int
    filters: SearchFilters
    weights: Weights
    centre: Centre | None = None
    min_score: float | None = None
    # what the query's time words ask of the ranking (search_memory; none by default)
    boost: TimeBoost = TimeBoost()


def check_now(value: object, clock_now: datetime) -> datetime:
    """``now`` (ISO 8601): the time the question is asked, that relative time words and
    "current" are read against; None -> the server clock's ``clock_now``."""
    return check_date("now", value) or clock_now


def time_boost(text: str, now: datetime) -> tuple[TimeWindow | None, TimeBoost]:
    """The window ``text`` names (:func:`~workbench.search.timewords.read_window`) and the
    boost it and a question about the present (:func:`asks_present`) ask for."""
    window = read_window(text, now)
    span = None if window is None else (to_micros(window.start), to_micros(window.end))
    return window, TimeBoost(span, asks_present(text))


def check_superseded(include_superseded: object, include_invalidated: object = False) -> bool:
    """``include_superseded`` (or its older name ``include_invalidated``): a boolean."""
    for name, value in (("include_superseded", include_superseded),
                        ("include_invalidated", include_invalidated)):  # fmt: skip
        if value is not None and not isinstance(value, bool):
            raise InvalidInput(f"'{name}' must be true or false")
    return bool(include_superseded) or bool(include_invalidated)


def node_query(
    query: object,
    weights: Weights,
    max_results: int,
    now: datetime,
    *,
    group_ids: Sequence[str] | None = None,
    max_nodes: object = 10,
    entity_types: Sequence[str] | None = None,
    created_after: datetime | str | None = None,
    created_before: datetime | str | None = None,
    states: Sequence[str] | None = None,
    min_score: object = None,
    after: object = None,
    before: object = None,
) -> Query:
    """The entity search these ``search_nodes`` arguments ask for (``after`` / ``before``:
    entities with a fact about that window, or first seen in it; see the searcher)."""
    text = check_query(query)
    k = check_max("max_nodes", max_nodes, max_results)
    after_c, before_c = check_window(created_after, created_before)
    about_after, about_before = check_about(after, before)
    filters = SearchFilters(
        group_ids=check_group_ids(group_ids),
        states=check_states(states),
        created_after=after_c,
        created_before=before_c,
        entity_types=clean_list("entity_types", entity_types),
        now=now,
        about_after=about_after,
        about_before=about_before,
    )
    return Query("entity", text, k, filters, weights, None, check_min_score(min_score))


def fact_query(
    query: object,
    weights: Weights,
    max_results: int,
    now: datetime,
    *,
    group_ids: Sequence[str] | None = None,
    max_facts: object = 10,
    created_after: datetime | str | None = None,
    created_before: datetime | str | None = None,
    relation_types: Sequence[str] | None = None,
    include_invalidated: bool = False,
    states: Sequence[str] | None = None,
    min_score: object = None,
    after: object = None,
    before: object = None,
    as_of: object = None,
    include_superseded: object = None,
) -> Query:
    """The fact search these ``search_facts`` arguments ask for (its centre is added by the
    searcher, which knows the entities: :meth:`~workbench.search.searcher.Searcher.centre`)."""
    text = check_query(query)
    k = check_max("max_facts", max_facts, max_results)
    after_c, before_c = check_window(created_after, created_before)
    about_after, about_before = check_about(after, before)
    filters = SearchFilters(
        group_ids=check_group_ids(group_ids),
        states=check_states(states),
        created_after=after_c,
        created_before=before_c,
        relation_types=clean_list("relation_types", relation_types),
        include_invalidated=check_superseded(include_superseded, include_invalidated),
        now=now,
        about_after=about_after,
        about_before=about_before,
        as_of=check_date("as_of", as_of),
    )
    return Query("fact", text, k, filters, weights, None, check_min_score(min_score))
