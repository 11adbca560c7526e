"""SQL of the search path: load vectors and texts for the in-process indexes, fetch hit rows.

Plain functions taking a :class:`~workbench.store.Store`. Candidate uuids come from the
in-process indexes; these queries fetch their rows (with the caller's filters) by primary key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from workbench.store import Store

__all__ = [
    "SearchFilters",
    "load_vectors",
    "load_texts",
    "fetch_hits",
    "filtered_uuids",
    "known_groups",
    "entity_exists",
    "neighbourhood",
]

_MEMORY = "importance, stability, decay_score, lifecycle_state, last_accessed_at, access_count"

_ENTITY_COLUMNS = (
    "uuid, group_id, name, entity_type, summary, created_at, updated_at, " + _MEMORY
)
_FACT_COLUMNS = (
    "f.uuid, f.group_id, f.fact, f.relation, f.source_uuid, s.name AS source_name, "
    "f.target_uuid, t.name AS target_name, f.episode_uuid, f.created_at, f.valid_at, "
    "f.invalid_at, f.expired_at, "
    + ", ".join(f"f.{c.strip()}" for c in _MEMORY.split(","))
)

_TABLES = {"entity": ("entities", "entity_embeddings"), "fact": ("facts", "fact_embeddings")}


@dataclass(frozen=True)
class SearchFilters:
    """Row filters of one search (values already validated by the engine)."""

    group_ids: tuple[str, ...] | None = None
    states: tuple[str, ...] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    entity_types: tuple[str, ...] | None = None
    relation_types: tuple[str, ...] | None = None
    include_invalidated: bool = True
    now: datetime | None = None

    def narrowing(self, default_states: tuple[str, ...]) -> bool:
        """True when the filters may drop many rows (worth an SQL pre-filter)."""
        return bool(
            self.created_after or self.created_before or self.entity_types
            or self.relation_types
            or (self.states is not None and set(self.states) < set(default_states))
        )


def load_vectors(store: Store, kind: str) -> tuple[list[str], list[str], np.ndarray]:
    """Every stored vector of ``kind`` whose memory row exists: (uuids, group_ids, matrix)."""
    table, emb = _TABLES[kind]
    data = store.fetch_numpy(
        f"SELECT e.uuid, m.group_id, e.vector FROM {emb} e JOIN {table} m USING (uuid) "
        "ORDER BY e.uuid"
    )
    uuids = [str(u) for u in data["uuid"]]
    if not uuids:
        return [], [], np.zeros((0, store.dim), dtype=np.float32)
    vectors = np.stack(data["vector"]).astype(np.float32, copy=False)
    return uuids, [str(g) for g in data["group_id"]], vectors


def load_texts(store: Store, kind: str) -> list[tuple[str, str, str, str]]:
    """(uuid, group_id, name-or-fact, summary) of every memory of ``kind``."""
    if kind == "entity":
        sql = "SELECT uuid, group_id, name, summary FROM entities ORDER BY uuid"
    else:
        sql = "SELECT uuid, group_id, fact, '' FROM facts ORDER BY uuid"
    return [tuple(row) for row in store.fetchall(sql)]


def _where(kind: str, filters: SearchFilters, alias: str) -> tuple[list[str], list[Any]]:
    p = f"{alias}." if alias else ""
    clauses: list[str] = []
    params: list[Any] = []
    if filters.group_ids is not None:
        clauses.append(f"{p}group_id IN (SELECT unnest(?::VARCHAR[]))")
        params.append(list(filters.group_ids))
    if filters.states is not None:
        clauses.append(f"{p}lifecycle_state IN (SELECT unnest(?::VARCHAR[]))")
        params.append(list(filters.states))
    if filters.created_after is not None:
        clauses.append(f"{p}created_at >= ?")
        params.append(filters.created_after)
    if filters.created_before is not None:
        clauses.append(f"{p}created_at < ?")
        params.append(filters.created_before)
    if kind == "entity" and filters.entity_types:
        clauses.append(f"{p}entity_type IN (SELECT unnest(?::VARCHAR[]))")
        params.append(list(filters.entity_types))
    if kind == "fact" and filters.relation_types:
        clauses.append(f"{p}relation IN (SELECT unnest(?::VARCHAR[]))")
        params.append(list(filters.relation_types))
    if kind == "fact" and not filters.include_invalidated:
        clauses.append(f"{p}expired_at IS NULL AND ({p}invalid_at IS NULL OR {p}invalid_at > ?)")
        params.append(filters.now)
    return clauses, params


def fetch_hits(
    store: Store, kind: str, uuids: Sequence[str], filters: SearchFilters
) -> list[dict[str, Any]]:
    """The rows of these candidate uuids that pass ``filters`` (any order)."""
    if not uuids:
        return []
    alias = "f" if kind == "fact" else ""
    clauses, params = _where(kind, filters, alias)
    key = f"{alias + '.' if alias else ''}uuid"
    where = " AND ".join([f"{key} IN (SELECT unnest(?::VARCHAR[]))", *clauses])
    if kind == "entity":
        sql = f"SELECT {_ENTITY_COLUMNS} FROM entities WHERE {where}"
    else:
        sql = (
            f"WITH f AS (SELECT * FROM facts f WHERE {where}) "
            f"SELECT {_FACT_COLUMNS} FROM f "
            "LEFT JOIN entities s ON s.uuid = f.source_uuid "
            "LEFT JOIN entities t ON t.uuid = f.target_uuid"
        )
    return store.fetch_dicts(sql, [list(uuids), *params])


def filtered_uuids(store: Store, kind: str, filters: SearchFilters, limit: int) -> list[str]:
    """Uuids of ``kind`` passing ``filters``; at most ``limit + 1`` (caller checks overflow)."""
    table = _TABLES[kind][0]
    clauses, params = _where(kind, filters, "")
    where = " AND ".join(clauses) or "TRUE"
    rows = store.fetchall(f"SELECT uuid FROM {table} WHERE {where} LIMIT ?", [*params, limit + 1])
    return [r[0] for r in rows]


def known_groups(store: Store, group_ids: Sequence[str]) -> set[str]:
    """Which of ``group_ids`` hold an episode, entity or fact."""
    rows = store.fetchall(
        "WITH g AS (SELECT unnest(?::VARCHAR[]) AS group_id) "
        "SELECT group_id FROM g WHERE group_id IN (SELECT group_id FROM episodes) "
        "OR group_id IN (SELECT group_id FROM entities) "
        "OR group_id IN (SELECT group_id FROM facts)",
        [list(group_ids)],
    )
    return {r[0] for r in rows}


def entity_exists(store: Store, uuid: str) -> bool:
    return store.fetchone("SELECT 1 FROM entities WHERE uuid = ?", [uuid]) is not None


def neighbourhood(store: Store, center_uuid: str, limit: int = 1000) -> tuple[list[str], set[str]]:
    """Facts touching ``center_uuid`` (at most ``limit``, newest first) and the entities at the
    other end of them (the centre's 1-hop neighbours)."""
    rows = store.fetchall(
        "SELECT uuid, source_uuid, target_uuid FROM facts "
        "WHERE source_uuid = ? OR target_uuid = ? ORDER BY created_at DESC LIMIT ?",
        [center_uuid, center_uuid, limit],
    )
    neighbours = {s if s != center_uuid else t for _, s, t in rows}
    neighbours.discard(center_uuid)
    return [r[0] for r in rows], neighbours
