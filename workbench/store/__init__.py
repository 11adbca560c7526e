"""The DuckDB store: one database file (or ``:memory:``), schema-versioned, thread-safe.

All SQL of the project lives in this package. Domain modules (``graph``, ``queue``,
``llm_calls``, ``decay`` …) are plain functions taking a :class:`Store` as first argument.
A single connection is shared behind a re-entrant lock: DuckDB serialises writers anyway, and
our statements are short. ``transaction()`` holds the lock for the whole unit of work.
"""

from __future__ import annotations

import errno
import importlib
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb

from workbench.errors import (
    DimensionMismatch,
    ModelMismatch,
    StoreError,
    StoreFull,
    StoreLocked,
)
from workbench.store.schema import MIGRATIONS, SCHEMA_VERSION

TABLES = (
    "episodes",
    "entities",
    "facts",
    "mentions",
    "entity_embeddings",
    "fact_embeddings",
    "passages",
    "passage_embeddings",
    "llm_calls",
    "queue",
    "maintenance_runs",
    "decay_history",
    "audit_log",
    "reextract_runs",
)

__all__ = ["Store", "TABLES", "SCHEMA_VERSION"]

_VALUES = re.compile(r"\bVALUES\s*(\((?:\s*\?\s*,)*\s*\?\s*\))", re.IGNORECASE)
_CHUNK = 500


DEFAULT_DIM = 384  # all-MiniLM-L6-v2's
# URL schemes of shared database servers -> "module:class" of their store (imported on use:
# the DuckDB store needs no database driver)
BACKENDS = {
    "postgresql": "workbench.store.postgres:PostgresStore",
    "postgres": "workbench.store.postgres:PostgresStore",
}
log = logging.getLogger("workbench.store")


# DuckDB's memory limit while the search engine loads (see Store.lean_cache): a 1M + 1M load
# took as long under 128 MB as under no limit
LEAN_CACHE_MB = 256


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the database server's) is full: ``ENOSPC`` from the
    OS, DuckDB's "No space left on device", PostgreSQL's ``disk_full`` (SQLSTATE 53100)."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return "No space left on device" in str(exc) or getattr(exc, "sqlstate", None) == "53100"


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


