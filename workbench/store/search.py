"""SQL of the search path: load what the in-process indexes and row cache hold.

Plain functions taking a :class:`~workbench.store.Store`. The search hot path does not query
DuckDB (see :mod:`workbench.index.rows` for why); these run at open, after writes the engine
is told about, and after maintenance.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from workbench.store import Store

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "load_vectors",
    "load_vector_seqs",
    "latest_vector_seq",
    "vectors_of",
    "vector_matrix",
    "load_table",
    "micros",
    "load_rows",
    "known_groups",
    "maintenance_marker",
    "group_uuids",
]

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
    "passage": (
        "uuid",
        "group_id",
        "text",
        "speaker",
        "episode_uuid",
        "episode_name",
        "position",
        "reference_time",
        "created_at",
        *_MEMORY,
    ),
}
_TABLES = {
    "entity": ("entities", "entity_embeddings"),
    "fact": ("facts", "fact_embeddings"),
    "passage": ("passages", "passage_embeddings"),
}
# what the rows of a kind are read from: a passage's row carries its episode's name
_SOURCES = {
    "entity": "entities",
    "fact": "facts",
    "passage": "(SELECT p.*, e.name AS episode_name FROM passages p "
    "LEFT JOIN episodes e ON e.uuid = p.episode_uuid) AS passages",
}


def load_vectors(store: Store, kind: str) -> tuple[list[str], list[str], NDArray[np.float32]]:
    """Every stored vector of ``kind`` whose memory row exists: (uuids, group_ids, matrix)."""
    table, emb = _TABLES[kind]
    with store.parallel():  # a full scan: every core
        data = store.fetch_arrow(
            f"SELECT e.uuid, m.group_id, e.vector FROM {emb} e JOIN {table} m USING (uuid)"
        )
    if not data.num_rows:
        return [], [], np.zeros((0, store.dim), dtype=np.float32)
    matrix = vector_matrix(data.column("vector"), store.dim)
    # interned: the search engine's row cache holds the same uuids (one string object each)
    uuids = list(map(sys.intern, data.column("uuid").to_pylist()))
    return uuids, data.column("group_id").to_pylist(), matrix


def load_vector_seqs(store: Store, kind: str) -> tuple[list[str], list[str], NDArray[np.int64]]:
    """What :func:`load_vectors` reads but the vectors: (uuids, group_ids, the number of
    each vector's last write), for a restart that reads only the vectors written since its
    saved index."""
    table, emb = _TABLES[kind]
    with store.parallel():
        data = store.fetch_arrow(
            f"SELECT e.uuid, m.group_id, e.seq FROM {emb} e JOIN {table} m USING (uuid)"
        )
    uuids = list(map(sys.intern, data.column("uuid").to_pylist()))
    seqs = np.asarray(data.column("seq").fill_null(-1).to_numpy(), dtype=np.int64)
    return uuids, data.column("group_id").to_pylist(), seqs


def latest_vector_seq(store: Store) -> int:
    """The number of the newest vector write (0: none)."""
    tops = ", ".join(f"coalesce((SELECT max(seq) FROM {emb}), 0)" for _, emb in _TABLES.values())
    row = store.fetchone(f"SELECT greatest({tops})")
    return int(row[0]) if row else 0


def vectors_of(
    store: Store, kind: str, uuids: Sequence[str]
) -> tuple[list[str], NDArray[np.float32]]:
    """The stored vectors of these memories of ``kind`` (those that have one): (uuids,
    matrix), in one statement."""
    if not uuids:
        return [], np.zeros((0, store.dim), dtype=np.float32)
    data = store.fetch_arrow(
        f"SELECT uuid, vector FROM {_TABLES[kind][1]} WHERE uuid = ANY(?::VARCHAR[])",
        [list(uuids)],
    )
    if not data.num_rows:
        return [], np.zeros((0, store.dim), dtype=np.float32)
    return data.column("uuid").to_pylist(), vector_matrix(data.column("vector"), store.dim)


def vector_matrix(column: pa.ChunkedArray, dim: int) -> NDArray[np.float32]:
    """A column of vectors (Arrow lists of numbers) as one float32 matrix, read straight from
    the Arrow buffers (no Python object per number; ``to_numpy`` of a 38M-float child takes
    about a second, the buffer view nothing)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = []
    for chunk in column.chunks:
        # the values of just this chunk's lists (a slice of the child: no copy); variable-size
        # lists (PostgreSQL's REAL[]) the same way
        values = pc.list_flatten(chunk)
        values = values.cast(pa.float32()) if values.type != pa.float32() else values
        if values.null_count:
            raise ValueError("a stored vector holds a NULL")
        buffer = values.buffers()[1]
        parts.append(np.frombuffer(buffer, np.float32, len(values), values.offset * 4))
    flat = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if flat.size != len(column) * dim:
        raise ValueError(f"stored vectors are not all {dim}-dimensional")
    return flat.reshape(len(column), dim)


def load_rows(store: Store, kind: str, uuids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The searchable columns of every memory of ``kind`` (or of these uuids)."""
    cols = ", ".join(COLUMNS[kind])
    table = _SOURCES[kind]
    if uuids is None:
        return store.fetch_dicts(f"SELECT {cols} FROM {table} ORDER BY uuid")
    if not uuids:
        return []
    return store.fetch_dicts(
        f"SELECT {cols} FROM {table} WHERE uuid IN (SELECT unnest(?::VARCHAR[]))", [list(uuids)]
    )


def load_table(store: Store, kind: str) -> pa.Table:
    """The searchable columns of every memory of ``kind`` as one Arrow table."""
    with store.parallel():  # a full scan: every core
        return store.fetch_arrow(f"SELECT {', '.join(COLUMNS[kind])} FROM {_SOURCES[kind]}")


def micros(column: pa.ChunkedArray, null: int) -> NDArray[np.int64]:
    """An Arrow timestamp column as int64 microseconds since the epoch, ``null`` for NULL."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_timestamp(column.type) and column.type.unit != "us":
        column = column.cast(pa.timestamp("us", column.type.tz))
    values = pc.fill_null(column.cast(pa.int64()), null)
    return np.array(values.to_numpy(), dtype=np.int64)  # a writable copy


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


def group_uuids(store: Store, kind: str, group_id: str) -> list[str]:
    """The uuids of every memory of ``kind`` in the group (a follower re-reading a group
    whose memories another process replaced whole: a re-extraction's promote)."""
    rows = store.fetchall(
        f"SELECT uuid FROM {_SOURCES[kind]} WHERE group_id = ? ORDER BY uuid", [group_id]
    )
    return [r[0] for r in rows]
