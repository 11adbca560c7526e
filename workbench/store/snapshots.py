"""Parquet snapshots written for clients on this host (``export_snapshot``), capped.

A client of a running service (``workbench export``, a notebook's ``lab.live_tables()``) asks
for a consistent copy of every table; the service writes it here and answers with the paths.
Copies hold everything the database holds, so they are kept private and few:

* one private folder per user, ``<tmp>/workbench-snapshots-<uid>/`` (0700; if that name is a
  link, another user's or open to others, a new private ``mkdtemp`` folder is used instead),
  and in it one folder per workbench, ``<pid>-XXXX/``;
* each request gets a new folder ``<pid>-XXXX/snapshot-XXXX/`` with its files 0600;
* at most :data:`KEEP` snapshots exist per workbench: older ones are removed before a new one is
  written (the previous one stays, so a notebook still reading it is not cut off);
* :meth:`Snapshots.discard` removes them all (after a delete: a copy must not outlive the
  data); :meth:`Snapshots.close` also removes the workbench's folder (at stop), and
  :func:`remove_stale` the folders of processes that are gone (at start).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from workbench.errors import StoreError
from workbench.results import SnapshotResult

KEEP = 2
PREFIX = "workbench-snapshots-"
log = logging.getLogger("workbench.store.snapshots")


def snapshots_root(base: str | Path | None = None) -> Path:
    """This user's snapshot folder (not created)."""
    return Path(base or tempfile.gettempdir()) / f"{PREFIX}{os.getuid()}"


def private_folder(path: Path) -> Path:
    """``path`` as a folder only this user can enter: created 0700, or checked to be one."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise StoreError(
            f"{path} is not a private folder of this user (a link, another user's, or open to "
            "others): snapshots are not written there; remove it"
        )
    return path


def pid_alive(pid: int) -> bool:
    """Whether a process with this PID exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pid_of(folder: Path) -> int | None:
    head = folder.name.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def remove_stale(root: Path | None = None) -> int:
    """Remove the snapshot folders of processes that are gone; returns how many."""
    root = root or snapshots_root()
    if not root.exists():
        return 0
    try:
        children = list(private_folder(root).iterdir())
    except (OSError, StoreError):
        return 0
    removed = 0
    for child in children:
        pid = _pid_of(child)
        if pid is not None and not pid_alive(pid):
            shutil.rmtree(child, ignore_errors=True)
            removed += 1
    return removed


class Snapshots:
    """The snapshots of one workbench (thread-safe), in a folder ``<pid>-XXXX`` of its own."""

    def __init__(self, root: Path | None = None, keep: int = KEEP):
        self.root = root or snapshots_root()
        self.keep = keep
        self._folder: Path | None = None
        self._kept: list[Path] = []
        self._lock = threading.Lock()

    def folder(self) -> Path:
        """This workbench's snapshot folder (created, private, on first use)."""
        with self._lock:
            return self._ensure_folder()

    def _ensure_folder(self) -> Path:
        if self._folder is None or not self._folder.is_dir():
            try:
                private_folder(self.root)
                self._folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=self.root))
            except StoreError as exc:
                # someone else made the shared name first: a folder of our own elsewhere (not
                # found by remove_stale after a crash, still private and removed at stop)
                log.warning("%s; writing snapshots into a new private folder instead", exc)
                self._folder = Path(tempfile.mkdtemp(prefix=PREFIX))
        return private_folder(self._folder)

    def write(self, export: Callable[[Path], dict[str, str]]) -> SnapshotResult:
        """``export(folder)`` into a new private folder; older snapshots past the cap go
        first. Returns ``{"directory", "tables"}``."""
        with self._lock:
            folder = self._ensure_folder()
            self._prune(self.keep - 1)
            path = Path(tempfile.mkdtemp(prefix="snapshot-", dir=folder))
            try:
                tables = export(path)
                for file in tables.values():
                    os.chmod(file, 0o600)
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)
                raise
            self._kept.append(path)
            return {"directory": str(path), "tables": tables}

    def _prune(self, keep: int) -> None:
        while len(self._kept) > max(keep, 0):
            shutil.rmtree(self._kept.pop(0), ignore_errors=True)

    def discard(self) -> None:
        """Remove every snapshot of this workbench (the data they copy was just deleted)."""
        with self._lock:
            self._prune(0)

    def close(self) -> None:
        """Remove the snapshots and this workbench's folder."""
        with self._lock:
            self._kept = []
            if self._folder is not None:
                shutil.rmtree(self._folder, ignore_errors=True)
                self._folder = None
