"""Searching a vector index: exact over the matrix while small or for a small group, else
through the HNSW graph with an exact re-rank (the rules in :mod:`workbench.index.vector.index`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from workbench.index.arrays import (
    one_blas_thread,
    top_positions,
    unit_rows,
)
from workbench.index.vector.slots import SUBSET_CACHE_BYTES, VectorSlots

__all__ = ["Allowed", "VectorSearch"]

Allowed = Callable[[str], bool] | set[str] | frozenset[str] | None
# ``allowed`` once a set of uuids has been searched exactly: a predicate, or None
Predicate = Callable[[str], bool] | None


class VectorSearch:
    """The searches of a :class:`~workbench.index.vector.index.VectorIndex`, over its slots."""

    def __init__(
        self,
        slots: VectorSlots,
        *,
        ef_search: int = 200,
        ef_reference_size: int = 100_000,
        ann_candidates: int = 100,
        exact_subset_limit: int = 20_000,
    ):
        self.slots = slots
        self.ef_search = ef_search
        self.ef_reference_size = max(1, int(ef_reference_size))
        self.ann_candidates = ann_candidates
        self.exact_subset_limit = exact_subset_limit

    def search(
        self,
        query: np.ndarray,
        k: int,
        group_ids: Sequence[str] | None = None,
        allowed: Allowed = None,
    ) -> list[tuple[str, float]]:
        """The ``k`` nearest uuids by cosine, best first: ``[(uuid, cosine), ...]``.

        ``group_ids`` restricts to those groups (None = all); ``allowed`` is a set of uuids
        or a predicate ``uuid -> bool``.
        """
        if k <= 0:
            return []
        q = unit_rows(query, self.slots.dim)[0]
        with self.slots._lock:
            if not self.slots._slot:
                return []
            codes = self.slots._codes(group_ids)
            if codes is not None and not codes:
                return []
            if isinstance(allowed, set | frozenset):
                slots = self.slots._slots_of(allowed, codes)
                return self._exact_on(q, slots, k, None)
            if self.slots._ann is None:
                return self._exact(q, k, codes, allowed)
            kept = self.slots._count(codes)
            if (
                codes is not None
                and kept <= self.exact_subset_limit
                and kept < len(self.slots._slot)
            ):
                return self._exact_in(q, k, codes, allowed)
            return self._ann_search(q, k, codes, allowed, kept)

    def similarity(self, query: np.ndarray, uuids: Sequence[str]) -> np.ndarray:
        """Exact cosine of ``query`` with each uuid's vector (NaN when unknown)."""
        q = unit_rows(query, self.slots.dim)[0]
        with self.slots._lock:
            slots = np.array([self.slots._slot.get(u, -1) for u in uuids], dtype=np.int64)
            out = np.full(len(slots), np.nan, dtype=np.float32)
            known = slots >= 0
            if known.any():
                out[known] = self.slots._rows(slots[known]) @ q
            return out

    def _exact(
        self, q: np.ndarray, k: int, codes: list[int] | None, allowed: Predicate
    ) -> list[tuple[str, float]]:
        n_kept = self.slots._count(codes)
        if codes is not None and n_kept < self.slots._size // 2:
            return self._exact_in(q, k, codes, allowed)
        with one_blas_thread():
            scores = (
                self.slots._rows(slice(0, self.slots._size)) @ q
            )  # float32 here (no graph): a view
        if n_kept < self.slots._size:
            scores[~self.slots._group_mask(codes)] = -np.inf
        return self._top(scores, None, k, allowed, n_kept)

    def _exact_in(
        self, q: np.ndarray, k: int, codes: list[int], allowed: Predicate
    ) -> list[tuple[str, float]]:
        """Exact search within groups, on a cached contiguous copy of their vectors."""
        key = tuple(sorted(codes))
        cached = self.slots._subsets.get(key)
        if cached is None:
            slots = self.slots._slots_in(codes)
            cached = (slots, self.slots._rows(slots))
            if cached[1].nbytes <= SUBSET_CACHE_BYTES // 4:
                self.slots._subsets[key] = cached
                self.slots._subset_bytes += cached[1].nbytes
                while self.slots._subset_bytes > SUBSET_CACHE_BYTES:
                    _, (_, old) = self.slots._subsets.popitem(last=False)
                    self.slots._subset_bytes -= old.nbytes
        else:
            self.slots._subsets.move_to_end(key)
        return self._exact_on(q, cached[0], k, allowed, rows=cached[1])

    def _exact_on(
        self,
        q: np.ndarray,
        slots: np.ndarray,
        k: int,
        allowed: Predicate,
        rows: np.ndarray | None = None,
    ) -> list[tuple[str, float]]:
        """Exact search over ``slots`` (``rows``: their vectors when already gathered)."""
        if slots.size == 0:
            return []
        with one_blas_thread():
            scores = (self.slots._rows(slots) if rows is None else rows) @ q
        return self._top(scores, slots, k, allowed, int(slots.size))

    def _top(
        self, scores: np.ndarray, slots: np.ndarray | None, k: int, allowed: Predicate, n_valid: int
    ) -> list[tuple[str, float]]:
        """Best ``k`` of ``scores`` (positions map through ``slots``), honouring a predicate."""
        want = k if allowed is None else min(n_valid, max(4 * k, 32))
        while True:
            order = top_positions(scores, min(want, n_valid))
            hits = self._accept(order, scores, slots, allowed, k)
            if len(hits) >= k or want >= n_valid:
                return hits
            want *= 4

    def _accept(
        self, order: np.ndarray, scores: np.ndarray, slots: np.ndarray | None, allowed: Predicate,
        k: int,
    ) -> list[tuple[str, float]]:  # fmt: skip
        out: list[tuple[str, float]] = []
        for pos in order:
            score = float(scores[pos])
            if score == -np.inf:
                break
            uuid = self.slots._uuids[int(slots[pos] if slots is not None else pos)]
            if uuid is None or (allowed is not None and not allowed(uuid)):
                continue
            out.append((uuid, score))
            if len(out) == k:
                break
        return out

    def ef_for(self, total: int) -> int:
        """The HNSW search breadth for an index of ``total`` vectors: ``ef_search`` up to
        ``ef_reference_size`` vectors, then growing with the square root of the size, so that
        recall does not fall as the graph grows (see the module docstring)."""
        return max(
            self.ef_search,
            math.ceil(self.ef_search * math.sqrt(max(total, 1) / self.ef_reference_size)),
        )

    def _ann_search(
        self, q: np.ndarray, k: int, codes: list[int] | None, allowed: Predicate, kept: int
    ) -> list[tuple[str, float]]:
        total = len(self.slots._slot)
        want = max(self.ann_candidates, 4 * k)
        if kept < total:  # oversample by the inverse selectivity of the group filter
            want = math.ceil(want * total / max(kept, 1))
        codes_arr = None if codes is None else np.asarray(codes, dtype=np.int32)
        for _attempt in range(3):
            count = min(want, total)
            self.slots._ann.expansion_search = max(self.ef_for(total), count)
            keys = np.asarray(self.slots._ann.search(q, count, threads=1).keys, dtype=np.int64)
            if codes_arr is not None and keys.size:
                keys = keys[np.isin(self.slots._group[keys], codes_arr)]
            scores = self.slots._rows(keys) @ q  # re-rank with the exact cosine
            hits = self._top(scores, keys, k, allowed, int(keys.size))
            if len(hits) >= k or count >= total:
                return hits
            want *= 4
        return self._exact_on(q, self.slots._slots_in(codes), k, allowed)
