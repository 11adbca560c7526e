"""Synthesized audio kept on disk, so that a repeated notification plays at once.

One file per entry, named by the SHA-256 of its key: the text after pronunciation rules, the
voice, the speed, the language and the engine's model version (:func:`cache_key`). A file is
a fixed header (magic, format version, sample rate, sample count, SHA-256 of the samples) and
then the float32 samples. Writers write a temporary file in the same folder and rename it into
place (atomic on POSIX), so a reader sees a whole entry or none, and two servers writing the same
entry at once leave one whole copy. A file whose header, length or checksum does not match is
deleted and reported as a miss: it is synthesized again, never played. The folder is bounded:
after each write the least recently used entries (by modification time, which a hit refreshes)
are deleted until the total fits.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import struct
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

log = logging.getLogger(__name__)

MAGIC = b"KWVOICE\x00"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<8sHIQ32s")  # magic, version, sample rate, samples, sha256
SUFFIX = ".audio"
STALE_TEMPORARY_SECONDS = 3600.0  # a writer takes milliseconds: older temporary files are debris
Lookup = Literal["hit", "miss", "corrupt"]


def default_cache_dir(environ: Mapping[str, str] | None = None, home: Path | None = None) -> Path:
    """``$XDG_CACHE_HOME/knowledge-workbench/voice-audio`` (``~/.cache`` when unset)."""
    env = os.environ if environ is None else environ
    base = Path(env["XDG_CACHE_HOME"]) if env.get("XDG_CACHE_HOME") else None
    return (base or (home or Path.home()) / ".cache") / "knowledge-workbench" / "voice-audio"


def cache_key(text: str, voice: str, speed: float, language: str, model_version: str) -> str:
    """The entry name of one synthesized text (hex SHA-256 of every input that changes it)."""
    fields = [FORMAT_VERSION, text, voice, round(float(speed), 4), language, model_version]
    return hashlib.sha256(json.dumps(fields, ensure_ascii=False).encode()).hexdigest()


def encode(samples: np.ndarray, sample_rate: int) -> bytes:
    payload = np.ascontiguousarray(samples, dtype="<f4").tobytes()
    digest = hashlib.sha256(payload).digest()
    return _HEADER.pack(MAGIC, FORMAT_VERSION, sample_rate, len(payload) // 4, digest) + payload


def decode(data: bytes) -> tuple[np.ndarray, int] | None:
    """(samples, sample rate), or None when ``data`` is not a whole, intact entry."""
    if len(data) < _HEADER.size:
        return None
    magic, version, rate, count, digest = _HEADER.unpack_from(data)
    payload = memoryview(data)[_HEADER.size :]
    if magic != MAGIC or version != FORMAT_VERSION or len(payload) != count * 4 or rate <= 0:
        return None
    if hashlib.sha256(payload).digest() != digest:
        return None
    return np.frombuffer(payload, dtype="<f4").astype(np.float32), rate


@dataclass(frozen=True)
class CacheStats:
    entries: int
    bytes: int
    max_bytes: int


class AudioCache:
    """The on-disk cache of one server (several may share the folder)."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory, self.max_bytes = directory, max_bytes
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def path(self, key: str) -> Path:
        return self.directory / f"{key}{SUFFIX}"

    def get(self, key: str) -> tuple[tuple[np.ndarray, int] | None, Lookup]:
        """The entry and how the lookup went: hit, miss, or corrupt (the file is deleted)."""
        if not self.enabled:
            return None, "miss"
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None, "miss"
        entry = decode(data)
        if entry is None:
            log.warning("voice cache entry %s is corrupt; deleted, it will be synthesized again",
                        path.name)  # fmt: skip
            with contextlib.suppress(OSError):
                path.unlink()
            return None, "corrupt"
        with contextlib.suppress(OSError):
            os.utime(path)  # most recently used
        return entry, "hit"

    def put(self, key: str, samples: np.ndarray, sample_rate: int) -> bool:
        """Store an entry (atomically) and trim the folder to ``max_bytes``; False when the
        entry cannot be written or is larger than the whole cache."""
        data = encode(samples, sample_rate)
        if not self.enabled or len(data) > self.max_bytes:
            return False
        temporary = self.directory / f".{key}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)  # the user's only
            with temporary.open("wb") as fh:
                fh.write(data)
            os.replace(temporary, self.path(key))
        except OSError as exc:
            log.warning("voice cache: cannot write %s (%s)", self.path(key), exc)
            with contextlib.suppress(OSError):
                temporary.unlink()
            return False
        self.trim()
        return True

    def trim(self) -> int:
        """Delete least recently used entries until the folder fits (and temporary files a
        crashed writer left over an hour ago); how many entries were deleted."""
        with self._lock:
            self._forget_abandoned()
            entries = self._entries()
            total = sum(size for _, size, _ in entries)
            deleted = 0
            for path, size, _ in sorted(entries, key=lambda e: e[2]):
                if total <= self.max_bytes:
                    break
                with contextlib.suppress(OSError):
                    path.unlink()
                    total -= size
                    deleted += 1
            return deleted

    def stats(self) -> CacheStats:
        entries = self._entries()
        return CacheStats(len(entries), sum(size for _, size, _ in entries), self.max_bytes)

    def _forget_abandoned(self, age: float = STALE_TEMPORARY_SECONDS) -> None:
        now = time.time()
        with contextlib.suppress(OSError):
            for path in self.directory.glob(".*.tmp"):
                with contextlib.suppress(OSError):
                    if now - path.stat().st_mtime > age:
                        path.unlink()

    def _entries(self) -> list[tuple[Path, int, float]]:
        """(path, size, last use) of every entry; files vanishing meanwhile are skipped."""
        found = []
        with contextlib.suppress(OSError):
            for path in self.directory.glob(f"*{SUFFIX}"):
                with contextlib.suppress(OSError):
                    stat = path.stat()
                    found.append((path, stat.st_size, stat.st_mtime))
        return found