class Store:
    """A DuckDB database with the workbench schema (``open`` of a ``postgresql://`` URL: a
    :class:`~workbench.store.postgres.PostgresStore`, the same interface on PostgreSQL)."""

    backend = "duckdb"
    # whether other processes write this database too (then what this process saw of it, in
    # its caches or by counting its own commits, is not the whole story)
    shared = False

    def beside_file(self, suffix: str) -> Path | None:
        """``<database file><suffix>``, where this process keeps what belongs to one local
        database file (saved indexes, a shadow graph); None when there is no such file (in
        memory, a database server)."""
        if self.shared or self.path == ":memory:":
            return None
        return Path(f"{self.path}{suffix}")

    def __init__(self, con: duckdb.DuckDBPyConnection, path: str, dim: int, read_only: bool):
        self._con = con
        self._lock = threading.RLock()
        self._depth = 0
        # write-behind rows (append-only logs such as llm_calls): sql -> (table, rows)
        self._deferred: dict[str, tuple[str, list[Sequence[Any]]]] = {}
        self._written: list[tuple[str, str, list[Sequence[Any]]]] = []
        self._deferred_lock = threading.Lock()
        self.path = path
        self.dim = dim
        self.read_only = read_only
        self.write_failure: str | None = None  # why writes fail (a full disk), until one works
        self.commits = 0  # transactions committed through this store object

    # --- opening -----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | Path = ":memory:",
        dim: int | None = 384,
        embedding_model: str = "",
        read_only: bool = False,
        pool_size: int = 8,
    ) -> Store:
        """Open (creating and migrating when needed) the database at ``path``.

        Raises :class:`StoreLocked` when another process holds the file, and
        :class:`DimensionMismatch` when the file was built for vectors of another size
        (``dim=None``: whatever size it holds, for ``workbench reembed``). A
        ``postgresql://`` URL opens the shared store (``pool_size`` connections at most).
        """
        path = str(path)
        scheme = path.split("://", 1)[0] if "://" in path else ""
        if scheme in BACKENDS:  # a shared database server: its backend's store class
            module, name = BACKENDS[scheme].split(":")
            backend = getattr(importlib.import_module(module), name)
            return backend.open(path, dim, embedding_model, read_only, pool_size=pool_size)
        if path != ":memory:":
            _make_folder(Path(path).expanduser().parent)
        config = {"autoinstall_known_extensions": "false", "autoload_known_extensions": "false"}
        try:
            con = duckdb.connect(path, read_only=read_only, config=config)
        except duckdb.Error as exc:
            raise _open_error(path, str(exc)) from None
        con.execute("SET TimeZone = 'UTC'")
        # Our statements are small: DuckDB's thread pool costs ~10x per insert on a busy
        # 2-core machine. Bulk work (maintenance) asks for more with ``parallel()``.
        con.execute("SET threads = 1")
        store = cls(con, path, dim or DEFAULT_DIM, read_only)
        store._prepare(dim, embedding_model)
        return store

    def _prepare(self, dim: int | None, embedding_model: str) -> None:
        """After opening: migrate (unless read-only), then take or check the vector size."""
        if not self.read_only:
            self._migrate(dim or DEFAULT_DIM, embedding_model)
        if dim is None:
            self.dim = self._stored_dim() or DEFAULT_DIM
        else:
            self._check_dimension(dim, embedding_model)

    def _migrate(self, dim: int, embedding_model: str) -> None:
        with self.transaction():
            self._before_migrations()
            version = self._schema_version()
            for step in MIGRATIONS[version:]:
                for statement in step(self._stored_dim() or dim):
                    self.execute(statement)
            self._set_meta("schema_version", str(SCHEMA_VERSION))
            if self._stored_dim() is None:
                self._set_meta("embedding_dim", str(dim))
                self._set_meta("embedding_model", embedding_model)
            self._after_migrations(self._stored_dim() or dim)
        if version < SCHEMA_VERSION:
            # schema changes go to the file at once, never only to the write-ahead log: DuckDB
            # 1.5 fails to replay a log holding a table created and then altered (an internal
            # error at the next open after a crash)
            self.checkpoint()

    def _before_migrations(self) -> None:
        """Inside the migration's transaction, first (a backend's own needs)."""

    def _after_migrations(self, dim: int) -> None:
        """Inside the migration's transaction, last (a backend's own objects)."""

    def _has_meta(self) -> bool:
        row = self.fetchone(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'meta' "
            "AND table_schema = current_schema()"
        )
        return bool(row and row[0])

    def _schema_version(self) -> int:
        if not self._has_meta():
            return 0
        return int(self.meta("schema_version") or 0)

    def _stored_dim(self) -> int | None:
        if not self._has_meta():
            return None
        value = self.meta("embedding_dim")
        return int(value) if value else None

    def _check_dimension(self, dim: int, embedding_model: str) -> None:
        stored = self._stored_dim()
        if stored is not None and stored != dim:
            model = self.meta("embedding_model") or "unknown"
            raise DimensionMismatch(
                f"the database {self.path} holds {stored}-dimensional embeddings "
                f"(model {model!r}) but the embedder produces {dim} dimensions "
                f"({embedding_model or 'configured model'}); use the same embedder, or "
                "`workbench reembed` the database with the new one"
            )
        self._check_model(embedding_model)

    def _check_model(self, embedding_model: str) -> None:
        """Refuse an embedder that is not the model of the stored vectors. A database that
        names no model takes its vectors' (their rows name it), or the embedder's while it
        holds none."""
        if not embedding_model:
            return
        stored = self.meta("embedding_model") or self._vector_model()
        if not stored:
            if not self.read_only:
                self._set_meta("embedding_model", embedding_model)
            return
        if stored != embedding_model:
            raise ModelMismatch(
                f"the database {self.path} holds vectors of the model {stored!r}, but the "
                f"embedder is {embedding_model!r}: embed it again with "
                f"`workbench reembed --model {embedding_model}` (the memories are kept; the "
                f"service must be stopped), or configure {stored!r} again "
                f"(SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL={stored})"
            )

    def _vector_model(self) -> str:
        """The model named by the stored vectors' rows ("" when there are none; several names
        joined by " + " when they name several, which no embedder matches)."""
        rows = self.fetchall(
            "SELECT DISTINCT model FROM (SELECT model FROM entity_embeddings "
            "UNION ALL SELECT model FROM fact_embeddings) AS written ORDER BY model LIMIT 3"
        )
        return " + ".join(r[0] for r in rows)

    def meta(self, key: str) -> str | None:
        row = self.fetchone("SELECT value FROM meta WHERE key = ?", [key])
        return row[0] if row else None

    def set_meta(self, key: str, value: str) -> None:
        """Set a ``meta`` entry (schema version, embedding size and model)."""
        self._set_meta(key, value)

    def _set_meta(self, key: str, value: str) -> None:
        self.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [key, value],
        )

    # --- executing ---------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> None:
        with self._write():
            self._con.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run ``sql`` once per row. An ``INSERT … VALUES (?, …)`` becomes one multi-row
        statement per chunk (DuckDB's own executemany runs a statement per row: ~100x
        slower)."""
        if not rows:
            return
        with self._write():
            self._executemany(sql, rows, _VALUES.search(sql))

    @contextmanager
    def _write(self) -> Iterator[None]:
        """The lock for a write; outside a transaction, deferred rows make it one with them."""
        with self._lock:
            if self._deferred and not self._depth:
                with self.transaction():
                    yield
            elif self._depth:
                yield
            else:
                with self._full_disk():
                    yield
                if not self._depth:  # a statement of its own: committed
                    self.commits += 1

    @contextmanager
    def _full_disk(self) -> Iterator[None]:
        """A write that fails for want of disk space is :class:`StoreFull` and marks the store
        unwritable (``write_failure``, for ``/health``) until a write succeeds."""
        try:
            yield
        except Exception as exc:
            if not disk_full(exc):
                raise
            raise self._unwritable() from None
        self.write_failure = None

    def _unwritable(self) -> StoreFull:
        self.write_failure = (
            f"the disk holding the database {self.path} is full: the write was not stored; "
            "free some space (the service is not ready until writes succeed again)"
        )
        return StoreFull(self.write_failure)

    def probe_write(self) -> None:
        """A tiny write (raises :class:`StoreFull` while the disk is full)."""
        with self.transaction():
            self._set_meta("write_probe", str(time.time()))

    def _executemany(self, sql: str, rows: Sequence[Sequence[Any]], match) -> None:
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

    # --- write-behind ------------------------------------------------------------------
    def defer(self, table: str, sql: str, row: Sequence[Any]) -> None:
        """Queue one ``INSERT INTO table … VALUES (?, …)`` row to be written with the next
        write (a transaction or an ``execute``), or before a read that names ``table``.

        A DuckDB commit costs ~1–3 ms; log rows written one by one (an LLM call's row) would
        pay it each time. Deferred rows join the next commit instead, so they cost one
        multi-row statement. They are kept if that transaction rolls back, flushed by
        :meth:`flush` and :meth:`close`, and lost only if the process dies before either.
        """
        with self._deferred_lock:  # not the store lock: deferring never waits for a query
            self._deferred.setdefault(sql, (table, []))[1].append(list(row))

    @property
    def deferred_rows(self) -> int:
        with self._deferred_lock:
            return sum(len(rows) for _, rows in self._deferred.values())

    def _restore_deferred(self, items: list[tuple[str, str, list[Sequence[Any]]]]) -> None:
        """Put rows that were not committed back in front of the waiting ones."""
        with self._deferred_lock:
            for sql, table, rows in reversed(items):
                self._deferred.setdefault(sql, (table, []))[1][:0] = rows

    def flush(self) -> None:
        """Write the deferred rows now (in their own transaction unless inside one)."""
        with self._lock:
            if not self._deferred:
                return
            if self._depth:
                self._write_deferred()
            else:
                with self.transaction():
                    pass  # the transaction writes them

    def _write_deferred(self) -> None:
        """Insert the deferred rows (the caller holds the store lock, inside a transaction)."""
        with self._deferred_lock:
            pending = [(sql, table, rows) for sql, (table, rows) in self._deferred.items()]
            self._deferred = {}
        for i, (sql, table, rows) in enumerate(pending):
            try:
                self._executemany(sql, rows, _VALUES.search(sql))
            except BaseException:
                self._restore_deferred(pending[i:])
                raise
            self._written.append((sql, table, rows))

    def _before_read(self, sql: str) -> None:
        if self._deferred:
            with self._deferred_lock:
                tables = [table for table, _ in self._deferred.values()]
            if any(table in sql for table in tables):
                self.flush()

    def fetchall(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None) -> list:
        with self._lock:
            self._before_read(sql)
            return self._con.execute(sql, params).fetchall()

    def fetchone(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None):
        with self._lock:
            self._before_read(sql)
            return self._con.execute(sql, params).fetchone()

    def fetch_dicts(
        self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        with self._lock:
            self._before_read(sql)
            cur = self._con.execute(sql, params)
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row)) for row in cur.fetchall()]

    def df(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None):
        """The result as a pandas DataFrame."""
        with self._lock:
            self._before_read(sql)
            return self._con.execute(sql, params).df()

    def fetch_arrow(self, sql: str, params: Sequence[Any] | dict[str, Any] | None = None):
        """The result as a ``pyarrow.Table`` (columnar, no Python object per value: the fast
        path for vectors and the search rows)."""
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
    def _joined(self) -> Iterator[None]:
        """A nested ``transaction()``: part of the open one (the caller holds the lock)."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    @contextmanager
    def transaction(self) -> Iterator[Store]:
        """Run a unit of work atomically; the lock is held throughout.

        Re-entrant: a nested ``transaction()`` joins the outer one.
        """
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

    def tables_replaced(self, dim: int) -> None:
        """After the embedding tables were dropped and others renamed in their place
        (``reembed``, vectors of ``dim``): what the backend attaches to tables is attached
        again (nothing, on DuckDB)."""

    def advisory_lock(self, key: int) -> bool:
        """Whether this process holds the lock ``key`` for the open transaction: always, on a
        DuckDB file (one process writes it)."""
        return True

    @property
    def available(self) -> bool:
        """Whether the store answers: False while a database server is known to be down
        (its operations then fail at once with ``StoreUnavailable``); a file always does."""
        return True

    def outage(self) -> dict[str, str] | None:
        """While a database server is known to be down: since when and why; else None."""
        return None

    def lock_groups(self, group_ids: Sequence[str]) -> None:
        """Inside a transaction: wait until no other writer of these groups' entities and
        facts is between its dedupe reads and its commit, and keep them out until this
        transaction ends (what makes "create it unless it exists" hold under concurrency).
        On a DuckDB file the transaction already holds the store lock, and one process
        writes the file: nothing more to do."""

    @contextmanager
    def parallel(self, threads: int | None = None) -> Iterator[Store]:
        """Let DuckDB use ``threads`` (default: all cores) for bulk statements inside."""
        import os

        with self._lock:
            self._con.execute(f"SET threads = {int(threads or os.cpu_count() or 1)}")
            try:
                yield self
            finally:
                self._con.execute("SET threads = 1")

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
        if getattr(self, "_memory_limit", None) is None:
            shown = self._con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
            self._memory_limit = memory_limit_value(str(shown))
            if self._memory_limit is None:  # a limit it could not set back: leave it
                log.debug("DuckDB's memory limit %r not understood: left as it is", shown)
        return self._memory_limit

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
        database file; :meth:`open_snapshot` reads it back.
        """
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        written: dict[str, Path] = {}
        with self.transaction():
            for table in TABLES:
                target = out / f"{table}.parquet"
                self._con.execute(f"COPY {table} TO '{_sql_path(target)}' (FORMAT parquet)")
                written[table] = target
        return written

    @classmethod
    def open_snapshot(cls, directory: str | Path) -> Store:
        """An in-memory store whose tables are loaded from an :meth:`export_parquet` folder."""
        folder = Path(directory)
        if not (folder / "episodes.parquet").is_file():
            raise StoreError(f"{folder} holds no snapshot (expected episodes.parquet and others)")
        con = duckdb.connect(":memory:")
        con.execute("SET TimeZone = 'UTC'")
        for table in TABLES:
            src = folder / f"{table}.parquet"
            if src.is_file():
                con.execute(f"CREATE TABLE {table} AS SELECT * FROM '{_sql_path(src)}'")
        dim_row = con.execute(
            "SELECT len(vector) FROM entity_embeddings UNION ALL "
            "SELECT len(vector) FROM fact_embeddings LIMIT 1"
        ).fetchone()
        return cls(con, f"snapshot:{folder}", int(dim_row[0]) if dim_row else 0, read_only=True)


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


def _sql_path(path: Path) -> str:
    return str(path).replace("'", "''")
