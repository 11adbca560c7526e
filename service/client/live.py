"""The running service owns its database: where it is, and how other clients reach it.

DuckDB admits one process on a file. While ``workbench serve`` holds the database, the CLI,
``workbench mcp`` and notebooks go through its tools instead of opening the file:

* :func:`write_record` — at start the service writes a small runtime record beside the
  database (``<db>.service.json``: the tools' address, its PID and start time, whether a token
  is needed, its snapshot folder, never the token itself), 0600 and never through a symlink,
  and removes it on a clean stop;
* :func:`read_record` / :func:`find_live` — a client trusts the record only if it is a private
  regular file of this user, names this database, was written by a process of this user that
  still runs (PID and start time) and points to loopback (or the configured host): a record
  planted beside a database (a cloned folder) or left by a killed service is ignored, and the
  API token goes to no one else;
* :class:`LiveService` — calls a tool over REST (with ``SVC_KNOWLEDGE_API_TOKEN`` when the
  service needs one) and turns an error answer back into the core's error of the same kind;
* :class:`RemoteWorkbench` — the facade's tool methods, each forwarded to the live service
  (what ``workbench mcp`` serves beside a running service);
* :func:`snapshot_files` — the files of a snapshot the service wrote for one request, checked
  to lie in its private snapshot folder (a client moves or reads nothing else);
* :func:`snapshot` — for notebooks: a DuckDB connection over a fresh, consistent snapshot that
  the running service writes (or over the file itself when no service runs);
* :func:`search` — for notebooks: a search tool's answer from the running service, or, when
  none holds the database, from the file itself opened read-only in this process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import duckdb
import httpx

from service.client.private import _read_private, _untrusted, write_private
from service.client.relayed import from_response
from serving.addresses import is_loopback
from workbench import errors
from workbench.config import Settings
from workbench.embedding.base import Embedder
from workbench.store import TABLES as STORE_TABLES
from workbench.store import views

RECORD_SUFFIX = ".service.json"
log = logging.getLogger("service.live")


class Unreachable(errors.StoreError):
    """The service a record names does not answer at its address (stopping, or killed)."""


@dataclass(frozen=True)
class ServiceRecord:
    """What a running service says about itself in ``<db>.service.json``."""

    url: str
    pid: int
    token_required: bool
    snapshots: str | None  # the folder its snapshots are written into, one per request
    models: dict[str, Any] | None = None  # its LLM and embedder settings (no secret)


def record_path(db_path: str | Path) -> Path:
    path = Path(db_path).expanduser().resolve()
    return path.with_name(path.name + RECORD_SUFFIX)


def write_record(
    db_path: str,
    url: str,
    token_required: bool,
    snapshots: str | Path | None = None,
    models: dict[str, Any] | None = None,
) -> Path | None:
    """Say where the service that holds ``db_path`` answers (nothing for ``:memory:``).

    The record is written 0600 through a temporary file created with ``O_EXCL|O_NOFOLLOW``
    (a symlink planted at either name is replaced, never written through); it carries this
    process's start time so a reader can tell it from another process given the same PID."""
    if db_path == ":memory:":
        return None
    path = record_path(db_path)
    body = {
        "url": url,
        "pid": os.getpid(),
        "started": process_started(os.getpid()),
        "token_required": token_required,
        "database": str(Path(db_path).expanduser().resolve()),
        "snapshots": str(snapshots) if snapshots else None,
        "models": models,  # the LLM and embedder it runs (no secret): joining clients compare
    }
    write_private(path, json.dumps(body, indent=2) + "\n")
    return path


def remove_record(db_path: str) -> None:
    if db_path != ":memory:":
        record = record_path(db_path)
        body = _read_private(record, quiet=True)
        if body is not None and body.get("pid") == os.getpid():
            with contextlib.suppress(OSError):
                record.unlink()


