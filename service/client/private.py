"""Private files of this user beside a database (the service record, the owner's token):
written 0600 never through a symbolic link, read only when they are a regular file of this
user that no one else may read or write."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

from workbench import errors

MAX_RECORD_BYTES = 64 * 1024
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
log = logging.getLogger("service.live")


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, mode 0600, never following a symlink."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()  # a leftover, or a planted link: unlink removes the link itself
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as sink:
            os.fchmod(fd, 0o600)
            sink.write(text)
        os.replace(temporary, path)
    except OSError as exc:
        raise errors.StoreError(f"cannot write {path}: {exc.strerror or exc}") from None


def _read_private(
    path: Path, quiet: bool = False, what: str = "the service record"
) -> dict[str, Any] | None:
    """The JSON object in ``path`` if it is a regular file of this user that no one else may
    write (or read), else None (said in a warning naming ``what`` unless ``quiet`` or simply
    missing)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        _untrusted(path, f"cannot be opened ({exc.strerror}; a symbolic link?)", quiet, what)
        return None
    with os.fdopen(fd, "rb") as source:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            _untrusted(path, "is not a regular file", quiet, what)
            return None
        if info.st_uid != os.getuid():
            _untrusted(path, f"belongs to another user (uid {info.st_uid})", quiet, what)
            return None
        if info.st_mode & 0o077:
            _untrusted(path, f"is open to others (mode {info.st_mode & 0o777:o})", quiet, what)
            return None
        try:
            body = json.loads(source.read(MAX_RECORD_BYTES))
        except (OSError, ValueError):
            return None
    return body if isinstance(body, dict) else None


def _untrusted(path: Path, why: str, quiet: bool, what: str = "the service record") -> None:
    if not quiet:
        log.warning("ignoring %s %s: it %s", what, path, why)
    return None
