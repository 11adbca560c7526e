"""The store: all SQL of the project, behind one protocol with two backends.

:class:`Store` (:mod:`workbench.store.base`) is what the rest of the project types against and
opens: ``Store.open(path)`` returns a :class:`~workbench.store.duckdb_store.DuckDBStore` for a
file or ``:memory:``, a :class:`~workbench.store.postgres.PostgresStore` for a
``postgresql://`` URL (imported only then: the file needs no database driver). Domain modules
(``graph``, ``queue``, ``llm_calls``, ``maintenance`` …) are plain functions taking a
:class:`Store` as first argument.
"""

from __future__ import annotations

from pathlib import Path

from workbench.store.base import DEFAULT_DIM, TABLES, Store, disk_full
from workbench.store.duckdb_store import DuckDBStore, memory_limit_value
from workbench.store.schema import SCHEMA_VERSION

__all__ = [
    "DEFAULT_DIM",
    "SCHEMA_VERSION",
    "TABLES",
    "DuckDBStore",
    "Store",
    "disk_full",
    "memory_limit_value",
    "open",
]


def open(
    path: str | Path = ":memory:",
    dim: int | None = DEFAULT_DIM,
    embedding_model: str = "",
    read_only: bool = False,
    pool_size: int = 8,
) -> Store:
    """The store at ``path`` (see :meth:`Store.open`)."""
    return Store.open(path, dim, embedding_model, read_only, pool_size)
