"""Many stdio clients, one memory: the background service ``workbench mcp`` shares.

DuckDB admits one process on a file, and an MCP client (a desktop assistant, an editor) spawns
its own ``workbench mcp``. So ``workbench mcp`` never opens a database file itself: it serves
the tools of the service that holds the file (:func:`service.client.live.find_live`), starting one
when nobody does, and forwards every call to it. Any number of stdio clients thereby share one
memory, whether a person runs ``workbench serve`` or not.

* :class:`ClientLease` — a ``workbench mcp`` process registers itself (a file named by its PID
  in ``<db>.clients/``, holding its start time) for as long as it runs; a PID that is gone (a
  killed client) or taken by another process no longer counts;
* :func:`join_or_start` — the live service of the database, or a new background
  ``workbench serve --idle-exit SECONDS`` on free loopback ports (its log in
  ``<db>.service.log``; its environment the client's without the client's API token, which
  never becomes the service's admin secret); a lock file makes concurrent clients start one
  service, not two; a thread of the starting client reaps it when it ends;
* :class:`IdleWatch` — in a service started with ``--idle-exit``: once no client has been
  registered for that long, the service stops (gracefully, like on SIGTERM);
* :class:`SharedService` — the calls of one client; when its service has gone (stopped after
  all clients had left, or killed) it joins or starts the next one and calls again.

The folder, the log and the lock are opened never through a symbolic link and only when they
belong to this user (:mod:`service.control.companions`); the idle watch removes only leases.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from service.client.live import (
    LiveService,
    ServiceRecord,
    Unreachable,
    find_live,
    process_started,
)
from service.control.companions import check, open_private, private_folder, read_private
from workbench import errors
from workbench.config import Settings
from workbench.store.snapshots import pid_alive

log = logging.getLogger("service.shared")

CLIENTS_SUFFIX = ".clients"
LOG_SUFFIX = ".service.log"
LOCK_SUFFIX = ".start.lock"
MAX_LEASE_BYTES = 64
REJOIN_SECONDS = 15.0  # how long a service whose address refuses may take to be gone
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
START_TIMEOUT = 180.0  # a first start loads the local embedding model
POLL_SECONDS = 0.2


def _beside(db: str | Path, suffix: str) -> Path:
    path = Path(db).expanduser().resolve()
    return path.with_name(path.name + suffix)


def shares(settings: Settings) -> bool:
    """Whether the database is a file one service holds (not ``:memory:``, not a server)."""
    return settings.database_url is None and settings.db_location() != ":memory:"


class ClientLease:
    """This process counts as a client of the database's shared service while it is held: a
    file named by its PID in ``<db>.clients/`` holding the process's start time (a PID reused
    by another process later does not count)."""

    def __init__(self, db: str | Path, pid: int | None = None):
        self.folder = _beside(db, CLIENTS_SUFFIX)
        self.pid = pid or os.getpid()
        self.path = self.folder / str(self.pid)
        self._held = False

    def __enter__(self) -> ClientLease:
        try:
            private_folder(self.folder)
            with os.fdopen(open_private(self.path, os.O_WRONLY | os.O_TRUNC), "w") as sink:
                sink.write(process_started(self.pid) or "")
            self._held = True
        except OSError as exc:  # the calls still work; the service may stop meanwhile
            log.warning("cannot register as a client in %s: %s", self.folder, exc.strerror or exc)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._held:
            _sweep(self.folder, lambda name: name == self.path.name)


def live_clients(db: str | Path) -> int:
    """The clients registered for ``db`` whose process runs (the leases of gone ones are
    removed; nothing else in the folder is touched)."""
    alive: list[str] = []
    _sweep(_beside(db, CLIENTS_SUFFIX), lambda name: False, alive)
    return len(alive)


def _sweep(folder: Path, remove: Callable[[str], bool], alive: list[str] | None = None) -> None:
    """Remove the leases in ``folder`` that ``remove`` names or whose process is gone; list the
    live ones in ``alive``. Only leases are touched (regular files of this user named by a
    PID, holding a start time): a planted link, folder or file is left alone, and a folder
    that is a link is not entered."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("ignoring the clients folder %s: %s (a symbolic link?)", folder, exc.strerror)
        return
    try:
        check(folder, os.fstat(fd), stat.S_ISDIR, "a folder")
        with os.scandir(fd) as entries:
            for entry in entries:
                state = _lease_state(entry, fd)
                if state is None:
                    continue
                if state and not remove(entry.name):
                    if alive is not None:
                        alive.append(entry.name)
                    continue
                with contextlib.suppress(OSError):
                    os.unlink(entry.name, dir_fd=fd)
    except OSError as exc:
        log.warning("ignoring the clients folder %s: %s", folder, exc.strerror or exc)
    finally:
        os.close(fd)


