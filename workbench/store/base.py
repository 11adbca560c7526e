"""The store protocol: what every backend offers, and the behaviour they share.

:class:`Store` is the abstract base of the two backends, siblings of each other:
:class:`~workbench.store.duckdb_store.DuckDBStore` (one database file, or ``:memory:``) and
:class:`~workbench.store.postgres.PostgresStore` (a database server shared by many processes).
``Store.open(location)`` picks one by the location (a ``postgresql://`` URL: the server).

What the base holds is behaviour that is not SQL text of one backend:

* the **unit-of-work rules**: one transaction at a time per store object (``transaction()``
  holds the store lock, re-entrant: a nested one joins the outer one), a statement outside
  one is a transaction of its own, ``commits`` counts them;
* the **write-behind rows** (:meth:`Store.defer`): append-only log rows that join the next
  commit instead of paying one each;
* **opening**: migrations, the vector size and model of the database checked;
* a **full disk** turned into :class:`~workbench.errors.StoreFull` and ``write_failure``.

A backend implements the statements (``execute``, ``fetch*``, ``transaction``…) and says
what it is by capabilities, never by name outside ``store/``: ``shared`` (other processes
write this database too), ``beside_file(suffix)`` (where this process may keep files of its
own database), ``available``/``outage()`` (a server that can go away). ``backend`` names the
SQL dialect, for the function modules of ``store/`` that write a statement two ways.
"""

from __future__ import annotations

import errno
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from workbench.errors import DimensionMismatch, ModelMismatch, StoreError, StoreFull
from workbench.store.schema import MIGRATIONS, SCHEMA_VERSION

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

__all__ = ["DEFAULT_DIM", "TABLES", "ChangeListener", "Params", "Row", "Store", "disk_full"]

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
    "fact_sources",
    "fact_imports",
)

DEFAULT_DIM = 384  # all-MiniLM-L6-v2's

# URL schemes of shared database servers -> "module:class" of their store (imported on use:
# the DuckDB store needs no database driver)
BACKENDS = {
    "postgresql": "workbench.store.postgres:PostgresStore",
    "postgres": "workbench.store.postgres:PostgresStore",
}
LOCAL = "workbench.store.duckdb_store:DuckDBStore"

Row = tuple[Any, ...]
Params = Sequence[Any] | dict[str, Any] | None

# an ``INSERT … VALUES (?, …)``'s row of placeholders (executemany makes it many rows)
VALUES = re.compile(r"\bVALUES\s*(\((?:\s*\?\s*,)*\s*\?\s*\))", re.IGNORECASE)

