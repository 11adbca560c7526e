"""Small numpy helpers of the vector index: unit rows, growing arrays, top-k, one BLAS thread."""

from __future__ import annotations

import contextlib

import numpy as np

from workbench.errors import DimensionMismatch

__all__ = ["unit_rows", "grow", "top_positions", "one_blas_thread", "row_prints"]


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


_BLAS: list = []


def one_blas_thread():
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
    return controller.limit(limits=1, user_api="blas")


def grow(array: np.ndarray, capacity: int, fill=0) -> np.ndarray:
    shape = (capacity,) + array.shape[1:]
    grown = np.full(shape, fill, dtype=array.dtype)
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
    rows = np.ascontiguousarray(matrix, dtype=np.float32)
    keys = _PRINT_KEYS[: rows.shape[1]]
    out = np.empty(rows.shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for start in range(0, rows.shape[0], chunk):
            words = rows[start : start + chunk].view(np.uint32).astype(np.uint64) + 1
            out[start : start + chunk] = (words * keys).sum(axis=1, dtype=np.uint64)
    return out
