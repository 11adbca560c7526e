"""The slots of a vector index: where each uuid's vector lives (see :class:`VectorSlots`)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from workbench.index.arrays import (
    grow,
)
from workbench.index.vector.file_rows import FileRows

__all__ = ["SUBSET_CACHE_BYTES", "Slots", "VectorSlots"]

# some slots of the matrix: their numbers, or a range
Slots = np.ndarray | slice

SUBSET_CACHE_BYTES = 128 * 2**20  # at most this much for cached group subsets, one a quarter


class VectorSlots:
    """The vectors of one index, one slot each: a matrix (float32, or float16 while a graph
    serves; memory-mapped from a saved file once saved), each slot's uuid, group code and
    fingerprint, the free slots, a cache of group subsets, and the HNSW graph over the slots
    while one serves. The state the parts of a :class:`~workbench.index.vector.index.VectorIndex`
    share (its graph build, searches and saves each hold these slots); every method expects
    the caller to hold :attr:`_lock`."""

    # the HNSW graph (a ``usearch.index.Index``, untyped) while one serves
    _ann: Any

    def __init__(self, dim: int, half_under_graph: bool = True):
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.dim = dim
        # while the graph serves, the vectors (the exact re-rank of its candidates, and the
        # exact search of small groups) are held as float16: half the memory, cosines within
        # ~1e-3. Exact search of the whole index (no graph) keeps float32 for BLAS speed.
        self.half_under_graph = half_under_graph
        self._lock = threading.RLock()
        self._mat: np.ndarray = np.zeros((0, dim), dtype=np.float32)
        self._file: FileRows | None = None  # while ``_mat`` is a saved file's mapping
        self._alive = np.zeros(0, dtype=bool)
        self._prints = np.zeros(0, dtype=np.uint64)  # each slot's vector's fingerprint
        self._group = np.zeros(0, dtype=np.int32)
        self._uuids: list[str | None] = []
        self._slot: dict[str, int] = {}
        self._free: list[int] = []
        self._size = 0  # high-water mark of used slots
        self._group_codes: dict[str, int] = {}
        self._group_counts: dict[int, int] = {}
        # group subsets searched exactly: group codes -> (slots, a contiguous copy of their
        # vectors), so a group-filtered search does not gather its rows on every query
        self._subsets: OrderedDict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._subset_bytes = 0
        self._ann = None
        # the slots written while a save of the index runs (None when none runs): the save
        # puts them again once it serves the saved file
        self._written: set[int] | None = None

    # --- introspection --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._slot

    def groups(self) -> set[str]:
        """The group ids that hold at least one vector."""
        with self._lock:
            return {g for g, c in self._group_codes.items() if self._group_counts.get(c, 0)}

    def uuids(self) -> list[str]:
        with self._lock:
            return list(self._slot)

    def vector(self, uuid: str) -> np.ndarray | None:
        with self._lock:
            slot = self._slot.get(uuid)
            return None if slot is None else self._rows(np.array([slot]))[0]

    # --- slots ----------------------------------------------------------------------------
    def _claim(self, uuid: str, group_id: str) -> int:
        code = self._group_codes.setdefault(group_id, len(self._group_codes))
        self._forget_subsets(code)
        slot = self._slot.get(uuid)
        if slot is not None:
            old = int(self._group[slot])
            self._forget_subsets(old)
            self._group_counts[old] -= 1
        else:
            slot = self._free.pop() if self._free else self._next_slot()
            self._slot[uuid] = slot
            self._uuids[slot] = uuid
            self._alive[slot] = True
        self._group[slot] = code
        self._group_counts[code] = self._group_counts.get(code, 0) + 1
        return slot

    def _next_slot(self) -> int:
        if self._size == self._mat.shape[0]:
            self._grow_to(max(1024, self._mat.shape[0] * 2))
        self._size += 1
        return self._size - 1

    def _reserve(self, new: int) -> None:
        """Room for ``new`` more uuids, made at once: a bulk load grown by doubling copied the
        matrix about as many times, and held the last two copies at once (at 1M float32
        vectors, 0.8 GB more at the peak)."""
        need = self._size + max(0, new - len(self._free))
        if need > self._mat.shape[0]:
            self._grow_to(max(1024, need + need // 8))

    def _grow_to(self, cap: int) -> None:
        self._set_matrix(grow(self._mat, cap))
        self._grow_slots(cap)

    def _grow_slots(self, cap: int) -> None:
        """The per-slot arrays (all but the matrix) to ``cap`` slots."""
        self._alive = grow(self._alive, cap)
        self._prints = grow(self._prints, cap)
        self._group = grow(self._group, cap, fill=-1)
        self._uuids.extend([None] * (cap - len(self._uuids)))

    def _release(self, uuid: str) -> int:
        slot = self._slot.pop(uuid)
        self._forget_subsets(int(self._group[slot]))
        self._group_counts[int(self._group[slot])] -= 1
        self._alive[slot] = False
        self._group[slot] = -1
        self._uuids[slot] = None
        self._put(np.array([slot]), 0.0)
        self._prints[slot] = 0
        self._free.append(slot)
        return slot

    def _lay_out(
        self, slots: np.ndarray, size: int, uuids: list[str], groups: Sequence[str]
    ) -> None:
        """Place ``uuids`` (of ``groups``) at ``slots`` of ``size`` slots, the rest free, with
        no vectors or fingerprints yet (hold the lock)."""
        self._subsets.clear()
        self._subset_bytes = 0
        self._size = size
        cap = max(1024, size)
        self._alive = np.zeros(cap, dtype=bool)
        self._group = np.full(cap, -1, dtype=np.int32)
        self._uuids = [None] * cap
        self._prints = np.zeros(cap, dtype=np.uint64)
        codes = {g: self._group_codes.setdefault(g, len(self._group_codes))
                 for g in dict.fromkeys(groups)}  # fmt: skip
        coded = np.fromiter(map(codes.__getitem__, groups), dtype=np.int32, count=len(groups))
        self._group[slots] = coded
        for code, count in enumerate(np.bincount(coded).tolist()):
            if count:
                self._group_counts[code] = self._group_counts.get(code, 0) + count
        self._alive[slots] = True
        if len(uuids) == size and np.array_equal(slots, np.arange(size)):  # the usual
            self._uuids[:size] = uuids
            self._slot.update(zip(uuids, range(size)))
        else:
            listed = slots.tolist()
            for uuid, slot in zip(uuids, listed):
                self._uuids[slot] = uuid
            self._slot.update(zip(uuids, listed))
        self._free = np.flatnonzero(~self._alive[:size])[::-1].tolist()

    # --- the matrix -----------------------------------------------------------------------
    def _set_half(self, half: bool) -> None:
        """Hold the vectors as float16 (``half``) or float32 (hold the lock)."""
        dtype = np.float16 if half else np.float32
        if self._mat.dtype != dtype:
            self._set_matrix(self._mat.astype(dtype))
            self._subsets.clear()
            self._subset_bytes = 0

    def _set_matrix(self, mat: np.ndarray, file: FileRows | None = None) -> None:
        """Hold the vectors in ``mat`` (``file``: the saved file it maps) (hold the lock)."""
        self._mat, self._file = mat, file

    def _put(self, slots: np.ndarray, rows: np.ndarray | float) -> None:
        """Write the vectors at ``slots`` (hold the lock)."""
        self._mat[slots] = rows
        if self._file is not None:
            self._file.clean[slots] = False
        if self._written is not None:  # a save is under way: put again once it is mapped
            self._written.update(np.asarray(slots, dtype=np.int64).ravel().tolist())

    def _stored(self, slots: Slots) -> np.ndarray:
        """The vectors at ``slots`` as held (float16 under a graph) (hold the lock)."""
        if self._file is None:
            held: np.ndarray = self._mat[slots]
            return held
        if isinstance(slots, slice):
            slots = np.arange(*slots.indices(self._mat.shape[0]))
        return self._file.rows(np.asarray(slots, dtype=np.int64))

    def _rows(self, slots: Slots) -> np.ndarray:
        """The vectors at ``slots`` as float32 (hold the lock)."""
        return self._stored(slots).astype(np.float32, copy=False)

    def _map_rows(self, mapped: np.ndarray) -> None:
        """Serve the float16 vectors from a saved file, memory-mapped copy-on-write (hold the
        lock): rows are read from the file with pread (:class:`FileRows`), a vector written
        later goes to private memory and never to the file. The other per-slot arrays grow
        to the file's spare rows."""
        if self._alive.shape[0] < mapped.shape[0]:
            self._grow_slots(mapped.shape[0])
        readable = isinstance(mapped, np.memmap) and hasattr(os, "preadv")  # not on Windows
        self._set_matrix(
            mapped, FileRows(mapped) if isinstance(mapped, np.memmap) and readable else None
        )
        self._subsets.clear()
        self._subset_bytes = 0

    # --- groups ---------------------------------------------------------------------------
    def _codes(self, group_ids: Sequence[str] | None) -> list[int] | None:
        if group_ids is None:
            return None
        return [self._group_codes[g] for g in set(group_ids) if g in self._group_codes]

    def _count(self, codes: list[int] | None) -> int:
        if codes is None:
            return len(self._slot)
        return sum(self._group_counts.get(c, 0) for c in codes)

    def _group_mask(self, codes: list[int] | None) -> np.ndarray:
        groups = self._group[: self._size]
        if codes is None:
            return self._alive[: self._size].copy()
        if len(codes) == 1:
            same: np.ndarray = groups == codes[0]
            return same
        return np.isin(groups, np.asarray(codes, dtype=np.int32))

    def _slots_in(self, codes: list[int] | None) -> np.ndarray:
        return np.flatnonzero(self._group_mask(codes))

    def _slots_of(self, allowed: Iterable[str], codes: list[int] | None) -> np.ndarray:
        slots = np.fromiter(
            (s for s in (self._slot.get(u) for u in allowed) if s is not None), dtype=np.int64
        )
        if codes is not None and slots.size:
            slots = slots[np.isin(self._group[slots], np.asarray(codes, dtype=np.int32))]
        return slots

    def _forget_subsets(self, code: int) -> None:
        """Drop the cached subsets that include group ``code`` (its rows changed)."""
        if self._subsets:
            for key in [key for key in self._subsets if code in key]:
                self._subset_bytes -= self._subsets.pop(key)[1].nbytes
