"""The running service owns its database: where it is, and how other clients reach it.

DuckDB admits one process on a file. While ``workbench serve`` holds the database, the CLI,
``workbench mcp`` and notebooks go through its tools instead of opening the file:

* :func:`write_record` — at start the service writes a small runtime record beside the
  database (``<db>.service.json``: the tools' address, its PID, whether a token is needed,
  never the token itself) and removes it on a clean stop;
* :func:`find_live` — a client reads the record; one whose PID is gone is stale (a killed
  service) and ignored;
* :class:`LiveService` — calls a tool over REST (with ``SVC_KNOWLEDGE_API_TOKEN`` when the
  service needs one) and turns an error answer back into the core's error of the same kind;
* :class:`RemoteWorkbench` — the facade's tool methods, each forwarded to the live service
  (what ``workbench mcp`` serves beside a running service);
* :func:`snapshot` — for notebooks: a DuckDB connection over a fresh, consistent snapshot that
  the running service writes (or over the file itself when no service runs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import duckdb
import httpx

from workbench import errors
from workbench.config import Settings
from workbench.store import TABLES as STORE_TABLES

RECORD_SUFFIX = ".service.json"
_ERRORS = {
    "invalid_input": errors.InvalidInput,
    "not_found": errors.NotFound,
    "conflict": errors.Conflict,
    "llm_not_configured": errors.LLMNotConfigured,
}


def record_path(db_path: str | Path) -> Path:
    path = Path(db_path).expanduser().resolve()
    return path.with_name(path.name + RECORD_SUFFIX)


def write_record(db_path: str, url: str, token_required: bool) -> Path | None:
    """Say where the service that holds ``db_path`` answers (nothing for ``:memory:``)."""
    if db_path == ":memory:":
        return None
    path = record_path(db_path)
    body = {
        "url": url,
        "pid": os.getpid(),
        "token_required": token_required,
        "database": str(Path(db_path).expanduser().resolve()),
    }
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(body, indent=2) + "\n")
    temporary.replace(path)
    return path


def remove_record(db_path: str) -> None:
    if db_path != ":memory:":
        record = record_path(db_path)
        try:
            if json.loads(record.read_text()).get("pid") == os.getpid():
                record.unlink()
        except (OSError, ValueError):
            pass


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


class LiveService:
    """The tools of the service that holds a database, over REST."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 600.0):
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self._client.post(f"/tools/{tool}", json=arguments or {})
        except httpx.TransportError as exc:
            raise errors.StoreError(
                f"the service holding the database at {self.url} does not answer ({exc}); "
                "is it stopping?"
            ) from None
        body = _json(response)
        if response.status_code == 200:
            return body
        error = body.get("error") if isinstance(body, dict) else None
        kind = error.get("type") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else response.text[:300]
        if response.status_code == 401:
            message = (
                f"the service at {self.url} needs its token: set "
                f"SVC_KNOWLEDGE_API_TOKEN ({message})"
            )
        raise _ERRORS.get(kind, errors.WorkbenchError)(
            f"{message} (from the service at {self.url})"
        )

    def close(self) -> None:
        self._client.close()


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {}


def find_live(settings: Settings) -> LiveService | None:
    """The live service holding the settings' database, or None (no record, a stale one, or
    an in-memory database)."""
    db = settings.db_location()
    if db == ":memory:" or settings.database_url is not None:
        return None  # a shared store is not held by one service: commands use it directly
    try:
        record = json.loads(record_path(db).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not _alive(record.get("pid")) or not record.get("url"):
        return None
    token = settings.api_token.get_secret_value() if settings.api_token else None
    if record.get("token_required") and not token:
        raise errors.ConfigError(
            f"the service holding {db} (at {record['url']}) needs a token: set "
            "SVC_KNOWLEDGE_API_TOKEN to reach it"
        )
    return LiveService(record["url"], token)


class RemoteWorkbench:
    """The facade's tool methods, forwarded to a live service (see ``service.tools``)."""

    def __init__(self, live: LiveService):
        from service.tools import TOOLS

        self.live = live
        self._tools = {tool.method: tool.name for tool in TOOLS}

    def __getattr__(self, method: str):
        tools = self.__dict__.get("_tools", {})
        if method not in tools:
            raise AttributeError(method)
        name = tools[method]
        return lambda **arguments: self.live.call(name, arguments)


class UnavailableWorkbench:
    """Every tool answers with why the database could not be opened (for ``workbench mcp``:
    the client gets the reason as a tool error instead of a closed connection)."""

    def __init__(self, reason: str):
        self.reason = reason

    def __getattr__(self, method: str):
        if method.startswith("__"):
            raise AttributeError(method)

        def unavailable(**_: Any) -> dict[str, Any]:
            raise errors.StoreError(self.reason)

        return unavailable


def snapshot(settings: Settings) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with every table of the database, for analysis.

    With a live service, the service writes a consistent Parquet snapshot (into a private
    temporary folder of its own) and the connection has a view per table over it; without
    one, the connection is the database file itself, read-only. On a shared PostgreSQL store
    the views read its live tables through DuckDB's postgres extension (read-only)."""
    if settings.database_url is not None:
        # the live tables of the shared store, read through DuckDB's postgres extension
        from workbench.store.postgres import attach_postgres

        con = duckdb.connect()
        try:
            attach_postgres(con, settings.db_location(), "live")
            for table in STORE_TABLES:
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM live.{table}")
        except Exception:
            con.close()
            raise
        return con
    live = find_live(settings)
    if live is None:
        if not Path(settings.db_location()).is_file():
            raise errors.StoreError(
                f"no database at {settings.db_location()} and no service holding one "
                "(set SVC_KNOWLEDGE_DB_PATH)"
            )
        return duckdb.connect(settings.db_location(), read_only=True)
    try:
        written = live.call("export_snapshot")
    finally:
        live.close()
    con = duckdb.connect()
    for table, path in written["tables"].items():
        if not table.isidentifier():
            raise errors.StoreError(f"the service named an unexpected table {table!r}")
        literal = str(path).replace("'", "''")
        con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{literal}')")
    return con