def _lease_state(entry: os.DirEntry[str], folder_fd: int) -> bool | None:
    """True: a lease of a running client; False: of a gone one; None: not a lease."""
    if not entry.name.isdigit() or not entry.is_file(follow_symlinks=False):
        return None
    try:
        if entry.stat(follow_symlinks=False).st_uid != os.getuid():
            return None
        fd = os.open(entry.name, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
        with os.fdopen(fd, "rb") as source:
            text = source.read(MAX_LEASE_BYTES + 1)
    except OSError:
        return None
    if not text:  # the client could not tell its start time
        return pid_alive(int(entry.name))
    started = text.decode("ascii", errors="replace").strip()
    if len(text) > MAX_LEASE_BYTES or not started.replace(" ", "").replace(":", "").isalnum():
        return None  # not what a client writes: not ours to remove
    return process_started(int(entry.name)) == started


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
            try:
                idle = self.check()
            except Exception as exc:  # noqa: BLE001 - a look that fails never ends the watch
                log.warning("the idle watch could not count the clients: %s", exc)
                continue
            if idle:
                log.info("no workbench mcp client for %.0f s: stopping", self.grace)
                self.on_idle()
                return


@contextmanager
def _start_lock(db: str) -> Iterator[None]:
    """One client at a time looks for the service and starts it (across processes)."""
    with os.fdopen(open_private(_beside(db, LOCK_SUFFIX), os.O_RDWR), "rb") as handle:
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


def background_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of the background service: this client's (its LLM and embedder
    settings), without its API token. A client's token is its own credential, resolved to its
    own scope by the service; it never becomes the service's admin secret (the first client
    could be one given a read-only token). The empty value also hides a ``.env``'s token."""
    return {**(os.environ if environ is None else environ), "SVC_KNOWLEDGE_API_TOKEN": ""}


def start_background(settings: Settings) -> subprocess.Popen[bytes]:
    """``workbench serve`` for the database, detached from this process (its own session: a
    client that closes does not take the service down with it). A thread waits for it, so a
    service that ends (stopped when idle, or killed) never stays a zombie of this client."""
    log_path = _beside(settings.db_location(), LOG_SUFFIX)
    with os.fdopen(open_private(log_path, os.O_WRONLY | os.O_APPEND), "ab") as sink:
        process = subprocess.Popen(
            background_command(settings),
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=background_environ(),
        )
    threading.Thread(target=process.wait, name="reap-service", daemon=True).start()
    log.info(
        "started the shared service of %s (PID %d, log %s)",
        settings.db_location(),
        process.pid,
        log_path,
    )
    return process


def _wait_for_record(
    settings: Settings, process: subprocess.Popen[bytes], timeout: float
) -> LiveService:
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
        lines = read_private(path, 64 * 1024).splitlines()[-50:]
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

    @property
    def record(self) -> ServiceRecord | None:
        return self._live.record

    def call(self, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        live = self._live
        try:
            return live.call(tool, arguments)
        except Unreachable:
            if not self._rejoin(live):
                raise
        return self._live.call(tool, arguments)

    def _rejoin(self, failed: LiveService, wait: float = REJOIN_SECONDS) -> bool:
        """After a call its service did not answer: the next service once the old one has
        gone (its record stale: the process ended, or is a zombie), waiting up to ``wait``
        seconds for a service that refuses to finish stopping (False: it did not)."""
        with self._lock:
            if self._live is not failed:  # another thread has joined the next one already
                return True
            deadline = time.monotonic() + wait
            while (current := find_live(self.settings)) is not None:
                current.close()
                if current.url != failed.url or time.monotonic() >= deadline:
                    break
                time.sleep(POLL_SECONDS)
            if current is not None and current.url == failed.url:
                return False
            log.info("the shared service at %s has gone: joining the next one", failed.url)
            self._live = join_or_start(self.settings)
            failed.close()
            return True

    def close(self) -> None:
        self._live.close()
