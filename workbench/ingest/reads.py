"""What extraction reads of the graph while it prepares an episode: from the search engine's
rows in memory, not from DuckDB.

After each LLM answer, extraction reads: the group's entities by normalised name, candidate
entities by uuid, the current facts touching the resolved entities (shown to the LLM), and
which of the proposed facts already exist. In DuckDB each of these is a filtered table scan
(its primary-key index serves only single-value lookups), a large part of an episode's CPU with
a fast LLM (figures in ``docs/performance.md``).

:class:`CachedReads` answers them from the search engine's row caches
(:mod:`workbench.index.rows`), which the engine keeps in step with the store. Every writer of
entities and facts holds the publish gate (:class:`~workbench.index.publish.Publisher`) from
its transaction until the engine has been told, and the queue claims episodes under the same
gate: so when an episode is claimed, everything written before, in particular the previous
episode of its group, is already in the caches. The answers equal the store's SQL
(``workbench.store.graph``) for the same graph: ``tests/ingest/test_graph_reads.py`` checks it
on random graphs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from workbench.index.rows import RowCache

__all__ = ["CachedReads", "GraphReads"]

ENTITY_FIELDS = ("uuid", "name", "name_norm", "entity_type", "summary", "lifecycle_state")
HIDDEN_STATES = ("EXPIRED", "SOFT_DELETED")

FactKey = tuple[str, str, str]  # (source uuid, target uuid, lower-cased fact text)


class GraphReads(Protocol):
    def entities_by_norm(
        self, group_id: str, names_norm: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """Existing entities of a group by normalised name (the oldest when several)."""
        ...

    def entities_by_uuid(self, uuids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Entity rows (at least uuid, name, entity_type, summary) of those that exist."""
        ...

    def facts_between(self, entity_uuids: Sequence[str], limit: int) -> list[dict[str, Any]]:
        """Current facts touching any of the entities, newest first: uuid, relation, fact,
        source_uuid, target_uuid, source_name, target_name."""
        ...

    def existing_fact_keys(self, group_id: str, keys: Sequence[FactKey]) -> set[FactKey]:
        """Which of the keys name an unexpired fact of the group."""
        ...


CachesFn = Callable[[], AbstractContextManager[tuple[RowCache, RowCache]]]


class CachedReads:
    """:class:`GraphReads` from in-memory row caches of entities and facts.

    ``caches()`` is a context manager giving (entity cache, fact cache) under the lock that
    guards them (``SearchEngine.cached_rows``).
    """

    def __init__(self, caches: CachesFn):
        self._caches = caches

    def entities_by_norm(
        self, group_id: str, names_norm: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        with self._caches() as (entities, _):
            return entities_by_norm(entities, group_id, names_norm)

    def entities_by_uuid(self, uuids: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self._caches() as (entities, _):
            return {u: dict(row) for u in uuids if (row := entities.get(u)) is not None}

    def facts_between(self, entity_uuids: Sequence[str], limit: int) -> list[dict[str, Any]]:
        with self._caches() as (entities, facts):
            return facts_between(entities, facts, entity_uuids, limit)

    def existing_fact_keys(self, group_id: str, keys: Sequence[FactKey]) -> set[FactKey]:
        with self._caches() as (_, facts):
            return existing_fact_keys(facts, group_id, keys)


# --- the pure functions over row caches ---------------------------------------------------------
def entities_by_norm(
    entities: RowCache, group_id: str, names_norm: Sequence[str]
) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(names_norm):
        rows = [entities.rows[u] for u in entities.named_uuids(group_id, name)]
        if rows:
            oldest = min(rows, key=lambda r: (r["created_at"], r["uuid"]))
            found[name] = {k: oldest.get(k) for k in ENTITY_FIELDS}
    return found


def _current(row: dict[str, Any]) -> bool:
    return (
        row["invalid_at"] is None
        and row["expired_at"] is None
        and row["lifecycle_state"] not in HIDDEN_STATES
    )


def facts_between(
    entities: RowCache, facts: RowCache, entity_uuids: Sequence[str], limit: int
) -> list[dict[str, Any]]:
    uuids: set[str] = set()
    for entity in entity_uuids:
        uuids.update(facts.touching_of(entity))
    rows = [r for r in map(facts.rows.get, uuids) if r is not None and _current(r)]
    rows.sort(key=lambda r: (r["created_at"], r["uuid"]), reverse=True)
    return [_fact_view(entities, r) for r in rows[: max(0, limit)]]


def _fact_view(entities: RowCache, row: dict[str, Any]) -> dict[str, Any]:
    source, target = entities.get(row["source_uuid"]), entities.get(row["target_uuid"])
    return {
        "uuid": row["uuid"],
        "relation": row["relation"],
        "fact": row["fact"],
        "source_uuid": row["source_uuid"],
        "target_uuid": row["target_uuid"],
        "source_name": source["name"] if source else None,
        "target_name": target["name"] if target else None,
    }


def existing_fact_keys(facts: RowCache, group_id: str, keys: Sequence[FactKey]) -> set[FactKey]:
    wanted: dict[tuple[str, str], list[FactKey]] = {}
    for key in keys:
        wanted.setdefault((key[0], key[1]), []).append(key)
    found: set[FactKey] = set()
    for (source, target), pair_keys in wanted.items():
        texts = {
            row["fact"].strip().lower()
            for row in _pair_rows(facts, source, target)
            if row["group_id"] == group_id and row["expired_at"] is None
        }
        found.update(k for k in pair_keys if k[2].strip().lower() in texts)
    return found


def stored_fact(
    facts: RowCache, key: tuple[str, str, str, str], ignore: Collection[str] = ()
) -> bool:
    """Whether the (group, source, target, text) fact is stored, unexpired (the text compared
    trimmed and lower-cased; facts whose uuid is in ``ignore`` do not count)."""
    group, source, target, text = key
    text = text.strip().lower()
    return any(
        row["group_id"] == group
        and row["expired_at"] is None
        and row["uuid"] not in ignore
        and row["fact"].strip().lower() == text
        for row in _pair_rows(facts, source, target)
    )


def _pair_rows(facts: RowCache, source: str, target: str) -> Iterator[dict[str, Any]]:
    """The facts from ``source`` to ``target`` (scanning the end with fewer facts)."""
    a, b = facts.touching_of(source), facts.touching_of(target)
    for uuid in a if len(a) <= len(b) else b:
        row = facts.rows.get(uuid)
        if row is not None and row["source_uuid"] == source and row["target_uuid"] == target:
            yield row
