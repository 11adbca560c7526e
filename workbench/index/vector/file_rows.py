"""The rows of a saved float16 vectors file, served memory-mapped copy-on-write and read with
``pread`` (see :class:`FileRows`), and the opening of such a file."""

from __future__ import annotations

import mmap
import os
import weakref
from pathlib import Path

import numpy as np

from workbench.index.arrays import NPY_HEADERS

__all__ = ["BLOCK_ROWS", "FileRows", "open_rows"]

# rows of a saved vectors file read by one pread when a read wants most of a stretch of them
# (a graph build, a save, a large group): 3 MB at 384 dimensions
BLOCK_ROWS = 4096


class FileRows:
    """The rows of a saved float16 vectors file, memory-mapped copy-on-write (``mapped``),
    read with ``pread``: through the mapping, one row read would also map the cached pages
    around it (about 16), and the file would soon count whole in the process's resident
    memory. ``clean`` marks the rows still as saved: a row written since lives only in the
    mapping's private pages, and is read from there."""

    def __init__(self, mapped: np.memmap):
        self.mapped = mapped
        self.clean = np.ones(mapped.shape[0], dtype=bool)
        self._width = mapped.shape[1] * mapped.itemsize
        self._offset = int(mapped.offset)
        fd = os.open(str(mapped.filename), os.O_RDONLY)
        weakref.finalize(self, os.close, fd)
        self._fd = fd

    def rows(self, slots: np.ndarray) -> np.ndarray:
        """The rows at ``slots``, as stored (float16): a pread per row when they are
        scattered (a search's candidates), else a pread per block of rows."""
        out = np.empty((slots.size, self.mapped.shape[1]), dtype=self.mapped.dtype)
        clean = self.clean[slots]
        at = np.flatnonzero(clean)
        if at.size:
            wanted = slots[at]
            span = int(wanted.max()) - int(wanted.min()) + 1
            if at.size * 8 < span or at.size < 64:
                self._read_each(wanted, at, out)
            else:
                self._read_blocks(wanted, at, out)
        if at.size < slots.size:
            written = ~clean
            out[written] = self.mapped[slots[written]]
        return out

    def _read_each(self, slots: np.ndarray, at: np.ndarray, out: np.ndarray) -> None:
        buffer = memoryview(out.reshape(-1).view(np.uint8))  # type: ignore[arg-type]  # numpy arrays are buffers; its stubs miss it
        width, offset, fd = self._width, self._offset, self._fd
        for i, slot in zip(at.tolist(), slots.tolist()):
            os.preadv(fd, [buffer[i * width : (i + 1) * width]], offset + slot * width)

    def _read_blocks(self, slots: np.ndarray, at: np.ndarray, out: np.ndarray) -> None:
        order = np.argsort(slots, kind="stable")
        ordered = slots[order]
        i, dim = 0, self.mapped.shape[1]
        while i < ordered.size:
            start = int(ordered[i])
            end = int(np.searchsorted(ordered, start + BLOCK_ROWS))
            count = int(ordered[end - 1]) - start + 1
            data = os.pread(self._fd, count * self._width, self._offset + start * self._width)
            block = np.frombuffer(data, dtype=self.mapped.dtype).reshape(count, dim)
            out[at[order[i:end]]] = block[ordered[i:end] - start]
            i = end


def open_rows(path: Path, size: int, dim: int) -> np.ndarray | None:
    """The saved float16 vectors, memory-mapped copy-on-write; None when the file is missing
    or is not what the manifest says (too few rows, another width or type)."""
    try:
        with NPY_HEADERS:
            mapped: np.ndarray = np.load(path, mmap_mode="c", allow_pickle=False)
    except (OSError, ValueError):
        return None
    ok = mapped.dtype == np.float16 and mapped.ndim == 2 and mapped.shape[1] == dim
    if not ok or mapped.shape[0] < size:
        return None
    handle = getattr(mapped, "_mmap", None)
    if handle is not None and hasattr(mmap, "MADV_RANDOM"):
        # a search reads scattered rows: fault in just the page read, not the kernel's
        # read-ahead around it (which made most of the file resident after a few queries)
        handle.madvise(mmap.MADV_RANDOM)
    return mapped
