"""SQL of the search path: load what the in-process indexes and row cache hold.

Plain functions taking a :class:`~workbench.store.Store`. The search hot path does not query
DuckDB (see :mod:`workbench.search.rows` for why); these run at open, after writes the engine
is told about, and after maintenance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.store import Store

__all__ = ["load_vectors", "vectors_of", "load_rows", "known_groups", "maintenance_marker"]

_MEMORY = (
    "importance",
    "stability",
    "decay_score",
    "lifecycle_state",
    "last_accessed_at",
    "access_count",
)
COLUMNS = {
    "entity": (
        "uuid",
        "group_id",
        "name",
        "name_norm",
        "entity_type",
        "summary",
        "created_at",
        "updated_at",
        *_MEMORY,
    ),
    "fact": (
        "uuid",
        "group_id",
        "fact",
        "relation",
        "source_uuid",
        "target_uuid",
        "episode_uuid",
        "created_at",
        "valid_at",
        "invalid_at",
        "expired_at",
        *_MEMORY,
    ),
}
_TABLES = {"entity": ("entities", "entity_embeddings"), "fact": ("facts", "fact_embeddings")}


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


def vectors_of(store: Store, kind: str, uuids: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The stored vectors of these memories of ``kind`` (those that have one): (uuids,
    matrix), in one statement."""
    if not uuids:
        return [], np.zeros((0, store.dim), dtype=np.float32)
    data = store.fetch_numpy(
        f"SELECT uuid, vector FROM {_TABLES[kind][1]} WHERE uuid = ANY(?::VARCHAR[])",
        [list(uuids)],
    )
    found = [str(u) for u in data["uuid"]]
    if not found:
        return [], np.zeros((0, store.dim), dtype=np.float32)
    return found, np.stack(data["vector"]).astype(np.float32, copy=False)


def load_rows(store: Store, kind: str, uuids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The searchable columns of every memory of ``kind`` (or of these uuids)."""
    cols = ", ".join(COLUMNS[kind])
    table = _TABLES[kind][0]
    if uuids is None:
        return store.fetch_dicts(f"SELECT {cols} FROM {table} ORDER BY uuid")
    if not uuids:
        return []
    return store.fetch_dicts(
        f"SELECT {cols} FROM {table} WHERE uuid IN (SELECT unnest(?::VARCHAR[]))", [list(uuids)]
    )


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


def maintenance_marker(store: Store) -> int:
    """Changes whenever a maintenance run is recorded (the newest run id, 0 before any)."""
    row = store.fetchone("SELECT coalesce(max(id), 0) FROM maintenance_runs")
    return int(row[0]) if row else 0
