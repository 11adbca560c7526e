"""The store on PostgreSQL: the same tables, migrations and functions as the DuckDB file,
shared by many processes (service replicas, workers, the CLI) on one or many machines.

:class:`PostgresStore` implements the :class:`~workbench.store.base.Store` protocol (a sibling
of the DuckDB store, not a kind of it): its statements go through psycopg 3 and a connection
pool (``psycopg_pool``); the SQL is the project's own, translated by
:mod:`workbench.store.dialect`. Within one process it keeps the base's rules: one
transaction at a time (``transaction()`` holds the store lock), re-entrant. Reads outside a
transaction take a pooled connection of their own and do not wait for the lock. Between
processes, PostgreSQL's row locks and the queue's ``FOR UPDATE SKIP LOCKED`` do the rest.

Vectors are ``REAL[]`` columns: the search indexes live in each process's memory, so no
PostgreSQL extension is needed.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from workbench.errors import Conflict, DimensionMismatch, StoreError
from workbench.store.availability import Availability
from workbench.store.base import DEFAULT_DIM, TABLES, Params, Row, Store, disk_full
from workbench.store.changes import POSTGRES_DDL, TRIGGERS
from workbench.store.dialect import COMPAT_FUNCTIONS, postgres_params, to_postgres

if TYPE_CHECKING:
    import duckdb
    import pandas as pd
    import psycopg
    import pyarrow as pa
    from psycopg_pool import ConnectionPool

    Connection = psycopg.Connection[Row]
    Cursor = psycopg.Cursor[Row]

log = logging.getLogger("workbench.store")

__all__ = ["Listener", "PostgresStore", "is_postgres_url", "redact_url"]


def new_origin() -> str:
    """A name for one opened store's connections (``application_name``): the ``origin`` of
    the changes it writes; host and process say who it is."""
    return f"workbench:{socket.gethostname()[:24]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


# one advisory lock key per purpose (pg_advisory_xact_lock takes a bigint)
MIGRATION_LOCK = 0x776F726B62656E01  # "workben" + 1
# the two-key advisory locks of groups (lock_groups): this first key, the group's hash second
# (PostgreSQL keeps one- and two-key locks apart)
GROUP_LOCK_SPACE = 0x776B6731  # "wkg1"


# seconds: a new connection's attempt (psycopg's least is 2), the wait for a pooled connection
# before the server is probed, and TCP keepalives that find a silently dead peer in ~25 s
CONNECT_TIMEOUT = 3
POOL_WAIT_SECONDS = 5.0
CONNECTION_OPTIONS = {
    "connect_timeout": CONNECT_TIMEOUT,
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}
# SQLSTATEs of a connection that is gone: connection exceptions (class 08), the server shutting
# down or starting (57P01-57P03); an OperationalError without one never reached the server
_CONNECTION_LOST = ("08", "57P01", "57P02", "57P03")
# insufficient resources (class 53): disk_full (53100) is a full disk (see ``disk_full``); the
# others (out of memory, too many connections, a configured limit) pass by themselves
_RESOURCES = "53"


def connection_lost(exc: BaseException) -> bool:
    """Whether a psycopg error means the connection (or the server) is gone."""
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith(_CONNECTION_LOST)


def connection_options(url: str) -> dict[str, Any]:
    """The timeouts and keepalives of every connection, where the URL sets none itself."""
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(url)
    return {k: v for k, v in CONNECTION_OPTIONS.items() if k not in given}


def url_with_options(url: str) -> str:
    """The URL with :func:`connection_options` as query parameters (for libpq inside DuckDB's
    postgres extension, which takes a URL, not keyword arguments)."""
    from urllib.parse import urlencode

    extra = connection_options(url)
    if not extra:
        return url
    return f"{url}{'&' if '?' in url else '?'}{urlencode(extra)}"


def is_postgres_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def redact_url(url: str) -> str:
    """The URL without its password (what logs, /health and errors show)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ""
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def _require_driver() -> None:
    """Raise a clear :class:`StoreError` when psycopg 3 or its pool is not installed."""
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError:
        raise StoreError(
            "a postgresql:// database needs the postgres extra: pip install "
            "'knowledge-workbench[postgres]' (psycopg 3 and its pool)"
        ) from None