def process_started(pid: int) -> str | None:
    """When the process ``pid`` of this user started (an opaque token), or None when there
    is no such process of this user. Linux: ``/proc/<pid>/stat``; elsewhere ``ps``."""
    proc = Path(f"/proc/{pid}")
    if Path("/proc/self/stat").exists():
        try:
            if proc.stat().st_uid != os.getuid():
                return None
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None
        if not fields or fields[0] in ("Z", "X"):  # a zombie (killed, not yet reaped) is gone
            return None
        return fields[19] if len(fields) > 19 else None  # field 22: start time in ticks
    try:
        out = subprocess.run(
            ["ps", "-o", "uid=,lstart=", "-p", str(pid)],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.split(None, 1)
    except (OSError, subprocess.SubprocessError):
        return None
    if len(out) != 2 or out[0] != str(os.getuid()):
        return None
    return out[1].strip()


def read_record(settings: Settings) -> ServiceRecord | None:
    """The record of the live service holding the settings' database, if it can be trusted:
    a private regular file of this user (see :func:`_read_private`), naming this database,
    written by a process of this user that still runs (same PID *and* start time), whose URL
    is on loopback or on the host the settings configure. Anything else is None."""
    db = settings.db_location()
    if db == ":memory:" or settings.database_url is not None:
        return None  # a shared store is not held by one service: commands use it directly
    path = record_path(db)
    body = _read_private(path)
    if body is None:
        return None
    pid, url, started = body.get("pid"), body.get("url"), body.get("started")
    if not isinstance(pid, int) or pid <= 0 or not isinstance(url, str):
        _untrusted(path, "is malformed", False)
        return None
    if body.get("database") != str(Path(db).expanduser().resolve()):
        _untrusted(path, f"names another database ({body.get('database')!r})", False)
        return None
    if not started or process_started(pid) != started:
        log.debug("the service record %s is stale: process %s is gone", path, pid)
        return None  # a killed service's (or a copied) record
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not (
        is_loopback(host) or host == settings.host.strip("[]")
    ):
        _untrusted(path, f"points to {url!r}, neither loopback nor the configured host", False)
        return None
    snapshots, models = body.get("snapshots"), body.get("models")
    return ServiceRecord(
        url,
        pid,
        bool(body.get("token_required")),
        snapshots if isinstance(snapshots, str) else None,
        models if isinstance(models, dict) else None,
    )


def held_by(settings: Settings, message: str) -> str:
    """``message`` (the database is locked), naming the live service that holds it if any."""
    record = read_record(settings)
    if record is None:
        return message
    return (
        f"the database file {settings.db_location()} is held by the workbench service at "
        f"{record.url} (PID {record.pid}): stop it, or use it (the CLI, `workbench mcp` and "
        "notebooks go through its tools)"
    )


class ToolCaller(Protocol):
    """What calls a live service's tools: :class:`LiveService`, or
    ``service.control.shared.SharedService`` (which joins the service again when it goes)."""

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]: ...


