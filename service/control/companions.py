"""The files and folders beside a database that the shared service and its clients make
(``<db>.clients/``, ``<db>.service.log``, ``<db>.start.lock``): opened and made never through a
symbolic link, and used only when they belong to this user.

A database folder may be shared or cloned, so what lies beside the database may have been
planted: a link named ``<db>.clients`` to another folder, a log that is a link to a file to
append to. Every name here is opened with ``O_NOFOLLOW`` (the link itself is refused, never
followed) and checked after opening (a regular file or a folder of this user); a refusal is an
:class:`OSError` whose message says why, so the callers' "cannot use" paths handle it.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a planted FIFO must not block the open
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class Untrusted(OSError):
    """A companion path that is a link, of another kind, or of another user."""

    def __init__(self, path: Path, why: str):
        super().__init__(errno.EPERM, f"{why}: refused", str(path))


def private_folder(path: Path) -> Path:
    """``path`` as a folder of this user, made 0700 when missing (its parents as the umask
    says); a link or anything else there is refused."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check(path, os.lstat(path), stat.S_ISDIR, "a folder")
    return path


def open_private(path: Path, flags: int) -> int:
    """A descriptor of the regular file ``path`` of this user (created 0600 when missing),
    opened with ``flags`` never through a link."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, flags | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC, 0o600)
    try:
        check(path, os.fstat(fd), stat.S_ISREG, "a regular file")
    except OSError:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return fd


def read_private(path: Path, limit: int) -> str:
    """The last ``limit`` bytes of the regular file ``path`` of this user ("" when missing)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | _CLOEXEC)
    except FileNotFoundError:
        return ""
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(fd)
        check(path, info, stat.S_ISREG, "a regular file")
        source.seek(max(0, info.st_size - limit))
        return source.read(limit).decode(errors="replace")


def check(path: Path, info: os.stat_result, kind: Callable[[int], bool], what: str) -> None:
    if not kind(info.st_mode):
        raise Untrusted(path, f"not {what} (a symbolic link or something planted?)")
    if info.st_uid != os.getuid():
        raise Untrusted(path, f"belongs to another user (uid {info.st_uid})")
