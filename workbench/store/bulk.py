"""SQL of a bulk import: its Parquet reader and the set-based look-ups of a whole chunk.

A chunk of an import names thousands of entities across many groups; each look-up here is one
statement for the whole chunk (a join against the keys passed as arrays), never one per name
or per group, so a chunk costs the same whether the store holds a thousand entities or a
million (PostgreSQL answers the join from ``entities_group_name``; DuckDB hashes the chunk's
keys and scans the name columns once).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

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