class LiveService:
    """The tools of the service that holds a database, over REST."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        timeout: float = 600.0,
        snapshots: str | None = None,
        record: ServiceRecord | None = None,
    ):
        self.url = url.rstrip("/")
        self.snapshots = snapshots
        self.record = record  # what the service said of itself, when found by its record
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self._client.post(f"/tools/{tool}", json=arguments or {})
        except httpx.TransportError as exc:
            raise Unreachable(
                f"the service holding the database at {self.url} does not answer ({exc}); "
                "is it stopping?"
            ) from None
        body: dict[str, Any] = _json(response)
        if response.status_code == 200:
            return body
        raise from_response(response, body)  # the same kind, message and Retry-After

    def close(self) -> None:
        self._client.close()


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {}


def find_live(settings: Settings) -> LiveService | None:
    """The live service holding the settings' database, or None (no record, one that cannot
    be trusted or is stale, an in-memory or shared database). The API token goes only to a
    service whose record :func:`read_record` trusts."""
    from service.client.owner import client_token

    record = read_record(settings)
    if record is None:
        return None
    token = client_token(settings)
    if record.token_required and not token:
        raise errors.ConfigError(
            f"the service holding {settings.db_location()} (at {record.url}) needs a token: "
            "set SVC_KNOWLEDGE_API_TOKEN to reach it"
        )
    return LiveService(record.url, token, snapshots=record.snapshots, record=record)


def snapshot_files(live: LiveService, answer: dict[str, Any]) -> tuple[Path, dict[str, Path]]:
    """The folder and the table files of a snapshot the live service wrote for this request,
    once checked: a folder of this user directly inside the service's private snapshot folder
    (from its record), holding ``<table>.parquet`` regular files of known tables. A client
    moves or reads nothing else."""
    if not live.snapshots or not isinstance(answer, dict):
        raise errors.StoreError(f"the service at {live.url} names no snapshot folder")
    root = Path(live.snapshots)
    _check_owned(root, stat.S_ISDIR, private=True)
    folder = Path(str(answer.get("directory", "")))
    if folder.parent != root or folder.name in ("", ".", ".."):
        raise errors.StoreError(f"the service named a snapshot folder outside {root}: {folder}")
    _check_owned(folder, stat.S_ISDIR, private=False)
    tables = answer.get("tables")
    files = {}
    for table, path in tables.items() if isinstance(tables, dict) else ():
        if table not in STORE_TABLES or Path(str(path)) != folder / f"{table}.parquet":
            raise errors.StoreError(f"the service named an unexpected snapshot file {path!r}")
        files[table] = _check_owned(folder / f"{table}.parquet", stat.S_ISREG, private=False)
    return folder, files


def _check_owned(path: Path, kind: Callable[[int], bool], private: bool) -> Path:
    """``path`` itself (not a link) of the expected kind, this user's, closed to others if
    ``private``."""
    try:
        info = path.lstat()
    except OSError as exc:
        raise errors.StoreError(
            f"the snapshot path {path} cannot be read: {exc.strerror}"
        ) from None
    if not kind(info.st_mode) or info.st_uid != os.getuid() or (private and info.st_mode & 0o077):
        raise errors.StoreError(
            f"the snapshot path {path} is not a private file or folder of this user: refused"
        )
    return path


class RemoteWorkbench:
    """The facade's tool methods, forwarded to a live service (see ``service.api.tools``)."""

    def __init__(self, live: ToolCaller):
        from service.api.tools import TOOLS

        self.live = live
        self._tools = {tool.method: tool.name for tool in TOOLS}

    def __getattr__(self, method: str) -> Callable[..., dict[str, Any]]:
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

    def __getattr__(self, method: str) -> Callable[..., dict[str, Any]]:
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
        return views.over_postgres(settings.db_location())
    live = find_live(settings)
    if live is None:
        if not Path(settings.db_location()).is_file():
            raise errors.StoreError(
                f"no database at {settings.db_location()} and no service holding one "
                "(set SVC_KNOWLEDGE_DB_PATH)"
            )
        return views.over_file(settings.db_location())
    try:
        _, files = snapshot_files(live, live.call("export_snapshot"))
    finally:
        live.close()
    return views.over_parquet(files)


SEARCH_TOOLS = ("search_memory", "search_memory_facts", "search_memory_nodes")


def search(
    settings: Settings,
    tool: str,
    arguments: dict[str, Any],
    embedder: Embedder | None = None,
) -> dict[str, Any]:
    """The answer of the search tool ``tool`` (``search_memory``, ``search_memory_facts`` or
    ``search_memory_nodes``) to ``arguments``, on the settings' database.

    Through the running service that holds it when one does (what any MCP client gets, the
    search counted as an access); else in this process, on the database opened read-only for
    this one search and closed after it (so a service can start meanwhile): the same ranking
    over the same rows, with ``embedder`` (default: the one the settings configure), no LLM,
    and nothing written, so the search counts no access."""
    if tool not in SEARCH_TOOLS:
        raise errors.InvalidInput(
            f"{tool!r} is not a search tool; one of {', '.join(SEARCH_TOOLS)}"
        )
    live = find_live(settings)
    if live is not None:
        try:
            return live.call(tool, arguments)
        finally:
            live.close()
    if settings.database_url is None and not Path(settings.db_location()).is_file():
        raise errors.StoreError(
            f"no database at {settings.db_location()} and no service holding one "
            "(set SVC_KNOWLEDGE_DB_PATH)"
        )
    from workbench import Workbench

    workbench = Workbench.open(settings, embedder=embedder, chat=None, read_only=True)
    try:
        answer: dict[str, Any] = getattr(workbench, tool)(**arguments)
        return answer
    finally:
        workbench.close()