# deferred rows: sql -> (table, rows); written: (sql, table, rows) of the open transaction
Pending = list[tuple[str, str, list[Sequence[Any]]]]


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the database server's) is full: ``ENOSPC`` from the
    OS, DuckDB's "No space left on device", PostgreSQL's ``disk_full`` (SQLSTATE 53100)."""
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return True
    return "No space left on device" in str(exc) or getattr(exc, "sqlstate", None) == "53100"


class ChangeListener(Protocol):
    """A wait for another process's changes (a shared store's :meth:`Store.listen`)."""

    def wait(self, timeout: float) -> bool: ...

    def close(self) -> None: ...


def backend_class(location: str) -> type[Store]:
    """The store class for ``location``: a database server's by its URL scheme, else the
    DuckDB file's (imported here: a backend's driver is loaded only when it is used)."""
    import importlib

    scheme = location.split("://", 1)[0] if "://" in location else ""
    module, name = BACKENDS.get(scheme, LOCAL).split(":")
    found: type[Store] = getattr(importlib.import_module(module), name)
    return found


class Store(ABC):
    """A database with the workbench schema (see the module docstring)."""

    # the SQL dialect (``duckdb``, ``postgres``): read only by store/'s function modules
    backend: ClassVar[str]
    # whether other processes write this database too (then what this process saw of it, in
    # its caches or by counting its own commits, is not the whole story)
    shared: ClassVar[bool]
    # the name of this process's writes in a shared store's change log ("" for a file)
    origin: str = ""

    def __init__(self, path: str, dim: int, read_only: bool):
        self._lock = threading.RLock()
        self._depth = 0
        self._deferred: dict[str, tuple[str, list[Sequence[Any]]]] = {}
        self._written: Pending = []
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
        dim: int | None = DEFAULT_DIM,
        embedding_model: str = "",
        read_only: bool = False,
        pool_size: int = 8,
    ) -> Store:
        """Open (creating and migrating when needed) the database at ``path``: a DuckDB file
        or ``:memory:``, or a ``postgresql://`` URL (the shared store, ``pool_size``
        connections at most).

        Raises :class:`~workbench.errors.StoreLocked` when another process holds the file,
        and :class:`~workbench.errors.DimensionMismatch` when the database was built for
        vectors of another size (``dim=None``: whatever size it holds, for ``workbench
        reembed``).
        """
        location = str(path)
        return backend_class(location).connect(location, dim, embedding_model, read_only, pool_size)

    @classmethod
    @abstractmethod
    def connect(
        cls, location: str, dim: int | None, embedding_model: str, read_only: bool, pool_size: int
    ) -> Store:
        """This backend's :meth:`open` of ``location``."""

    @classmethod
    def open_snapshot(cls, directory: str | Path) -> Store:
        """A read-only in-memory store whose tables are loaded from an
        :meth:`export_parquet` folder (DuckDB's; imported on use: the protocol imports no
        backend, each backend imports it)."""
        import importlib

        module, name = LOCAL.split(":")
        snapshot: Store = getattr(importlib.import_module(module), name).from_parquet(directory)
        return snapshot

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
            self._migrated()

    def _before_migrations(self) -> None:  # noqa: B027 - a hook: nothing unless overridden
        """Inside the migration's transaction, first (a backend's own needs)."""

    def _after_migrations(self, dim: int) -> None:  # noqa: B027 - a hook
        """Inside the migration's transaction, last (a backend's own objects)."""

    def _migrated(self) -> None:  # noqa: B027 - a hook
        """After a migration that changed the schema was committed."""

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
        return " + ".join(str(r[0]) for r in rows)

    def meta(self, key: str) -> str | None:
        row = self.fetchone("SELECT value FROM meta WHERE key = ?", [key])
        return str(row[0]) if row else None

    def set_meta(self, key: str, value: str) -> None:
        """Set a ``meta`` entry (schema version, embedding size and model)."""
        self._set_meta(key, value)

    def _set_meta(self, key: str, value: str) -> None:
        self.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [key, value],
        )

    # --- statements (each backend's) -----------------------------------------------------
    @abstractmethod
    def execute(self, sql: str, params: Params = None) -> None:
        """Run one statement (a write: see :meth:`_write`)."""

    @abstractmethod
    def _executemany(
        self, sql: str, rows: Sequence[Sequence[Any]], match: re.Match[str] | None
    ) -> None:
        """Run ``sql`` for every row (``match``: its ``VALUES (?, …)``, if it has one); the
        caller holds the lock."""

    @abstractmethod
    def fetchall(self, sql: str, params: Params = None) -> list[Row]: ...

    @abstractmethod
    def fetchone(self, sql: str, params: Params = None) -> Row | None: ...

    @abstractmethod
    def fetch_dicts(self, sql: str, params: Params = None) -> list[dict[str, Any]]: ...

    @abstractmethod
    def df(self, sql: str, params: Params = None) -> pd.DataFrame:
        """The result as a pandas DataFrame."""

    @abstractmethod
    def fetch_arrow(self, sql: str, params: Params = None) -> pa.Table:
        """The result as a ``pyarrow.Table`` (the fast path for vectors and search rows)."""

    @abstractmethod
    def register(self, name: str, frame: Any) -> None:
        """A table ``name`` holding ``frame`` (an Arrow table or a DataFrame) for the next
        statements, until :meth:`unregister`."""

    @abstractmethod
    def unregister(self, name: str) -> None: ...

    @abstractmethod
    def transaction(self) -> AbstractContextManager[Store]:
        """Run a unit of work atomically; the lock is held throughout. Re-entrant: a nested
        ``transaction()`` joins the outer one. Deferred rows are written with it, and kept
        for the next write if it rolls back."""

    @abstractmethod
    def parallel(self, threads: int | None = None) -> AbstractContextManager[Store]:
        """Bulk statements inside may use ``threads`` (default: all cores)."""

    @abstractmethod
    def tables_replaced(self, dim: int) -> None:
        """After the embedding tables were dropped and others renamed in their place
        (``reembed``, vectors of ``dim``): what the backend attaches to tables is attached
        again."""

    @abstractmethod
    def advisory_lock(self, key: int) -> bool:
        """Whether this process holds the lock ``key`` for the open transaction (another
        process holding it: False, at once)."""

    @abstractmethod
    def lock_groups(self, group_ids: Sequence[str]) -> None:
        """Inside a transaction: wait until no other writer of these groups' entities and
        facts is between its dedupe reads and its commit, and keep them out until this
        transaction ends (what makes "create it unless it exists" hold under concurrency)."""

    @property
    @abstractmethod
    def available(self) -> bool:
        """Whether the store answers: False while a database server is known to be down
        (its operations then fail at once with ``StoreUnavailable``)."""

    @abstractmethod
    def outage(self) -> dict[str, str] | None:
        """While a database server is known to be down: since when and why; else None."""

    @abstractmethod
    def other_processes(self) -> list[str]:
        """The other workbench processes that use this database now (their names)."""

    @abstractmethod
    def listen(self, channel: str) -> ChangeListener:
        """A wait for ``channel``'s notifications of other processes' changes (a shared
        store's)."""

    @abstractmethod
    def release_cache(self) -> None:
        """Give back what this process caches of the tables after a full read."""

    @abstractmethod
    def lean_cache(self, limit_mb: int = 256) -> AbstractContextManager[None]:
        """For reads that go over every row once (the search engine's load at open): keep
        little of what they read cached in this process."""

    @abstractmethod
    def checkpoint(self) -> None:
        """Make what was committed durable in the database itself (not only in a log)."""

    @abstractmethod
    def close(self) -> None:
        """Write the deferred rows and close."""

    @abstractmethod
    def export_parquet(self, directory: str | Path) -> dict[str, Path]:
        """Write every table to ``directory/<table>.parquet`` (a consistent snapshot)."""

    def beside_file(self, suffix: str) -> Path | None:
        """``<database file><suffix>``, where this process keeps what belongs to one local
        database file (saved indexes, a shadow graph); None when there is no such file (in
        memory, a database server)."""
        if self.shared or self.path == ":memory:":
            return None
        return Path(f"{self.path}{suffix}")

    # --- writes --------------------------------------------------------------------------
    @contextmanager
    def bulk_writes(self) -> Iterator[None]:
        """Around many large transactions in a row (an import's chunks): the backend may
        leave work of each commit to the end. Here nothing (DuckDB overrides it)."""
        yield

    def insert_arrow(self, table: str, frame: pa.Table) -> None:
        """Insert ``frame``'s rows into ``table`` (its columns named as ``table``'s; the others
        take their defaults) in bulk: what an import writes. Here one ``INSERT … SELECT``
        from the registered frame; PostgreSQL overrides it with a binary ``COPY``."""
        if not frame.num_rows:
            return
        name = f"_bulk_{table}"
        columns = ", ".join(frame.column_names)
        with self.transaction():
            self.register(name, frame)
            try:
                self.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {name}")
            finally:
                self.unregister(name)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run ``sql`` once per row. An ``INSERT … VALUES (?, …)`` becomes one multi-row
        statement per chunk where the backend gains by it."""
        if not rows:
            return
        with self._write():
            self._executemany(sql, rows, VALUES.search(sql))

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

    def one(self, sql: str, params: Params = None) -> Row:
        """The row of a query that always returns one (an aggregate, ``nextval``)."""
        row = self.fetchone(sql, params)
        if row is None:
            raise StoreError(f"the database returned no row for: {sql.strip()[:120]}")
        return row

    def ping(self) -> None:
        """A trivial read: raises when the database does not answer."""
        self.fetchone("SELECT 1")

    @contextmanager
    def _joined(self) -> Iterator[None]:
        """A nested ``transaction()``: part of the open one (the caller holds the lock)."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    # --- write-behind --------------------------------------------------------------------
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

    def _restore_deferred(self, items: Pending) -> None:
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
                self._executemany(sql, rows, VALUES.search(sql))
            except BaseException:
                self._restore_deferred(pending[i:])
                raise
            self._written.append((sql, table, rows))

    def _before_read(self, sql: str) -> None:
        """Before a read: the deferred rows of the tables it names are written first."""
        if self._deferred:
            with self._deferred_lock:
                tables = [table for table, _ in self._deferred.values()]
            if any(table in sql for table in tables):
                self.flush()
