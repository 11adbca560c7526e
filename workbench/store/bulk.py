"""SQL of a bulk import: its Parquet reader, the set-based look-ups of a whole chunk, and its
bulk writes (Arrow tables: a binary ``COPY`` on PostgreSQL, ``INSERT … SELECT`` on DuckDB).

A chunk of an import names thousands of entities across many groups; each look-up here is one
statement for the whole chunk (a join against the keys passed as arrays), never one per name
or per group, so a chunk costs the same whether the store holds a thousand entities or a
million (PostgreSQL answers the join from ``entities_group_name``; DuckDB hashes the chunk's
keys and scans the name columns once).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from workbench.errors import InvalidInput
from workbench.store import Store, graph


def parquet_batches(path: Path, rows: int) -> Iterator[pa.RecordBatch]:
    """The rows of a Parquet file, ``rows`` at a time, read by DuckDB's Parquet reader (in a
    connection of its own: the file is not the store's). An unreadable file is
    :class:`InvalidInput`."""
    import duckdb

    con = duckdb.connect(config={"autoinstall_known_extensions": "false"})
    try:
        try:
            reader = con.execute("SELECT * FROM read_parquet(?)", [str(path)]).to_arrow_reader(rows)
        except duckdb.Error as exc:
            raise InvalidInput(f"{path} is not a readable Parquet file: {exc}") from None
        yield from reader
    finally:
        con.close()


def entity_uuids(store: Store, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The stored entity of each (group_id, normalised name) key, the oldest when a key has
    several (as ingestion picks): one statement for every key of a chunk, whatever its
    groups (:func:`~workbench.store.graph.entities_by_key`, the writers' check)."""
    return {key: row["uuid"] for key, row in graph.entities_by_key(store, keys).items()}


# the columns an import writes of a new entity or fact (the others take their defaults)
ENTITY_COLUMNS = {
    "uuid": pa.string(), "group_id": pa.string(), "name": pa.string(),
    "name_norm": pa.string(), "entity_type": pa.string(), "summary": pa.string(),
    "created_at": pa.timestamp("us", "UTC"), "updated_at": pa.timestamp("us", "UTC"),
    "importance": pa.int16(), "stability": pa.int16(), "classification_status": pa.string(),
    "lifecycle_state": pa.string(),
}  # fmt: skip
FACT_COLUMNS = {
    "uuid": pa.string(), "group_id": pa.string(), "source_uuid": pa.string(),
    "target_uuid": pa.string(), "relation": pa.string(), "fact": pa.string(),
    "episode_uuid": pa.string(), "created_at": pa.timestamp("us", "UTC"),
    "valid_at": pa.timestamp("us", "UTC"), "invalid_at": pa.timestamp("us", "UTC"),
    "importance": pa.int16(), "stability": pa.int16(), "classification_status": pa.string(),
    "lifecycle_state": pa.string(),
}  # fmt: skip


def insert_entities(store: Store, rows: Sequence[Mapping[str, Any]]) -> None:
    """New entity rows (every key of :data:`ENTITY_COLUMNS`), in one bulk write
    (:meth:`Store.insert_arrow`: a binary ``COPY`` on PostgreSQL)."""
    store.insert_arrow("entities", _frame(rows, ENTITY_COLUMNS))


def insert_facts(store: Store, rows: Sequence[Mapping[str, Any]]) -> None:
    """New fact rows (every key of :data:`FACT_COLUMNS`; ``episode_uuid``, ``valid_at`` and
    ``invalid_at`` may be missing), in one bulk write."""
    store.insert_arrow("facts", _frame(rows, FACT_COLUMNS))


def insert_new_vectors(
    store: Store, kind: str, uuids: Sequence[str], vectors: np.ndarray, model: str
) -> None:
    """The vectors of memories of ``kind`` ('entity' or 'fact') that have none yet (rows
    this write created), in one bulk write: no upsert (a uuid with a vector already is a
    :class:`~workbench.errors.Conflict`)."""
    if not len(uuids):
        return
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape != (len(uuids), store.dim):
        raise ValueError(f"{matrix.shape} vectors for {len(uuids)} rows of {store.dim} dimensions")
    store.insert_arrow(f"{kind}_embeddings", graph.vector_frame(uuids, matrix, model))


def _frame(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, pa.DataType]) -> pa.Table:
    return pa.table(
        {name: pa.array([r.get(name) for r in rows], kind) for name, kind in columns.items()}
    )
