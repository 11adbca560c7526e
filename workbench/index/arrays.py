"""Small numpy helpers of the vector index: unit rows, growing arrays, top-k, one BLAS thread,
fingerprints of vectors and texts."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.errors import DimensionMismatch

__all__ = [
    "NPY_HEADERS",
    "grow",
    "one_blas_thread",
    "row_prints",
    "text_prints",
    "top_positions",
    "unit_rows",
]

# numpy reads every .npy header with ast.literal_eval, and CPython 3.11's AST constructor keeps
# a recursion-depth count that two threads parsing at once can corrupt ("SystemError: AST
# constructor recursion depth mismatch", seen when the indexes of several kinds load in
# parallel): every read or write of an .npy/.npz file of the indexes holds this lock
NPY_HEADERS = threading.Lock()


def unit_rows(vectors: np.ndarray, dim: int) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    if matrix.ndim != 2 or (matrix.shape[0] and matrix.shape[1] != dim):
        raise DimensionMismatch(
            f"the index holds {dim}-dimensional vectors but got shape {matrix.shape}"
        )
    # the row norms through einsum: np.linalg.norm(axis=1) takes ~10x longer on a big matrix
    squares = np.einsum("ij,ij->i", matrix, matrix)
    norms = np.sqrt(squares)[:, None]
    if np.all(np.abs(norms - 1.0) < 1e-4):
        return np.ascontiguousarray(matrix)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(matrix / norms)


_BLAS: list[Any] = []  # the threadpoolctl controller (untyped), or None: looked up once


def one_blas_thread() -> contextlib.AbstractContextManager[object]:
    """Run a mat-vec on one BLAS thread. A search is one small product; on a busy 2-core
    machine OpenBLAS's thread hand-off made it an order of magnitude slower."""
    if not _BLAS:
        try:
            from threadpoolctl import ThreadpoolController

            _BLAS.append(ThreadpoolController())
        except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
            _BLAS.append(None)
    controller = _BLAS[0]
    if controller is None:  # pragma: no cover
        return contextlib.nullcontext()
    limited: contextlib.AbstractContextManager[object] = controller.limit(limits=1, user_api="blas")
    return limited


def grow(array: np.ndarray, capacity: int, fill: float = 0) -> np.ndarray:
    """``array`` with room for ``capacity`` rows, the new ones ``fill`` (zeros are left to
    the allocator: the pages of rows never written are not resident)."""
    shape = (capacity,) + array.shape[1:]
    grown = np.zeros(shape, array.dtype) if fill == 0 else np.full(shape, fill, array.dtype)
    grown[: array.shape[0]] = array
    return grown


