"""Small numpy helpers of the vector index: unit rows, growing arrays, top-k, one BLAS thread."""

from __future__ import annotations

import contextlib

import numpy as np

from workbench.errors import DimensionMismatch

__all__ = ["unit_rows", "grow", "top_positions", "one_blas_thread"]


def unit_rows(vectors: np.ndarray, dim: int) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32)
    if matrix.ndim == 1:
        matrix = matrix[None, :]
    if matrix.ndim != 2 or (matrix.shape[0] and matrix.shape[1] != dim):
        raise DimensionMismatch(
            f"the index holds {dim}-dimensional vectors but got shape {matrix.shape}"
        )
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
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
