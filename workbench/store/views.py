"""Whole tables for analysis: a table as a DataFrame, and DuckDB connections whose views are
the store's tables (a notebook's ``lab``, ``workbench export``) over a Parquet snapshot or a
shared PostgreSQL store's live tables."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb

from workbench.errors import InvalidInput
from workbench.store.base import TABLES, Store
from workbench.store.duckdb_store import open_config, sql_path

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["frame", "over_file", "over_parquet", "over_postgres"]


def frame(store: Store, table: str) -> pd.DataFrame:
    """The table ``table`` as a pandas DataFrame (one of :data:`TABLES`)."""
    if table not in TABLES:
        raise InvalidInput(f"unknown table {table!r}; one of {', '.join(TABLES)}")
    return store.df(f"SELECT * FROM {table}")


def over_parquet(files: Mapping[str, str | Path]) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per table over its Parquet file."""
    con = duckdb.connect()
    for table, path in files.items():
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{sql_path(Path(path))}')")
    return con


def over_file(path: str | Path) -> duckdb.DuckDBPyConnection:
    """The DuckDB database file itself, read-only, opened as a store opens it (so a read-only
    store of the same process can open it beside this connection)."""
    return duckdb.connect(str(path), read_only=True, config=open_config())


def over_postgres(url: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view per table over the live tables of the PostgreSQL store
    at ``url``, read through DuckDB's postgres extension (read-only)."""
    from workbench.store.postgres import attach_postgres

    con = duckdb.connect()
    try:
        attach_postgres(con, url, "live")
        for table in TABLES:
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM live.{table}")
    except Exception:
        con.close()
        raise
    return con