def top_positions(scores: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` largest scores, largest first."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    if n < scores.size:
        part = np.argpartition(-scores, n - 1)[:n]
    else:
        part = np.arange(scores.size)
    return part[np.argsort(-scores[part], kind="stable")]


# one fixed odd 64-bit multiplier per column (the same in every process)
_PRINT_KEYS = np.random.default_rng(20261125).integers(1, 2**63, size=65536, dtype=np.uint64) | 1


def row_prints(matrix: np.ndarray, chunk: int = 8192) -> np.ndarray:
    """A 64-bit fingerprint of each float32 row's exact bits (a multiply-add hash of its
    words): rows that differ in any bit differ in print, barring a 2**-64 chance."""
    keys = _PRINT_KEYS[: matrix.shape[1]]
    out = np.empty(matrix.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, matrix.shape[0], chunk):
            rows = np.ascontiguousarray(matrix[start : start + chunk], dtype=np.float32)
            words = rows.view(np.uint32).astype(np.uint64) + 1
            out[start : start + chunk] = (words * keys).sum(axis=1, dtype=np.uint64)
    return out


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on each uint64 (wrapping arithmetic): a stable bit mixer."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    mixed: np.ndarray = x ^ (x >> np.uint64(31))
    return mixed


def _long_print(data: np.ndarray, window: int) -> np.uint64:
    """:func:`text_prints` of one text's bytes, a window at a time (the same sum)."""
    total = np.uint64(0)
    for lo in range(0, data.size, window):
        position = np.arange(lo, min(lo + window, data.size), dtype=np.uint64)
        terms = (data[lo : lo + window].astype(np.uint64) + np.uint64(1)) * (
            _mix(position) | np.uint64(1)
        )
        total += terms.sum(dtype=np.uint64)
    return np.uint64(_mix(np.array([total ^ _mix(np.array([data.size], dtype=np.uint64))[0]]))[0])


def text_prints(texts: Sequence[str], chunk_bytes: int = 1 << 22) -> np.ndarray:
    """A 64-bit fingerprint of each text's UTF-8 bytes, computed for all of them at once
    (numpy over the Arrow string buffer; ~20x faster than a hash call per text): the sum of
    each byte times an odd key of its position, mixed with the length. Stable across processes;
    two texts that differ in one byte always differ in print."""
    import pyarrow as pa

    array = pa.array(list(texts), type=pa.large_string())
    n = len(array)
    out = np.zeros(n, dtype=np.uint64)
    if not n:
        return out
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], np.int64, n + 1, array.offset * 8)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    with np.errstate(over="ignore"):
        start = 0
        while start < n:
            end = int(np.searchsorted(offsets, offsets[start] + chunk_bytes, side="right")) - 1
            end = min(max(end, start + 1), n)
            lo, hi = int(offsets[start]), int(offsets[end])
            if end == start + 1 and hi - lo > chunk_bytes:  # one long text: window its bytes
                out[start] = _long_print(data[lo:hi], chunk_bytes)
                start = end
                continue
            lengths = np.diff(offsets[start : end + 1])
            firsts = offsets[start:end] - lo
            position = np.arange(hi - lo, dtype=np.int64) - np.repeat(firsts, lengths)
            keys = _mix(np.arange(int(lengths.max()), dtype=np.uint64)) | np.uint64(1)
            terms = (data[lo:hi].astype(np.uint64) + np.uint64(1)) * keys[position]
            sums = np.zeros(end - start, dtype=np.uint64)
            filled = lengths > 0
            if filled.any():
                sums[filled] = np.add.reduceat(terms, firsts[filled])
            out[start:end] = _mix(sums ^ _mix(lengths.astype(np.uint64)))
            start = end
    return out


def positions_in(values: Sequence[str], within: Sequence[str | None]) -> np.ndarray:
    """The position of each of ``values`` in ``within`` (unique strings, or None for a hole),
    -1 where absent: one hash join in Arrow instead of a dict lookup per value (a million
    uuids in a fraction of a second)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(values):
        return np.zeros(0, dtype=np.int64)
    found = pc.index_in(pa.array(values, type=pa.string()), value_set=pa.array(within, pa.string()))
    return np.asarray(pc.fill_null(found, -1).to_numpy(), dtype=np.int64)


def grouped(
    keys: Sequence[str | None], members: Sequence[str]
) -> dict[str, str | set[str] | tuple[str, ...]]:
    """``key -> member``, or the tuple of members when a key has several, built in bulk: the
    keys are encoded and sorted in Arrow and numpy, and Python touches each key once. Each
    dict key is the first of the equal ``keys`` objects (interned ones stay shared). A None
    key is left out; a (key, member) pair given twice counts once. (It makes no sets: the
    type is that of the caller's index, which makes a set of a key's members once they
    change.)"""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(keys):
        return {}
    encoded = pc.dictionary_encode(pa.array(keys, type=pa.string()))
    codes = np.asarray(pc.fill_null(encoded.indices, -1).to_numpy(), dtype=np.int64)
    order = np.argsort(codes, kind="stable")
    order = order[codes[order] >= 0]
    counts = np.bincount(codes[order], minlength=len(encoded.dictionary))
    counts = counts[counts > 0]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    ordered = [members[i] for i in order.tolist()]
    firsts = [keys[i] for i in order[starts].tolist()]
    out: dict[str, str | set[str] | tuple[str, ...]] = {}
    for key, at, count in zip(firsts, starts.tolist(), counts.tolist()):
        if count == 1:
            out[key] = ordered[at]
        else:
            same = tuple(dict.fromkeys(ordered[at : at + count]))
            out[key] = same if len(same) > 1 else same[0]
    return out