def _configure(con: Connection) -> None:
    """Every pooled connection: UTC, and numeric (sums, averages) read as int or float."""
    from psycopg.abc import Buffer
    from psycopg.adapt import Loader

    class NumericLoader(Loader):
        def load(self, data: Buffer) -> int | float:
            value = Decimal(bytes(data).decode())
            return int(value) if value == value.to_integral_value() else float(value)

    con.adapters.register_loader("numeric", NumericLoader)
    con.execute("SET TIME ZONE 'UTC'")
    con.commit()


class PostgresStore(Store):
    """A PostgreSQL database with the workbench schema."""

    backend = "postgres"
    shared = True

    def __init__(self, pool: ConnectionPool[Connection], url: str, dim: int, read_only: bool):
        super().__init__(redact_url(url), dim, read_only)
        self.url = url
        self._pool = pool
        self.origin = ""  # its connections' application_name (see new_origin)
        self.closed = False
        self._tx_conn: Connection | None = None  # the open transaction's (the lock owner's)
        self._tx_thread: int | None = None
        self._types_of: dict[str, dict[str, str]] = {}  # table -> column -> type (COPY)
        self.availability = Availability(self.path, self._probe, self._pool_check)

    # --- opening -----------------------------------------------------------------------
    @classmethod
    def connect(
        cls, location: str, dim: int | None, embedding_model: str, read_only: bool, pool_size: int
    ) -> PostgresStore:
        """Open the database at the URL ``location`` with ``pool_size`` connections at most."""
        _require_driver()
        import psycopg
        import psycopg_pool

        path = location
        origin = new_origin()
        try:
            # one connection first: a wrong address or password fails now, with its reason
            # (the pool would retry in the background until its timeout)
            psycopg.connect(path, connect_timeout=10).close()
            pool = psycopg_pool.ConnectionPool(
                path,
                min_size=1,
                max_size=max(2, pool_size),
                configure=_configure,
                # the writer's name in the change log (a process skips its own changes)
                kwargs={"autocommit": True, "application_name": origin} | connection_options(path),
                open=True,
                timeout=POOL_WAIT_SECONDS,
                name="workbench",
            )
            pool.wait(timeout=30)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            raise StoreError(
                f"cannot connect to the database {redact_url(path)}: "
                f"{str(exc).strip() or type(exc).__name__}"
            ) from None
        store = cls(pool, path, dim or DEFAULT_DIM, read_only)
        store.origin = origin
        try:
            store._prepare(dim, embedding_model)
        except BaseException:
            pool.close()
            raise
        return store

    def _before_migrations(self) -> None:
        # replicas starting together: one migrates, the others wait for it and find it done
        self._raw("SELECT pg_advisory_xact_lock(%s)", [MIGRATION_LOCK])
        for statement in COMPAT_FUNCTIONS:
            self._raw(statement)

    def _after_migrations(self, dim: int) -> None:
        """The PostgreSQL-only objects (the change log), versioned apart, and the size
        checks of the vector columns."""
        done = int(self.meta("postgres_schema_version") or 0)
        for step in POSTGRES_DDL[done:]:
            for statement in step:
                self._raw(statement)
        self._set_meta("postgres_schema_version", str(len(POSTGRES_DDL)))
        self._check_vector_sizes(dim, replace=False)

    # --- connections -------------------------------------------------------------------
    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """The open transaction's connection for its thread, else a pooled one."""
        own = self._own_connection()
        if own is not None:
            yield own
            return
        with self._pooled() as con:
            yield con

    @contextmanager
    def _pooled(self) -> Iterator[Connection]:
        """A pooled connection; at once :class:`StoreUnavailable` while the server is down."""
        self.availability.check()
        with self._translated_errors(), self._pool.connection() as con:
            yield con

    @property
    def available(self) -> bool:
        return self.availability.up

    def outage(self) -> dict[str, str] | None:
        return self.availability.outage()

    def _probe(self) -> str | None:
        """None when the server accepts a new connection and answers; else why not."""
        import psycopg

        try:
            with psycopg.connect(
                self.url, connect_timeout=CONNECT_TIMEOUT, application_name="workbench-probe"
            ) as con:
                con.execute("SELECT 1")
        except Exception as exc:  # noqa: BLE001 - the reason is the answer
            return _first_line(exc)
        return None

    def _pool_check(self) -> None:
        """The server is back: drop the pool's broken connections (new ones replace them)."""
        self._pool.check()

    def _in_own_transaction(self) -> bool:
        return self._own_connection() is not None

    def _own_connection(self) -> Connection | None:
        """The open transaction's connection when this thread holds it, else None."""
        if self._tx_thread == threading.get_ident():
            return self._tx_conn
        return None

    @contextmanager
    def _query(self, sql: str, params: Params) -> Iterator[Cursor]:
        """The cursor of a read (deferred rows of its tables written first)."""
        self._before_read(sql)
        with self._connection() as con:
            yield self._cursor_execute(con, sql, params)

    @contextmanager
    def _translated_errors(self) -> Iterator[None]:
        import psycopg as errors

        try:
            yield
        except errors.OperationalError as exc:
            if disk_full(exc):  # not stored; not ready until a write goes through again
                raise self._unwritable() from exc
            if connection_lost(exc):  # the server may be gone: fail fast from now on
                raise self.availability.lost(_first_line(exc)) from exc
            if (exc.sqlstate or "").startswith(_RESOURCES):
                raise StoreError(
                    f"the database server {self.path} lacks resources ({_first_line(exc)}): "
                    "the operation was not done; try again shortly",
                    retry_after=self.availability.retry_after,
                ) from exc
            raise StoreError(f"database error: {str(exc).strip()}") from exc
        except errors.errors.DeadlockDetected as exc:
            raise StoreError(f"database error: {str(exc).strip()}") from exc
        except errors.errors.SerializationFailure as exc:
            raise StoreError(f"database conflict: {str(exc).strip()}") from exc
        except errors.errors.CheckViolation as exc:
            constraint = getattr(exc.diag, "constraint_name", "") or ""
            if constraint.endswith("_embeddings_dim"):
                raise DimensionMismatch(
                    f"a vector of another size than the database's ({constraint}): every "
                    "process must use the embedder the database was built with (after "
                    "`workbench reembed`, restart them all with the new one)"
                ) from None
            raise
        except errors.errors.UniqueViolation as exc:
            raise Conflict(
                "the same record was written by another process at the same moment; try again"
            ) from exc

    def _raw(self, sql: str, params: Sequence[Any] | None = None) -> None:
        """A statement in psycopg's own syntax (no translation)."""
        with self._connection() as con:
            con.execute(sql, params)

    def _cursor_execute(self, con: Connection, sql: str, params: Params) -> Cursor:
        text, style = to_postgres(sql)
        with self._translated_errors():
            return con.execute(text, postgres_params(style, _plain(params)))

    # --- executing ---------------------------------------------------------------------
    def execute(self, sql: str, params: Params = None) -> None:
        with self._write(), self._connection() as con:
            self._cursor_execute(con, sql, params)

    def _executemany(
        self, sql: str, rows: Sequence[Sequence[Any]], match: re.Match[str] | None
    ) -> None:
        if match is not None:
            width = match.group(1).count("?")
            if any(len(row) != width for row in rows):
                raise ValueError(f"every row needs {width} values: {sql}")
        text, style = to_postgres(sql)
        with self._connection() as con, self._translated_errors():
            with con.cursor() as cur:
                cur.executemany(text, [[_value(v) for v in row] for row in rows])

    def fetchall(self, sql: str, params: Params = None) -> list[Row]:
        with self._query(sql, params) as cur:
            return cur.fetchall() if cur.description else []

    def fetchone(self, sql: str, params: Params = None) -> Row | None:
        with self._query(sql, params) as cur:
            return cur.fetchone() if cur.description else None

    def fetch_dicts(self, sql: str, params: Params = None) -> list[dict[str, Any]]:
        with self._query(sql, params) as cur:
            if not cur.description:
                return []
            cols = [d.name for d in cur.description]
            return [dict(zip(cols, row)) for row in cur.fetchall()]

    def df(self, sql: str, params: Params = None) -> pd.DataFrame:
        import pandas as pd

        with self._query(sql, params) as cur:
            cols = [d.name for d in cur.description or ()]
            return pd.DataFrame.from_records(cur.fetchall(), columns=cols)

    def fetch_arrow(self, sql: str, params: Params = None) -> pa.Table:
        import pyarrow as pa

        with self._query(sql, params) as cur:
            cols = [d.name for d in cur.description or ()]
            rows = cur.fetchall()
        return pa.table({name: [row[i] for row in rows] for i, name in enumerate(cols)})

    def register(self, name: str, frame: Any) -> None:
        """A temporary table ``name`` holding ``frame`` (an Arrow table or a DataFrame), for
        the statements of the open transaction; :meth:`unregister` drops it."""
        import pyarrow as pa

        if not self._in_own_transaction():
            raise StoreError("register() needs a transaction on PostgreSQL (a temporary table)")
        table = frame if isinstance(frame, pa.Table) else pa.Table.from_pandas(frame)
        columns = [(field.name, _pg_type(field.type)) for field in table.schema]
        ddl = ", ".join(f'"{n}" {t}' for n, t in columns)
        data = _binary_copy(table, [t for _, t in columns])
        with self._connection() as con, self._translated_errors():
            con.execute(f'DROP TABLE IF EXISTS "{name}"')
            con.execute(f'CREATE TEMP TABLE "{name}" ({ddl})')
            names = ", ".join(f'"{n}"' for n, _ in columns)
            if data is not None:  # encoded column by column, as insert_arrow writes
                binary = f'COPY "{name}" ({names}) FROM STDIN (FORMAT BINARY)'
                with con.cursor().copy(binary) as copy:
                    copy.write(data)
                return
            with con.cursor().copy(f'COPY "{name}" ({names}) FROM STDIN') as copy:
                copy.set_types([t for _, t in columns])
                for row in zip(*(table.column(i).to_pylist() for i in range(len(columns)))):
                    copy.write_row(row)

    def insert_arrow(self, table: str, frame: pa.Table) -> None:
        """Insert ``frame``'s rows into ``table`` by one binary ``COPY`` (encoded column by
        column: :mod:`workbench.store.pg_copy`); a column of a type it cannot encode falls
        back to the base class's ``INSERT … SELECT``. The change-log triggers fire once for
        the whole ``COPY`` (they are statement-level)."""
        from workbench.store import pg_copy

        if not frame.num_rows:
            return
        types = self._column_types(table)
        wanted = [types.get(name, "") for name in frame.column_names]
        if not all(pg_copy.supported(t) for t in wanted):
            super().insert_arrow(table, frame)
            return
        data = pg_copy.payload(frame, wanted)
        names = ", ".join(f'"{n}"' for n in frame.column_names)
        with self._write(), self._connection() as con, self._translated_errors():
            with (
                con.cursor() as cur,
                cur.copy(f"COPY {table} ({names}) FROM STDIN (FORMAT BINARY)") as copy,
            ):
                copy.write(data)

    def _column_types(self, table: str) -> dict[str, str]:
        """``table``'s columns and their types (``format_type``'s names), read once."""
        known = self._types_of
        if table not in known:
            rows = self.fetchall(
                """SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
                   WHERE attrelid = to_regclass(?) AND attnum > 0 AND NOT attisdropped""",
                [table],
            )
            known[table] = {str(name): str(kind) for name, kind in rows}
        return known[table]

    def unregister(self, name: str) -> None:
        from psycopg.pq import TransactionStatus

        with self._connection() as con, self._translated_errors():
            if con.info.transaction_status == TransactionStatus.INERROR:
                return  # the rollback drops the table (created in this transaction)
            con.execute(f'DROP TABLE IF EXISTS "{name}"')

    @contextmanager
    def transaction(self) -> Iterator[Store]:
        with self._lock:
            if self._depth:
                with self._joined():
                    yield self
                return
            cm = self._pooled()
            con = cm.__enter__()
            self._written = []
            try:
                with self._translated_errors(), con.transaction():
                    self._tx_conn, self._tx_thread = con, threading.get_ident()
                    self._depth = 1
                    try:
                        self._write_deferred()
                        yield self
                        self._write_deferred()
                    finally:
                        self._depth = 0
                        self._tx_conn, self._tx_thread = None, None
                self.write_failure = None  # committed: the server takes writes (again)
            except BaseException as exc:
                self._restore_deferred(self._written)
                cm.__exit__(type(exc), exc, exc.__traceback__)
                raise
            else:
                cm.__exit__(None, None, None)
            finally:
                self._written = []

    @contextmanager
    def parallel(self, threads: int | None = None) -> Iterator[Store]:
        """As it is: PostgreSQL plans its own parallel workers."""
        yield self

    def tables_replaced(self, dim: int) -> None:
        """The change-log triggers and size checks of the replaced embedding tables (they
        went with the old ones); ``dim``: the new vectors' size."""
        for statement in TRIGGERS:
            self._raw(statement)
        self._check_vector_sizes(dim, replace=True)

    def _check_vector_sizes(self, dim: int, replace: bool) -> None:
        """A ``REAL[]`` column has no size: a CHECK constraint refuses a vector of another
        size (what DuckDB's ``FLOAT[n]`` does), so a process with another embedder cannot
        write one."""
        for table in ("entity_embeddings", "fact_embeddings", "passage_embeddings"):
            name = f"{table}_dim"
            if not replace:
                row = self.fetchone(
                    "SELECT count(*) FROM pg_constraint WHERE conname = ? "
                    "AND conrelid = to_regclass(?)",
                    [name, table],
                )
                if row and row[0]:
                    continue
            self._raw(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {name}")
            self._raw(
                f"ALTER TABLE {table} ADD CONSTRAINT {name} "
                f"CHECK (cardinality(vector) = {int(dim)})"
            )

    def other_processes(self) -> list[str]:
        """The other workbench processes connected to this database now (their names)."""
        rows = self.fetchall(
            """SELECT DISTINCT application_name FROM pg_stat_activity
               WHERE datname = current_database() AND application_name LIKE 'workbench:%'
                 AND application_name <> ?""",
            [self.origin],
        )
        return sorted(r[0] for r in rows)

    def listen(self, channel: str) -> Listener:
        """A connection of its own that waits for ``NOTIFY channel``."""
        return Listener(self.url, channel, self.origin)

    def advisory_lock(self, key: int) -> bool:
        """Try the transaction-level advisory lock ``key`` (inside a transaction): whether
        this process got it (another process holding it: False, at once)."""
        row = self.fetchone("SELECT pg_try_advisory_xact_lock(?)", [key])
        return bool(row and row[0])

    def lock_groups(self, group_ids: Sequence[str]) -> None:
        """Take the transaction-level advisory lock of each group (waiting for another
        process's writer of the group to commit), in one order everywhere so two writers
        never wait for each other; released at commit or rollback."""
        if not self._in_own_transaction():
            raise StoreError("lock_groups() needs a transaction")
        if group_ids:
            self._raw(
                "SELECT pg_advisory_xact_lock(%s, k) FROM (SELECT DISTINCT hashtext(g) AS k "
                "FROM unnest(%s::text[]) AS g ORDER BY k) AS keys",
                [GROUP_LOCK_SPACE, sorted(set(group_ids))],
            )

    # --- lifecycle and export ----------------------------------------------------------
    def checkpoint(self) -> None:
        """Nothing to do: PostgreSQL writes its own checkpoints."""

    def release_cache(self) -> None:
        """Nothing to do: the cache is the server's."""

    @contextmanager
    def lean_cache(self, limit_mb: int = 0) -> Iterator[None]:
        """Nothing to do: the cache is the server's."""
        yield

    def close(self) -> None:
        with self._lock:
            try:
                if not self.read_only:
                    self.flush()
            finally:
                self.closed = True
                self.availability.close()
                self._pool.close(timeout=2.0)

    def export_parquet(self, directory: str | Path) -> dict[str, Path]:
        """Every table to ``directory/<table>.parquet``: DuckDB reads them through its postgres
        extension (the types kept) in one transaction, and writes the Parquet files."""
        import duckdb

        from workbench.store.duckdb_store import sql_path

        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        self.flush()
        con = duckdb.connect()
        try:
            attach_postgres(con, self.url)
            con.execute("BEGIN TRANSACTION")
            written: dict[str, Path] = {}
            for table in TABLES:
                target = out / f"{table}.parquet"
                con.execute(f"COPY pg.{table} TO '{sql_path(target)}' (FORMAT parquet)")
                written[table] = target
            con.execute("COMMIT")
        except duckdb.Error as exc:
            raise StoreError(f"cannot export {self.path}: {exc}") from None
        finally:
            con.close()
        return written


class Listener:
    """``LISTEN channel`` on a dedicated connection; :meth:`wait` returns when notified."""

    def __init__(self, url: str, channel: str, origin: str):
        _require_driver()
        import psycopg

        self._con = psycopg.connect(
            url, autocommit=True, application_name=origin, **connection_options(url)
        )
        try:
            self._con.execute(f"LISTEN {channel}")
        except BaseException:
            self._con.close()
            raise

    def wait(self, timeout: float) -> bool:
        """Whether a notification came within ``timeout`` seconds (the first one; others
        already queued wake the next wait at once)."""
        got = False
        for _ in self._con.notifies(timeout=timeout, stop_after=1):
            got = True
        return got

    def close(self) -> None:
        self._con.close()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# the names ``_pg_type`` gives, as ``format_type`` (and so :mod:`~workbench.store.pg_copy`)
# names them
_FORMAT_NAMES = {"timestamptz": "timestamp with time zone",
                 "timestamp": "timestamp without time zone"}  # fmt: skip


def _binary_copy(table: pa.Table, pg_types: Sequence[str]) -> bytes | None:
    """``table`` as the input of a binary ``COPY`` into columns of these types
    (:mod:`~workbench.store.pg_copy`: vectors as their float32 bits, not a text a float);
    None when a column has no binary encoding there (written a row at a time instead)."""
    import pyarrow as pa

    from workbench.store import pg_copy

    names = [_FORMAT_NAMES.get(t, t) for t in pg_types]
    if not table.num_rows or not all(pg_copy.supported(t) for t in names):
        return None
    try:
        return pg_copy.payload(table, names)
    except (ValueError, pa.ArrowInvalid, pa.ArrowTypeError):  # e.g. a list of varying size
        return None


def _pg_type(arrow_type: pa.DataType) -> str:
    import pyarrow as pa

    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "text"
    if pa.types.is_timestamp(arrow_type):
        return "timestamptz" if arrow_type.tz else "timestamp"
    if pa.types.is_integer(arrow_type):
        return "bigint"
    if pa.types.is_floating(arrow_type):
        return "real" if arrow_type == pa.float32() else "double precision"
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return _pg_type(arrow_type.value_type) + "[]"
    raise StoreError(f"no PostgreSQL type for the column type {arrow_type}")


def _plain(params: Params) -> list[Any] | Mapping[str, Any] | None:
    """numpy arrays as lists, dicts as JSON (psycopg adapts neither as they are)."""
    if params is None or isinstance(params, dict):
        return params
    return [_value(v) for v in params]


def _value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, dict):
        from psycopg.types.json import Json

        return Json(value)
    return value


