"""One search, checked once: :class:`Query` holds what a search asks (the memory kind, the
query text, how many, the row filters, the weights, the centre entity and the score floor),
built by :func:`node_query` / :func:`fact_query` from the arguments of ``search_nodes`` /
``search_facts`` (every problem an :class:`~workbench.errors.InvalidInput`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from workbench.search.filters import (
    SearchFilters,
    check_group_ids,
    check_max,
    check_min_score,
    check_query,
    check_states,
    check_window,
    clean_list,
)
from workbench.search.ranking import Weights

__all__ = ["Centre", "Query", "fact_query", "node_query"]


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
) -> Query:
    """The entity search these ``search_nodes`` arguments ask for."""
    text = check_query(query)
    k = check_max("max_nodes", max_nodes, max_results)
    after, before = check_window(created_after, created_before)
    filters = SearchFilters(
        group_ids=check_group_ids(group_ids),
        states=check_states(states),
        created_after=after,
        created_before=before,
        entity_types=clean_list("entity_types", entity_types),
        now=now,
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
) -> Query:
    """The fact search these ``search_facts`` arguments ask for (its centre is added by the
    searcher, which knows the entities: :meth:`~workbench.search.searcher.Searcher.centre`)."""
    text = check_query(query)
    k = check_max("max_facts", max_facts, max_results)
    after, before = check_window(created_after, created_before)
    filters = SearchFilters(
        group_ids=check_group_ids(group_ids),
        states=check_states(states),
        created_after=after,
        created_before=before,
        relation_types=clean_list("relation_types", relation_types),
        include_invalidated=bool(include_invalidated),
        now=now,
    )
    return Query("fact", text, k, filters, weights, None, check_min_score(min_score))
