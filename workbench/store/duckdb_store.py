"""The DuckDB store: one database file (or ``:memory:``), schema-versioned, thread-safe.

A single connection is shared behind the store's re-entrant lock: DuckDB serialises writers
anyway, and our statements are short. ``transaction()`` holds the lock for the whole unit of
work. One process writes the file (DuckDB locks it), so this store is not ``shared``: what
this process saw of the database is all there is, the store lock already keeps other writers
of a group out, and the files it keeps beside the database (saved indexes) are its own.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from workbench.errors import StoreError, StoreLocked
from workbench.store.base import (
    DEFAULT_DIM,
    TABLES,
    ChangeListener,
    Params,
    Row,
    Store,
    disk_full,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["LEAN_CACHE_MB", "DuckDBStore", "memory_limit_value"]

log = logging.getLogger("workbench.store")

_CHUNK = 500

# DuckDB's memory limit while the search engine loads (see DuckDBStore.lean_cache): a 1M + 1M
# load took as long under 128 MB as under no limit
LEAN_CACHE_MB = 256
# the write-ahead log's size that makes a commit checkpoint, during an import (bulk_writes)
BULK_CHECKPOINT_THRESHOLD = "64 GiB"


def open_config() -> dict[str, str | bool | int | float | list[str]]:
    """How every connection of this package opens a database file: DuckDB lets one process
    open a file again only with the same configuration (a notebook's read-only view of the
    file beside a read-only store)."""
    return {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}


class DuckDBStore(Store):
    """A DuckDB database file (or ``:memory:``) with the workbench schema."""

    backend = "duckdb"
    shared = False

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str, dim: int, read_only: bool):
        super().__init__(path, dim, read_only)
        self._con = con
        self._memory_limit: str | None = None  # as set back after a lean read (see below)
        self._bulk_writers = 0  # imports under way (bulk_writes) and the threshold they
        self._threshold = "16 MiB"  # put back when the last ends

    # --- opening -----------------------------------------------------------------------
    @classmethod
    def connect(
        cls, location: str, dim: int | None, embedding_model: str, read_only: bool, pool_size: int
    ) -> DuckDBStore:
        """Open the file ``location`` (``pool_size``: unused, one connection serves all)."""
        if location != ":memory:":
            _make_folder(Path(location).expanduser().parent)
        config = open_config()
        try:
            con = duckdb.connect(location, read_only=read_only, config=config)
        except duckdb.Error as exc:
            raise _open_error(location, str(exc)) from None
        con.execute("SET TimeZone = 'UTC'")
        # Our statements are small: DuckDB's thread pool costs ~10x per insert on a busy
        # 2-core machine. Bulk work (maintenance) asks for more with ``parallel()``.
        con.execute("SET threads = 1")
        store = cls(con, location, dim or DEFAULT_DIM, read_only)
        store._prepare(dim, embedding_model)
        return store

    @classmethod
    def from_parquet(cls, directory: str | Path) -> DuckDBStore:
        """An in-memory store whose tables are loaded from an :meth:`export_parquet` folder."""
        folder = Path(directory)
        if not (folder / "episodes.parquet").is_file():
            raise StoreError(f"{folder} holds no snapshot (expected episodes.parquet and others)")
        con = duckdb.connect(":memory:")
        con.execute("SET TimeZone = 'UTC'")
        for table in TABLES:
            src = folder / f"{table}.parquet"
            if src.is_file():
                con.execute(f"CREATE TABLE {table} AS SELECT * FROM '{sql_path(src)}'")
        dim_row = con.execute(
            "SELECT len(vector) FROM entity_embeddings UNION ALL "
            "SELECT len(vector) FROM fact_embeddings LIMIT 1"
        ).fetchone()
        return cls(con, f"snapshot:{folder}", int(dim_row[0]) if dim_row else 0, read_only=True)

    def _migrated(self) -> None:
        # schema changes go to the file at once, never only to the write-ahead log: DuckDB
        # 1.5 fails to replay a log holding a table created and then altered (an internal
        # error at the next open after a crash)
        self.checkpoint()

    # --- statements --------------------------------------------------------------------
    def execute(self, sql: str, params: Params = None) -> None:
        with self._write():
            self._con.execute(sql, params)

    def _executemany(
        self, sql: str, rows: Sequence[Sequence[Any]], match: re.Match[str] | None
    ) -> None:
        """An ``INSERT … VALUES (?, …)`` as one multi-row statement per chunk (DuckDB's own
        executemany runs a statement per row: ~100x slower)."""
        if match is None:
            self._con.executemany(sql, rows)
            return
        group = match.group(1)
        width = group.count("?")
        if any(len(row) != width for row in rows):
            raise ValueError(f"every row needs {width} values: {sql}")
        # dicts would be unified into one STRUCT type across the rows: bound one by one
        if (
            len(rows) > 1
            and sql.count("?") == width
            and not any(isinstance(value, dict) for row in rows for value in row)
        ):
            # one list per column, unnested side by side: DuckDB binds a few list
            # parameters much faster than one scalar per value (16 rows of 19 columns:
            # 5.4 -> 2.9 ms)
            select = "SELECT " + ", ".join(f"unnest(${i + 1})" for i in range(width))
            statement = sql[: match.start()] + select + sql[match.end() :]
            for start in range(0, len(rows), _CHUNK):
                chunk = rows[start : start + _CHUNK]
                self._con.execute(statement, [list(col) for col in zip(*chunk)])
            return
        for start in range(0, len(rows), _CHUNK):
            chunk = rows[start : start + _CHUNK]
            values = ", ".join([group] * len(chunk))
            statement = sql[: match.start(1)] + values + sql[match.end(1) :]
            self._con.execute(statement, [v for row in chunk for v in row])

    def fetchall(self, sql: str, params: Params = None) -> list[Row]:
        with self._lock:
            self._before_read(sql)
            return self._con.execute(sql, params).fetchall()

    def fetchone(self, sql: str, params: Params = None) -> Row | None:
        with self._lock:
            self._before_read(sql)
            return self._con.execute(sql, params).fetchone()

    def fetch_dicts(self, sql: str, params: Params = None) -> list[dict[str, Any]]:
        with self._lock:
            self._before_read(sql)
            cur = self._con.execute(sql, params)
            cols = [d[0] for d in cur.description or ()]
            return [dict(zip(cols, row)) for row in cur.fetchall()]

    def df(self, sql: str, params: Params = None) -> pd.DataFrame:
        with self._lock:
            self._before_read(sql)
            return self._con.execute(sql, params).df()

    def fetch_arrow(self, sql: str, params: Params = None) -> pa.Table:
        with self._lock:
            self._before_read(sql)
            return self._con.execute(sql, params).to_arrow_table()

    def register(self, name: str, frame: Any) -> None:
        with self._lock:
            self._con.register(name, frame)

    def unregister(self, name: str) -> None:
        with self._lock:
            self._con.unregister(name)

    @contextmanager
    def transaction(self) -> Iterator[Store]:
        with self._lock:
            if self._depth:
                with self._joined():
                    yield self
                return
            self._con.execute("BEGIN TRANSACTION")
            self._depth = 1
            self._written = []
            try:
                self._write_deferred()
                yield self
                self._write_deferred()  # rows deferred inside the unit of work
                self._depth = 0
                self._con.execute("COMMIT")
                self.write_failure = None
                self.commits += 1
            except BaseException as exc:
                self._depth = 0
                try:
                    self._con.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # a failed COMMIT has already ended the transaction
                self._restore_deferred(self._written)  # kept for the next write
                if disk_full(exc):
                    raise self._unwritable() from None
                raise
            finally:
                self._written = []

    @contextmanager
    def parallel(self, threads: int | None = None) -> Iterator[Store]:
        """Let DuckDB use ``threads`` (default: all cores) for bulk statements inside."""
        with self._lock:
            self._con.execute(f"SET threads = {int(threads or os.cpu_count() or 1)}")
            try:
                yield self
            finally:
                self._con.execute("SET threads = 1")

    # --- one process, one file ---------------------------------------------------------
    def tables_replaced(self, dim: int) -> None:
        """Nothing to attach again: a ``FLOAT[dim]`` column holds its own size."""

    def advisory_lock(self, key: int) -> bool:
        """Always held: one process writes a DuckDB file."""
        return True

    def lock_groups(self, group_ids: Sequence[str]) -> None:
        """Nothing more to do: the transaction holds the store lock, and one process writes
        the file."""

    @property
    def available(self) -> bool:
        """A file always answers."""
        return True

    def outage(self) -> dict[str, str] | None:
        return None

    def other_processes(self) -> list[str]:
        """None: DuckDB lets one process write the file."""
        return []

    def listen(self, channel: str) -> ChangeListener:
        raise StoreError("a DuckDB file has no other writers to listen to (not a shared store)")

    # --- the cache of the table blocks -------------------------------------------------
    def release_cache(self) -> None:
        """Give back the table blocks DuckDB keeps cached after a full read (the search
        engine's load at open reads every row and vector once; DuckDB would otherwise keep
        them, a few hundred MB at 100k memories, until memory runs short). Only unpinned
        cache is dropped: lowering the memory limit evicts it, then the limit is set back.
        Under the store's lock; meant for start-up. Nothing to do for an in-memory database
        (its blocks are its data)."""
        with self._lock:
            limit = self._own_memory_limit()
            if limit is None:
                return
            try:
                self._con.execute("SET memory_limit = '16MB'")
            except duckdb.Error:
                log.debug("could not lower DuckDB's memory limit", exc_info=True)
            finally:
                self._con.execute(f"SET memory_limit = '{limit}'")

    @contextmanager
    def lean_cache(self, limit_mb: int = LEAN_CACHE_MB) -> Iterator[None]:
        """For reads that go over every row once (the search engine's load at open): DuckDB
        keeps at most ``limit_mb`` of the blocks read (else it keeps them all until memory
        runs short: 2.5-4 GB more at the peak of a 1M + 1M start-up), then gives back what it
        kept (:meth:`release_cache`). Operators that need more spill to disk as usual; a read
        that runs out of memory all the same raises :class:`MemoryError` (do it again without
        this). Nothing for an in-memory database."""
        with self._lock:
            limit = self._own_memory_limit()
            if limit is not None and (limit == "-1" or int(limit[:-2]) > limit_mb):
                self._con.execute(f"SET memory_limit = '{limit_mb}MB'")
        try:
            yield
        except duckdb.OutOfMemoryException as exc:
            raise MemoryError(f"DuckDB ran out of memory under {limit_mb} MB: {exc}") from exc
        finally:
            if limit is not None:
                with self._lock:
                    self._con.execute(f"SET memory_limit = '{limit}'")
                self.release_cache()

    def _own_memory_limit(self) -> str | None:
        """DuckDB's memory limit as this store set it back (hold the lock); None for an
        in-memory database, or a limit it cannot read. DuckDB shows the limit rounded ("18.7
        GiB"): the first call pins it to that value in MB (within 0.05 GiB of DuckDB's
        default of 80% of the RAM), so it never drifts."""
        row = self._con.execute(
            "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchone()
        if not row or not row[0]:
            return None
        if self._memory_limit is None:
            shown = self._con.execute("SELECT current_setting('memory_limit')").fetchone()
            self._memory_limit = memory_limit_value(str(shown[0] if shown else ""))
            if self._memory_limit is None:  # a limit it could not set back: leave it
                log.debug("DuckDB's memory limit %r not understood: left as it is", shown)
        return self._memory_limit

    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """An import's chunks commit without checkpointing, then one checkpoint at the end.
        DuckDB checkpoints at a commit once its write-ahead log passes 16 MB (two chunks of
        vectors), rewriting the primary-key indexes whole each time: at 100k memories a
        chunk's commit took ~0.2 s, a third of the import (docs/performance.md). Imports
        side by side (a service): the first sets the threshold, the last puts it back."""
        if self.path == ":memory:" or self.read_only:
            yield
            return
        with self._lock:
            if not self._bulk_writers:
                row = self._con.execute(
                    "SELECT current_setting('checkpoint_threshold')"
                ).fetchone()  # DuckDB's own text, as '16.0 MiB'
                self._threshold = str(row[0]).replace("'", "") if row else "16 MiB"
                self._con.execute(f"SET checkpoint_threshold = '{BULK_CHECKPOINT_THRESHOLD}'")
            self._bulk_writers += 1
        try:
            yield
        finally:
            with self._lock:
                self._bulk_writers -= 1
                if not self._bulk_writers:
                    self._end_bulk_writes()

    def _end_bulk_writes(self) -> None:
        """The checkpoint threshold put back, and what the commits left in the log written
        unless it is small (a few lines through a running service: a later commit does)."""
        self._con.execute(f"SET checkpoint_threshold = '{self._threshold}'")
        wal = Path(f"{self.path}.wal")
        try:
            if wal.exists() and wal.stat().st_size > _size_bytes(self._threshold):
                self._con.execute("CHECKPOINT")
        except duckdb.Error:  # another transaction open: a later commit checkpoints
            log.debug("no checkpoint after the bulk writes", exc_info=True)

    # --- lifecycle and export ----------------------------------------------------------
    def checkpoint(self) -> None:
        if self.path != ":memory:" and not self.read_only:
            with self._lock:
                self._con.execute("CHECKPOINT")

    def close(self) -> None:
        with self._lock:
            try:
                if not self.read_only:
                    self.flush()
                self.checkpoint()
            finally:
                self._con.close()

    def export_parquet(self, directory: str | Path) -> dict[str, Path]:
        """Write every table to ``directory/<table>.parquet`` (a consistent snapshot).

        A notebook can analyse the snapshot while the service keeps the write lock on the
        database file; :meth:`Store.open_snapshot` reads it back.
        """
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written: dict[str, Path] = {}
        with self.transaction():
            for table in TABLES:
                target = out / f"{table}.parquet"
                self._con.execute(f"COPY {table} TO '{sql_path(target)}' (FORMAT parquet)")
                written[table] = target
        return written


def _make_folder(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise StoreError(
            f"cannot create the database folder {folder}: part of that path is a file, not a "
            "folder (choose another path with --db / SVC_KNOWLEDGE_DB_PATH)"
        ) from None
    except OSError as exc:
        raise StoreError(
            f"cannot create the database folder {folder}: {exc.strerror or exc} "
            "(create it, or choose another path with --db / SVC_KNOWLEDGE_DB_PATH)"
        ) from None


_HOLDER = re.compile(r"lock is held in (.+?) \(PID (\d+)\)")


def _open_error(path: str, text: str) -> StoreError:
    """The one-line error for a database file DuckDB could not open (the holder named)."""
    if "lock" in text.lower():
        holder = _HOLDER.search(text)
        by = f" (PID {holder.group(2)}, {holder.group(1)})" if holder else ""
        return StoreLocked(
            f"the database file {path} is locked by another process{by}: stop it, or use "
            "a snapshot for analysis"
        )
    text = text.removeprefix("IO Error: ").split("\n", 1)[0]
    if "not a valid DuckDB database file" in text:
        return StoreError(
            f"the database file {path} is not a DuckDB database (empty, truncated or another "
            "kind of file): restore it from a backup, or move it away to start afresh"
        )
    return StoreError(f"cannot open the database file {path}: {text}")


_UNITS = {"bytes": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}  # fmt: skip


def memory_limit_value(shown: str) -> str | None:
    """DuckDB's displayed memory limit ("18.7 GiB", "512.0 MiB", "16383.9 PiB" for none) as a
    value ``SET memory_limit`` takes back: whole MB, or '-1' (no limit) for PiB-sized ones,
    which DuckDB shows but does not parse; None when it cannot be read."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]+)\s*", shown)
    if not match or match.group(2).lower() not in _UNITS:
        return None
    size = float(match.group(1)) * _UNITS[match.group(2).lower()]
    return "-1" if size >= 2**50 else f"{max(1, round(size / 10**6))}MB"


def _size_bytes(shown: str) -> int:
    """A size as DuckDB shows it ("16.0 MiB") in bytes (0 when it cannot be read)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([A-Za-z]+)\s*", shown)
    if not match or match.group(2).lower() not in _UNITS:
        return 0
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def sql_path(path: Path) -> str:
    """A path as the text of a single-quoted SQL literal."""
    return str(path).replace("'", "''")