def postgres_extension_path() -> str:
    """The file of DuckDB's postgres extension, from its PyPI package (never downloaded by
    DuckDB itself); its version must be duckdb's own."""
    import duckdb

    try:
        import duckdb_extension_postgres
    except ImportError:
        raise StoreError(
            "reading PostgreSQL from DuckDB needs the postgres extra: pip install "
            "'knowledge-workbench[postgres]' (duckdb-extension-postgres)"
        ) from None
    root = Path(duckdb_extension_postgres.__file__).parent / "extensions"
    found = sorted(root.glob(f"v{duckdb.__version__}/postgres.duckdb_extension"))
    if not found:
        have = ", ".join(p.name for p in root.iterdir()) if root.is_dir() else "none"
        raise StoreError(
            f"duckdb-extension-postgres has no build for duckdb {duckdb.__version__} "
            f"(it has: {have}); install the extension package of duckdb's exact version"
        )
    # DuckDB takes an extension's name from its file name, and this one's is postgres_scanner
    import os

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = cache / "knowledge-workbench" / "duckdb" / f"v{duckdb.__version__}"
    link = folder / "postgres_scanner.duckdb_extension"
    if not (link.is_symlink() and link.resolve() == found[0].resolve()):
        folder.mkdir(parents=True, exist_ok=True)
        temporary = folder / f".{os.getpid()}.link"
        temporary.unlink(missing_ok=True)
        temporary.symlink_to(found[0].resolve())
        temporary.replace(link)
    return str(link)


def attach_postgres(
    con: duckdb.DuckDBPyConnection, url: str, alias: str = "pg", read_only: bool = True
) -> str:
    """ATTACH the workbench tables of the PostgreSQL database ``url`` to the DuckDB
    connection ``con`` as ``alias`` (read-only by default); the schema they are in."""
    _require_driver()
    import psycopg

    with psycopg.connect(url, **connection_options(url)) as pg:
        row = pg.execute("SELECT current_schema()").fetchone()
    schema = str(row[0]) if row else "public"
    con.execute(f"LOAD '{postgres_extension_path()}'")
    literal = url_with_options(url).replace("'", "''")
    mode = ", READ_ONLY" if read_only else ""
    con.execute(f"ATTACH '{literal}' AS {alias} (TYPE postgres, SCHEMA '{schema}'{mode})")
    return schema
