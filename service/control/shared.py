"""Many stdio clients, one memory: the background service ``workbench mcp`` shares.

DuckDB admits one process on a file, and an MCP client (a desktop assistant, an editor) spawns
its own ``workbench mcp``. So ``workbench mcp`` never opens a database file itself: it serves
the tools of the service that holds the file (:func:`service.client.live.find_live`), starting one
when nobody does, and forwards every call to it. Any number of stdio clients thereby share one
memory, whether a person runs ``workbench serve`` or not.

* :class:`ClientLease` — a ``workbench mcp`` process registers itself (a file named by its PID
  in ``<db>.clients/``) for as long as it runs; a PID that is gone (a killed client) no longer
  counts;
* :func:`join_or_start` — the live service of the database, or a new background
  ``workbench serve --idle-exit SECONDS`` on free loopback ports (its log in
  ``<db>.service.log``); a lock file makes concurrent clients start one service, not two;
* :class:`IdleWatch` — in a service started with ``--idle-exit``: once no client has been
  registered for that long, the service stops (gracefully, like on SIGTERM);
* :class:`SharedService` — the calls of one client; when its service has gone (stopped after
  all clients had left, or killed) it joins or starts the next one and calls again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from service.client.live import LiveService, find_live
from workbench import errors
from workbench.config import Settings
from workbench.store.snapshots import pid_alive

log = logging.getLogger("service.shared")

CLIENTS_SUFFIX = ".clients"
LOG_SUFFIX = ".service.log"
START_TIMEOUT = 180.0  # a first start loads the local embedding model
POLL_SECONDS = 0.2


def _beside(db: str | Path, suffix: str) -> Path:
    path = Path(db).expanduser().resolve()
    return path.with_name(path.name + suffix)


def shares(settings: Settings) -> bool:
    """Whether the database is a file one service holds (not ``:memory:``, not a server)."""
    return settings.database_url is None and settings.db_location() != ":memory:"


class ClientLease:
    """This process counts as a client of the database's shared service while it is held."""

    def __init__(self, db: str | Path, pid: int | None = None):
        self.folder = _beside(db, CLIENTS_SUFFIX)
        self.path = self.folder / str(pid or os.getpid())

    def __enter__(self) -> ClientLease:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self.path.write_text("")
        except OSError as exc:  # the calls still work; the service may stop meanwhile
            log.warning("cannot register as a client in %s: %s", self.folder, exc.strerror)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass  # never registered (see __enter__)


def live_clients(db: str | Path) -> int:
    """The clients registered for ``db`` whose process is alive (the others are removed)."""
    folder = _beside(db, CLIENTS_SUFFIX)
    count = 0
    for entry in folder.glob("*") if folder.is_dir() else ():
        if entry.name.isdigit() and pid_alive(int(entry.name)):
            count += 1
        else:
            entry.unlink(missing_ok=True)
    return count
    return True


class IdleWatch:
    """Call ``on_idle`` once no client has been registered for ``grace`` seconds."""

    def __init__(
        self,
        db: str | Path,
        grace: float,
        on_idle: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        interval: float = 1.0,
    ):
        self.db, self.grace, self.on_idle = db, grace, on_idle
        self.clock, self.interval = clock, interval
        self._stop = threading.Event()
        self._idle_since: float | None = None

    def check(self) -> bool:
        """One look: True once the service has been without clients for ``grace``."""
        if live_clients(self.db):
            self._idle_since = None
            return False
        now = self.clock()
        self._idle_since = self._idle_since if self._idle_since is not None else now
        return now - self._idle_since >= self.grace

    def start(self) -> IdleWatch:
        threading.Thread(target=self._run, name="idle-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.check():
                log.info("no workbench mcp client for %.0f s: stopping", self.grace)
                self.on_idle()
                return


@contextmanager
def _start_lock(db: str):
    """One client at a time looks for the service and starts it (across processes)."""
    path = _beside(db, ".start.lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def join_or_start(settings: Settings, timeout: float = START_TIMEOUT) -> LiveService:
    """The service holding the settings' database; started in the background when none is."""
    db = settings.db_location()
    try:
        with _start_lock(db):
            live = find_live(settings)
            if live is not None:
                return live
            process = start_background(settings)
            return _wait_for_record(settings, process, timeout)
    except OSError as exc:
        raise errors.StoreError(
            f"cannot start the shared service of {db}: {exc.strerror or exc} "
            f"({exc.filename or 'its folder'})"
        ) from None


def background_command(settings: Settings) -> list[str]:
    db = str(Path(settings.db_location()).expanduser().resolve())
    return [
        sys.executable,
        "-m",
        "service.control.cli",
        "serve",
        "--db",
        db,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--metrics-port",
        "0",
        "--log-format",
        "text",
        "--idle-exit",
        str(settings.mcp_idle_seconds),
    ]


def start_background(settings: Settings) -> subprocess.Popen:
    """``workbench serve`` for the database, detached from this process (its own session: a
    client that closes does not take the service down with it)."""
    log_path = _beside(settings.db_location(), LOG_SUFFIX)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as sink:
        process = subprocess.Popen(
            background_command(settings),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    log.info(
        "started the shared service of %s (PID %d, log %s)",
        settings.db_location(),
        process.pid,
        log_path,
    )
    return process


def _wait_for_record(settings: Settings, process: subprocess.Popen, timeout: float) -> LiveService:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = find_live(settings)
        if live is not None:
            return live
        if process.poll() is not None:
            raise errors.StoreError(
                f"the shared service of {settings.db_location()} could not start (exit "
                f"{process.returncode}): {_last_error(settings)}"
            )
        time.sleep(POLL_SECONDS)
    raise errors.StoreError(
        f"the shared service of {settings.db_location()} did not start within {timeout:.0f} s "
        f"(see {_beside(settings.db_location(), LOG_SUFFIX)})"
    )


def _last_error(settings: Settings) -> str:
    """The service log's last ``error:`` line (what the command printed), else its path."""
    path = _beside(settings.db_location(), LOG_SUFFIX)
    try:
        lines = path.read_text(errors="replace").splitlines()[-50:]
    except OSError:
        lines = []
    found = [line for line in lines if line.startswith("error:")]
    return found[-1].removeprefix("error: ") if found else f"see {path}"


class SharedService:
    """What :class:`~service.client.live.RemoteWorkbench` calls: the live service of the database,
    joined again (or started again) when the one it used has gone."""

    def __init__(self, settings: Settings, live: LiveService | None = None):
        self.settings = settings
        self._live = live or join_or_start(settings)
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return self._live.url

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        live = self._live
        try:
            return live.call(tool, arguments)
        except errors.StoreError:
            if not self._rejoin(live):
                raise
        return self._live.call(tool, arguments)

    def _rejoin(self, failed: LiveService) -> bool:
        """After a failed call: a new service when the old one has gone (False: it has not)."""
        with self._lock:
            if self._live is not failed:  # another thread has joined the next one already
                return True
            current = find_live(self.settings)
            if current is not None and current.url == failed.url:
                current.close()
                return False
            if current is not None:
                current.close()
            log.info("the shared service at %s has gone: joining the next one", failed.url)
            self._live = join_or_start(self.settings)
            failed.close()
            return True

    def close(self) -> None:
        self._live.close()
