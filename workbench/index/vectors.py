"""An in-process vector index for one memory kind ("entity", "fact" or "passage").

DuckDB (``entity_embeddings`` / ``fact_embeddings``) is the source of truth; this index is a
cache loaded at open (:func:`load_index`) and kept in step by the search engine's
``on_upsert`` / ``on_delete``.

How it searches (figures in ``docs/performance.md``, "The vector index"):

* **Exact** while small: the unit vectors live in one float32 matrix (``slot`` = row); a
  query is one mat-vec product (on one BLAS thread) and an ``argpartition``, linear in the
  rows. Beyond ``ann_threshold`` rows:
* **Approximate** (HNSW from ``usearch``, int8-quantised, M=24, ef_add=96, ef_search=200):
  it returns an oversampled candidate list (``max(ann_candidates, 4k)``,
  ``ef = max(ef_for(size), count)``) re-ranked with the cosine of the stored vectors, so
  scores are real cosines, not the graph's int8 estimates. While a graph serves, the matrix
  is held as float16 (``half_under_graph``): half the memory of the largest part of the
  index, cosines within about 1e-3 of float32's (recall figures in ``docs/performance.md``);
  it goes back to float32 (the rounded values) if the index shrinks and the graph is dropped.
  Once saved (:meth:`VectorIndex.save_graph`), the float16 matrix is served from the saved
  file, memory-mapped copy-on-write: the rest stays on disk, and a vector written later goes
  to private memory. A search reads its candidates' rows from the file with ``pread``
  (:class:`_FileRows`), not through the mapping: a page read through a mapping also maps the
  neighbours the kernel holds cached (fault-around), which made most of a warm file resident
  in the process after a few hundred searches.
  A bigger graph needs a wider search for the same recall, so ``ef_for``
  grows ``ef_search`` with the square root of the size beyond ``ef_reference_size`` (100k):
  a fixed ef lost recall as the graph grew, the square-root rule kept it.
* **Filters** (``group_ids``, ``allowed``) apply *before* the top-k for exact search. For ANN
  the index oversamples by the inverse selectivity of the group filter and filters the
  candidates; when the filter keeps at most ``exact_subset_limit`` rows (or the ANN pass
  comes back short) it runs exact over just the allowed rows instead. An ``allowed`` *set*
  always runs exact over those rows. The rows of a group searched exactly are kept as a
  contiguous copy between searches (``SUBSET_CACHE_BYTES`` in all, dropped when one of the
  group's rows changes): gathering them anew per query was a large part of a search.

The HNSW graph is built in a background thread (``background_build``, on one core by
default) from a snapshot while exact search keeps serving; inserts and deletes made meanwhile
are replayed on it when it is ready. :meth:`VectorIndex.save_graph` writes the graph with its
parameters and a fingerprint of each slot's vector; :func:`load_index` opens it and catches it
up with the store (removes the slots whose vector changed or went, adds the new ones), so a
restart of a large store does not rebuild it (a build takes about a minute of CPU per 100k
vectors) even when memories were written after the graph was saved, or by a process that
crashed before saving it.

The parameters (M, ef_add, ef_search) were chosen by a sweep on clustered synthetic vectors:
the chosen ones give the best recall for the search CPU, at the price of a longer build in the
background.

Deleted rows leave a free slot (reused by the next insert); the graph drops the key and is
rebuilt (in the background) when tombstones pile up. All methods are thread-safe (one lock).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import mmap
import os
import threading
import uuid as uuidlib
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from workbench.errors import InvalidInput
from workbench.index.vector_math import (
    grow,
    one_blas_thread,
    positions_in,
    row_prints,
    top_positions,
    unit_rows,
)

if TYPE_CHECKING:
    from workbench.store import Store

Allowed = Callable[[str], bool] | set[str] | frozenset[str] | None

__all__ = ["VectorIndex", "SavedGraph", "load_index", "KINDS"]

log = logging.getLogger("workbench.index.vectors")

# tombstones a graph may carry (or changes it may be caught up with at open) before a new
# graph is built instead: at least this many, or a quarter of the index
TOMBSTONE_LIMIT = 10_000

# vectors added to a graph being built between two looks at whether it was called off
BUILD_CHUNK = 2048

SUBSET_CACHE_BYTES = 128 * 2**20  # at most this much for cached group subsets, one a quarter

KINDS = ("entity", "fact", "passage")

# saved vectors a numbered restore compares with the store's, beyond those written since
SPOT_CHECKS = 256

# rows of a saved vectors file read by one pread when a read wants most of a stretch of them
# (a graph build, a save, a large group): 3 MB at 384 dimensions
BLOCK_ROWS = 4096


class _FileRows:
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
        fd = os.open(mapped.filename, os.O_RDONLY)
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
        buffer = memoryview(out.reshape(-1).view(np.uint8))
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


class VectorIndex:
    """Exact-then-approximate cosine index over unit vectors, keyed by uuid."""

    def __init__(
        self,
        dim: int,
        ann_threshold: int = 50_000,
        *,
        ef_search: int = 200,
        ef_reference_size: int = 100_000,
        ann_candidates: int = 100,
        exact_subset_limit: int = 20_000,
        connectivity: int = 24,
        expansion_add: int = 96,
        ann_dtype: str = "i8",
        build_threads: int = 1,
        background_build: bool = True,
        half_under_graph: bool = True,
    ):
        if dim <= 0:
            raise ValueError("dim must be positive")
        self.dim = dim
        self.ann_threshold = max(1, int(ann_threshold))
        self.ef_search = ef_search
        self.ef_reference_size = max(1, int(ef_reference_size))
        self.ann_candidates = ann_candidates
        self.exact_subset_limit = exact_subset_limit
        self._ann_params = dict(
            connectivity=connectivity, expansion_add=expansion_add, dtype=ann_dtype
        )
        self._build_threads = build_threads
        self.background_build = background_build
        # while the graph serves, the vectors (the exact re-rank of its candidates, and the
        # exact search of small groups) are held as float16: half the memory, cosines within
        # ~1e-3. Exact search of the whole index (no graph) keeps float32 for BLAS speed.
        self.half_under_graph = half_under_graph
        self._lock = threading.RLock()
        self._mat = np.zeros((0, dim), dtype=np.float32)
        self._file: _FileRows | None = None  # while ``_mat`` is a saved file's mapping
        self._alive = np.zeros(0, dtype=bool)
        self._prints = np.zeros(0, dtype=np.uint64)  # each slot's vector's fingerprint
        self._group = np.zeros(0, dtype=np.int32)
        self._uuids: list[str | None] = []
        self._slot: dict[str, int] = {}
        self._free: list[int] = []
        self._size = 0  # high-water mark of used slots
        self._group_codes: dict[str, int] = {}
        self._group_counts: dict[int, int] = {}
        self._ann = None
        self._ann_tombstones = 0
        self._builder: threading.Thread | None = None
        self._deferring = 0  # bulk loads under way (see defer_graph)
        self._build_gen = 0
        self._dirty: set[int] = set()  # slots changed while a graph was being built
        # group subsets searched exactly: group codes -> (slots, a contiguous copy of their
        # vectors), so a group-filtered search does not gather its rows on every query
        self._subsets: OrderedDict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._subset_bytes = 0
        # called (in the builder's thread, without the lock) when a background build is done
        self.on_built: Callable[[], None] | None = None

    # --- introspection --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._slot

    @property
    def uses_ann(self) -> bool:
        return self._ann is not None

    @property
    def state(self) -> str:
        """``graph`` (searched through the HNSW graph), ``building`` (exact search while the
        graph is built in the background) or ``exact`` (too small for a graph, or deferred)."""
        with self._lock:
            if self._ann is not None:
                return "graph"
            return "building" if self._builder is not None else "exact"

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

    # --- writing ------------------------------------------------------------------------
    def add(self, uuids: Sequence[str], vectors: np.ndarray, group_ids: Sequence[str]) -> None:
        """Insert or replace (upsert) one vector per uuid."""
        uuids = list(uuids)
        group_ids = list(group_ids)
        vecs = unit_rows(vectors, self.dim)
        if not (len(uuids) == vecs.shape[0] == len(group_ids)):
            raise InvalidInput(
                f"add() needs one vector and one group_id per uuid; got {len(uuids)} uuids, "
                f"{vecs.shape[0]} vectors, {len(group_ids)} group ids"
            )
        if not uuids:
            return
        last = {u: i for i, u in enumerate(uuids)}  # a repeated uuid: the last one wins
        if len(last) != len(uuids):
            keep = sorted(last.values())
            uuids = [uuids[i] for i in keep]
            group_ids = [group_ids[i] for i in keep]
            vecs = vecs[keep]
        with self._lock:
            replaced = [self._slot[u] for u in uuids if u in self._slot]
            self._reserve(len(uuids) - len(replaced))
            slots = np.fromiter(
                (self._claim(u, g) for u, g in zip(uuids, group_ids)),
                dtype=np.int64,
                count=len(uuids),
            )
            self._put(slots, vecs)
            self._prints[slots] = row_prints(vecs)
            if self._builder is not None:
                self._dirty.update(int(s) for s in slots)
            if self._ann is not None:
                if replaced:
                    self._ann.remove(np.asarray(replaced, dtype=np.int64))
                    self._ann_tombstones += len(replaced)
                self._ann.add(slots, vecs, threads=self._build_threads)
                self._maybe_compact_ann()
            elif len(self._slot) >= self.ann_threshold and self._builder is None:
                if not self._deferring:
                    self._start_build()

    @contextmanager
    def defer_graph(self) -> Iterator[None]:
        """A bulk load: no graph is started while it runs (its vectors are searched exactly,
        or join a graph that already exists); one is built after it when the index is large
        enough. A build started at the threshold would replay, under the lock, every vector
        written while it ran, and hold the load up."""
        with self._lock:
            self._deferring += 1
        try:
            yield
        finally:
            with self._lock:
                self._deferring -= 1
                idle = not self._deferring and self._ann is None and self._builder is None
                if idle and len(self._slot) >= self.ann_threshold:
                    self._start_build()

    def remove(self, uuids: Sequence[str]) -> None:
        """Forget these uuids (unknown ones are ignored)."""
        with self._lock:
            slots = [self._release(u) for u in uuids if u in self._slot]
            if not slots:
                return
            if self._builder is not None:
                self._dirty.update(slots)
            if len(self._slot) < self.ann_threshold // 2:
                self._drop_ann()  # small again: exact search is cheaper than the graph
            elif self._ann is not None:
                self._ann.remove(np.asarray(slots, dtype=np.int64))
                self._ann_tombstones += len(slots)
                self._maybe_compact_ann()

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

    # --- the approximate graph -----------------------------------------------------------
    def _start_build(self) -> None:
        """Build the HNSW graph over the slots in use now, in a background thread unless told
        not to; exact search serves meanwhile. Changes made during the build are replayed on
        it."""
        self._build_gen += 1
        gen = self._build_gen
        slots = np.flatnonzero(self._alive[: self._size])
        self._dirty = set()
        if not self.background_build:
            self._builder = threading.current_thread()
            self._finish_build(gen, self._new_graph(slots, gen))
            return
        self._builder = threading.Thread(
            target=lambda: self._finish_build(gen, self._new_graph(slots, gen), True),
            name="workbench-ann-build",
            daemon=True,
        )
        self._builder.start()

    def _new_graph(self, slots: np.ndarray, gen: int):
        """A graph over the vectors of these slots, added a chunk at a time, each chunk's
        vectors read (under the lock) as it is added, not copied all at first (at 1M float32
        vectors the copy was 1.5 GB more while a first graph was built): a vector written
        meanwhile is read old or new, and its slot is replayed at the end either way. None
        when the build was called off meanwhile (:meth:`close`, or the index became small
        again)."""
        from usearch.index import Index

        graph = Index(ndim=self.dim, metric="cos", **self._ann_params)
        for start in range(0, slots.size, BUILD_CHUNK):
            with self._lock:
                if gen != self._build_gen:
                    return None
                chunk = slots[start : start + BUILD_CHUNK]
                chunk = chunk[self._alive[chunk]]  # (one freed meanwhile: replayed as gone)
                rows = self._rows(chunk)
            if chunk.size:
                graph.add(chunk, rows, threads=self._build_threads)
        return graph

    def close(self, timeout: float = 60) -> None:
        """Call off a graph build under way and wait for its thread (at most one chunk): a
        build left running in native code when the process exits aborts it. The store keeps
        the vectors: the next open builds the graph again."""
        with self._lock:
            builder = self._builder
            if builder is None or builder is threading.current_thread():
                return
            self._build_gen += 1
        builder.join(timeout)
        with self._lock:
            if self._builder is builder:
                self._builder, self._dirty = None, set()

    def _finish_build(self, gen: int, graph, notify: bool = False) -> None:
        with self._lock:
            if gen != self._build_gen or graph is None:
                return  # called off meanwhile (closed, or the index became small again)
            dirty = np.fromiter(self._dirty, dtype=np.int64, count=len(self._dirty))
            if dirty.size:
                graph.remove(dirty)
                live = dirty[self._alive[dirty]]
                if live.size:
                    graph.add(live, self._rows(live), threads=self._build_threads)
            self._ann, self._ann_tombstones = graph, int(dirty.size)
            self._set_half(self.half_under_graph)
            self._builder, self._dirty = None, set()
            hook = self.on_built if notify else None
        if hook is not None:
            try:
                hook()
            except Exception:  # a cache left unsaved is rebuilt or caught up at the next open
                log.exception("after a graph build")

    def _drop_ann(self) -> None:
        self._build_gen += 1
        self._ann, self._ann_tombstones = None, 0
        self._builder, self._dirty = None, set()
        self._set_half(False)

    def _set_half(self, half: bool) -> None:
        """Hold the vectors as float16 (``half``) or float32 (hold the lock)."""
        dtype = np.float16 if half else np.float32
        if self._mat.dtype != dtype:
            self._set_matrix(self._mat.astype(dtype))
            self._subsets.clear()
            self._subset_bytes = 0

    def _set_matrix(self, mat: np.ndarray, file: _FileRows | None = None) -> None:
        """Hold the vectors in ``mat`` (``file``: the saved file it maps) (hold the lock)."""
        self._mat, self._file = mat, file

    def _put(self, slots: np.ndarray, rows) -> None:
        """Write the vectors at ``slots`` (hold the lock)."""
        self._mat[slots] = rows
        if self._file is not None:
            self._file.clean[slots] = False

    def _stored(self, slots) -> np.ndarray:
        """The vectors at ``slots`` as held (float16 under a graph) (hold the lock)."""
        if self._file is None:
            return self._mat[slots]
        if isinstance(slots, slice):
            slots = np.arange(*slots.indices(self._mat.shape[0]))
        return self._file.rows(np.asarray(slots, dtype=np.int64))

    def _rows(self, slots) -> np.ndarray:
        """The vectors at ``slots`` as float32 (hold the lock)."""
        return self._stored(slots).astype(np.float32, copy=False)

    def _maybe_compact_ann(self) -> None:
        if self._builder is None and self._ann_tombstones > _tombstone_limit(len(self._slot)):
            self._start_build()  # the current graph keeps serving until the new one is ready

    # --- saving the graph (a cache: the store keeps the vectors) ---------------------------
    def save_graph(self, graph_dir: str | Path, kind: str, seq: int | None = None) -> bool:
        """Save the HNSW graph, a fingerprint of each slot's vector and, while the vectors are
        held as float16, the vectors themselves (with spare rows for new memories), then the
        manifest (the slot layout and the names of those files): the manifest, replaced last,
        is what makes a save count, so a crash part way leaves the previous one whole. The
        vectors are then served from the saved file, memory-mapped (see :meth:`_map_rows`).
        ``seq``: the number of the newest vector write this index holds, every earlier one
        included (:func:`~workbench.store.search.latest_vector_seq`, read while no write was
        between its commit and the index being told); the next open then reads only the
        vectors written after it. False when there is no finished graph to save."""
        with self._lock:
            if self._ann is None or self._builder is not None:
                return False
            folder = Path(graph_dir)
            folder.mkdir(parents=True, exist_ok=True)
            save = f"{kind}.{uuidlib.uuid4().hex[:12]}"
            files = {"graph": f"{save}.usearch", "prints": f"{save}.prints.npy"}
            self._ann.save(str(folder / files["graph"]))
            _write_synced(folder / files["prints"], self._prints.__getitem__, self._size)
            if self._mat.dtype == np.float16:
                files["vectors"] = f"{save}.vectors.npy"
                rows = max(self._mat.shape[0], self._size + max(1024, self._size // 8))
                _write_synced(folder / files["vectors"], self._stored, self._size, rows)
            manifest = {
                "slots": self._uuids[: self._size],
                "params": self._params_key(),
                "files": files,
            }
            if seq is not None and "vectors" in files:
                manifest["seq"] = int(seq)
            tmp = folder / f"{kind}.json.tmp"
            tmp.write_text(json.dumps(manifest))
            tmp.replace(folder / f"{kind}.json")
            _remove_other_saves(folder, kind, set(files.values()))
            if "vectors" in files:
                mapped = _open_rows(folder / files["vectors"], self._size, self.dim)
                if mapped is not None:
                    self._map_rows(mapped)
            return True

    def _map_rows(self, mapped: np.ndarray) -> None:
        """Serve the float16 vectors from a saved file, memory-mapped copy-on-write (hold the
        lock): rows are read from the file with pread (:class:`_FileRows`), a vector written
        later goes to private memory and never to the file. The other per-slot arrays grow
        to the file's spare rows."""
        if self._alive.shape[0] < mapped.shape[0]:
            self._grow_slots(mapped.shape[0])
        readable = isinstance(mapped, np.memmap) and hasattr(os, "preadv")  # not on Windows
        self._set_matrix(mapped, _FileRows(mapped) if readable else None)
        self._subsets.clear()
        self._subset_bytes = 0

    def _params_key(self) -> dict[str, str]:
        return {k: str(v) for k, v in self._ann_params.items()}

    def _restore(self, saved: SavedGraph, uuids, vectors, groups) -> None:
        """Lay the vectors out in the saved slots (a new uuid takes a slot a gone one left)
        and open the saved graph, then catch it up with the store: slots whose vector is not
        the one the graph holds (changed, gone, or taken by a new uuid) are removed from it,
        and the current vectors of those and of new slots added. A graph built with other
        parameters, unreadable, or further behind than a rebuild would be, is built anew.
        With the graph, the vectors saved beside it are memory-mapped and only the slots
        whose vector differs from the saved one are written (to private memory)."""
        slots, size, _ = _slots_for(saved.layout, uuids)
        with self._lock:
            self._lay_out(slots, size, uuids, groups)
            unit = unit_rows(vectors, self.dim)
            self._prints[slots] = row_prints(unit)
            at = np.zeros(size, dtype=np.int64)  # slot -> row of ``unit``
            at[slots] = np.arange(slots.size)
            graph, stale, redo = self._caught_up(saved, lambda s: unit[at[s]])
            mapped = None
            if graph is not None and self.half_under_graph and saved.vectors is not None:
                mapped = _open_rows(saved.vectors, size, self.dim)
            if mapped is not None:
                # the slots the graph was caught up on are those whose saved row is not the
                # current vector; copy-on-write: the file stays as saved
                self._map_rows(mapped)
                self._put(redo, unit[at[redo]])
            else:
                self._set_matrix(np.zeros((self._alive.shape[0], self.dim), dtype=np.float32))
                self._mat[slots] = unit
            if graph is not None:
                self._ann, self._ann_tombstones = graph, stale
                # now, not in a thread: a search must not see float32 cosines first and
                # float16 ones later (results are the same before and after a restart)
                self._set_half(self.half_under_graph)
            elif len(self._slot) >= self.ann_threshold:
                self._start_build()

    def _restore_changed(self, saved: SavedGraph, store: Store, kind: str, uuids, groups, seqs):
        """:meth:`_restore` for a save that records the vector write it reflects
        (``saved.seq``) and holds the vectors: only the vectors written after it, and those
        of memories it did not hold, are read from the store; every other slot's vector and
        fingerprint are the saved ones (memory-mapped). False, with nothing to keep, when the
        save cannot serve this way (then restore from every vector)."""
        from workbench.store.search import latest_vector_seq, vectors_of

        known = len(saved.layout)
        if not (self.half_under_graph and self._fits(saved, len(uuids))):
            return False
        if latest_vector_seq(store) < saved.seq:
            return False  # the database went back (restored from a copy): trust no save
        slots, size, new = _slots_for(saved.layout, uuids)
        changed = np.union1d(new, np.flatnonzero((seqs > saved.seq) | (seqs < 0)))
        if changed.size > _tombstone_limit(len(uuids)):
            return False  # a new graph is as quick: it needs every vector
        mapped = _open_rows(saved.vectors, size, self.dim)
        if mapped is None:
            return False
        # and a few of the others, whose saved fingerprints must match the store's vectors
        # (a save beside another database than its own does not)
        others = np.setdiff1d(np.arange(len(uuids)), changed)
        checked = np.random.default_rng(len(uuids)).permutation(others)[:SPOT_CHECKS]
        wanted = [uuids[i] for i in np.concatenate([changed, checked]).tolist()]
        got, matrix = vectors_of(store, kind, wanted)
        if len(got) != len(wanted):
            return False  # written meanwhile: read them all
        unit = unit_rows(matrix[positions_in(wanted, got)], self.dim)
        unit, spot = unit[: changed.size], unit[changed.size :]
        if not np.array_equal(row_prints(spot), saved.prints[slots[checked]]):
            return False
        with self._lock:
            self._lay_out(slots, size, uuids, groups)
            held = slots < known
            self._prints[slots[held]] = saved.prints[slots[held]]
            self._prints[slots[changed]] = row_prints(unit)
            at = np.full(size, -1, dtype=np.int64)  # slot -> row of ``unit``
            at[slots[changed]] = np.arange(changed.size)

            def rows_at(s: np.ndarray) -> np.ndarray:
                if (at[s] < 0).any():  # only a changed slot's print differs from the save
                    raise AssertionError("a slot whose vector was not read")
                return unit[at[s]]

            graph, stale, redo = self._caught_up(saved, rows_at)
            if graph is None:
                return False
            self._map_rows(mapped)
            self._put(redo, rows_at(redo))
            self._ann, self._ann_tombstones = graph, stale
            self._set_half(True)
        return True

    def _lay_out(self, slots: np.ndarray, size: int, uuids: list[str], groups) -> None:
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

    def _fits(self, saved: SavedGraph, count: int) -> bool:
        """Whether a saved graph may serve ``count`` memories here: built with these
        parameters, whole, and for an index large enough to want a graph (a small one is
        searched exactly, cheaper than a graph)."""
        return (
            saved.params == self._params_key()
            and saved.prints.shape == (len(saved.layout),)
            and count >= max(1, self.ann_threshold // 2)
        )

    def _caught_up(self, saved: SavedGraph, rows_at: Callable[[np.ndarray], np.ndarray]):
        """The saved graph brought up to the laid-out vectors (``rows_at``: the current
        vectors of these slots), how many of its entries were removed, and the live slots
        whose vector is not the saved one (re-added); (None, 0, None) when it cannot or should
        not be used."""
        from usearch.index import Index

        known = len(saved.layout)
        if not self._fits(saved, len(self._slot)):
            return None, 0, None
        in_graph = np.array([u is not None for u in saved.layout], dtype=bool)
        alive = self._alive[: self._size]
        current = self._prints[:known]
        stale = np.flatnonzero(in_graph & ((current != saved.prints) | ~alive[:known]))
        graphed = np.zeros(self._size, dtype=bool)
        graphed[:known] = in_graph
        fresh = np.flatnonzero(alive & ~graphed)
        redo = np.union1d(stale[alive[stale]], fresh)
        if stale.size + fresh.size > _tombstone_limit(len(self._slot)):
            return None, 0, None  # a new graph is as quick and leaves no tombstones
        try:
            graph = Index.restore(str(saved.graph))
        except Exception:  # unreadable file: rebuild
            return None, 0, None
        if graph is None or len(graph) != int(in_graph.sum()):
            return None, 0, None
        if stale.size:
            graph.remove(stale)
        if redo.size:
            graph.add(redo, rows_at(redo), threads=self._build_threads)
        return graph, int(stale.size), redo

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait for a background graph build; True when none is running any more."""
        builder = self._builder
        if builder is not None and builder is not threading.current_thread():
            builder.join(timeout)
        return self._builder is None

    # --- searching ----------------------------------------------------------------------
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
        q = unit_rows(query, self.dim)[0]
        with self._lock:
            if not self._slot:
                return []
            codes = self._codes(group_ids)
            if codes is not None and not codes:
                return []
            if isinstance(allowed, set | frozenset):
                slots = self._slots_of(allowed, codes)
                return self._exact_on(q, slots, k, None)
            if self._ann is None:
                return self._exact(q, k, codes, allowed)
            kept = self._count(codes)
            if kept <= self.exact_subset_limit and kept < len(self._slot):
                return self._exact_in(q, k, codes, allowed)
            return self._ann_search(q, k, codes, allowed, kept)

    def similarity(self, query: np.ndarray, uuids: Sequence[str]) -> np.ndarray:
        """Exact cosine of ``query`` with each uuid's vector (NaN when unknown)."""
        q = unit_rows(query, self.dim)[0]
        with self._lock:
            slots = np.array([self._slot.get(u, -1) for u in uuids], dtype=np.int64)
            out = np.full(len(slots), np.nan, dtype=np.float32)
            known = slots >= 0
            if known.any():
                out[known] = self._rows(slots[known]) @ q
            return out

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
            return groups == codes[0]
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

    def _exact(self, q, k, codes, allowed) -> list[tuple[str, float]]:
        n_kept = self._count(codes)
        if codes is not None and n_kept < self._size // 2:
            return self._exact_in(q, k, codes, allowed)
        with one_blas_thread():
            scores = self._rows(slice(0, self._size)) @ q  # float32 here (no graph): a view
        if n_kept < self._size:
            scores[~self._group_mask(codes)] = -np.inf
        return self._top(scores, None, k, allowed, n_kept)

    def _exact_in(self, q, k, codes: list[int], allowed) -> list[tuple[str, float]]:
        """Exact search within groups, on a cached contiguous copy of their vectors."""
        key = tuple(sorted(codes))
        cached = self._subsets.get(key)
        if cached is None:
            slots = self._slots_in(codes)
            cached = (slots, self._rows(slots))
            if cached[1].nbytes <= SUBSET_CACHE_BYTES // 4:
                self._subsets[key] = cached
                self._subset_bytes += cached[1].nbytes
                while self._subset_bytes > SUBSET_CACHE_BYTES:
                    _, (_, old) = self._subsets.popitem(last=False)
                    self._subset_bytes -= old.nbytes
        else:
            self._subsets.move_to_end(key)
        return self._exact_on(q, cached[0], k, allowed, rows=cached[1])

    def _forget_subsets(self, code: int) -> None:
        """Drop the cached subsets that include group ``code`` (its rows changed)."""
        if self._subsets:
            for key in [key for key in self._subsets if code in key]:
                self._subset_bytes -= self._subsets.pop(key)[1].nbytes

    def _exact_on(
        self, q, slots: np.ndarray, k, allowed, rows: np.ndarray | None = None
    ) -> list[tuple[str, float]]:
        """Exact search over ``slots`` (``rows``: their vectors when already gathered)."""
        if slots.size == 0:
            return []
        with one_blas_thread():
            scores = (self._rows(slots) if rows is None else rows) @ q
        return self._top(scores, slots, k, allowed, int(slots.size))

    def _top(self, scores, slots, k, allowed, n_valid) -> list[tuple[str, float]]:
        """Best ``k`` of ``scores`` (positions map through ``slots``), honouring a predicate."""
        want = k if allowed is None else min(n_valid, max(4 * k, 32))
        while True:
            order = top_positions(scores, min(want, n_valid))
            hits = self._accept(order, scores, slots, allowed, k)
            if len(hits) >= k or want >= n_valid:
                return hits
            want *= 4

    def _accept(self, order, scores, slots, allowed, k) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        for pos in order:
            score = float(scores[pos])
            if score == -np.inf:
                break
            uuid = self._uuids[int(slots[pos] if slots is not None else pos)]
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

    def _ann_search(self, q, k, codes, allowed, kept) -> list[tuple[str, float]]:
        total = len(self._slot)
        want = max(self.ann_candidates, 4 * k)
        if kept < total:  # oversample by the inverse selectivity of the group filter
            want = math.ceil(want * total / max(kept, 1))
        codes_arr = None if codes is None else np.asarray(codes, dtype=np.int32)
        for _attempt in range(3):
            count = min(want, total)
            self._ann.expansion_search = max(self.ef_for(total), count)
            keys = np.asarray(self._ann.search(q, count, threads=1).keys, dtype=np.int64)
            if codes_arr is not None and keys.size:
                keys = keys[np.isin(self._group[keys], codes_arr)]
            scores = self._rows(keys) @ q  # re-rank with the exact cosine
            hits = self._top(scores, keys, k, allowed, int(keys.size))
            if len(hits) >= k or count >= total:
                return hits
            want *= 4
        return self._exact_on(q, self._slots_in(codes), k, allowed)


@dataclass(frozen=True)
class SavedGraph:
    """What :meth:`VectorIndex.save_graph` wrote: the slots' uuids, their vectors'
    fingerprints, the graph's parameters and its file."""

    layout: list[str | None]
    prints: np.ndarray
    params: dict[str, str]
    graph: Path
    vectors: Path | None = None  # the float16 vectors, when saved (older saves: none)
    seq: int | None = None  # the newest vector write it reflects (older saves: unknown)


def load_index(
    store: Store,
    kind: str,
    ann_threshold: int = 50_000,
    graph_dir: str | Path | None = None,
    on_built: Callable[[VectorIndex], None] | None = None,
    **options,
) -> VectorIndex:
    """A :class:`VectorIndex` holding every stored vector of ``kind`` ("entity" or "fact")
    whose memory row exists (the store is the source of truth).

    With ``graph_dir``, an HNSW graph saved there by :meth:`VectorIndex.save_graph` is opened
    and caught up with the stored vectors (those changed, deleted or added since it was saved:
    a crash after a commit loses nothing and brings nothing back); a graph too far behind, or
    built with other parameters, is rebuilt in the background."""
    from workbench.store.search import load_vector_seqs, load_vectors

    if kind not in KINDS:
        raise InvalidInput(f"unknown memory kind {kind!r}; expected one of {', '.join(KINDS)}")

    def new_index() -> VectorIndex:
        index = VectorIndex(store.dim, ann_threshold=ann_threshold, **options)
        if on_built is not None:  # before anything can start a build
            index.on_built = functools.partial(on_built, index=index)
        return index

    index = new_index()
    saved = _saved_graph(graph_dir, kind) if graph_dir else None
    if saved is not None and saved.seq is not None:
        uuids, groups, seqs = load_vector_seqs(store, kind)
        if uuids and index._restore_changed(saved, store, kind, uuids, groups, seqs):
            return index
        index = new_index()
    uuids, groups, vectors = load_vectors(store, kind)
    if saved is not None and uuids:
        index._restore(saved, uuids, vectors, groups)
    elif uuids:
        index.add(uuids, vectors, groups)
    return index


def _saved_graph(graph_dir, kind: str) -> SavedGraph | None:
    folder = Path(graph_dir)
    try:
        manifest = json.loads((folder / f"{kind}.json").read_text())
        # a save before the files were named by their save: fixed names, no vectors
        files = manifest.get("files") or {
            "graph": f"{kind}.usearch",
            "prints": f"{kind}.prints.npy",
        }
        prints = np.load(folder / files["prints"], allow_pickle=False)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    layout = manifest.get("slots")
    if not isinstance(layout, list) or not (folder / files["graph"]).is_file():
        return None
    vectors = folder / files["vectors"] if files.get("vectors") else None
    seq = manifest.get("seq")
    return SavedGraph(
        layout,
        prints,
        manifest.get("params") or {},
        folder / files["graph"],
        vectors,
        seq if isinstance(seq, int) and vectors is not None else None,
    )


def _write_synced(
    path: Path, read: Callable[[slice], np.ndarray], count: int, capacity: int | None = None
) -> None:
    """Write the ``count`` rows ``read`` gives (``read(slice)``: those rows) as an ``.npy``
    file of ``capacity`` rows (the rest zeros, left as a hole in the file) and flush it to
    disk: the manifest that names it is written after."""
    first = read(slice(0, 0))
    shape = ((capacity or count),) + first.shape[1:]
    out = np.lib.format.open_memmap(path, mode="w+", dtype=first.dtype, shape=shape)
    for start in range(0, count, 65536):
        end = min(start + 65536, count)
        out[start:end] = read(slice(start, end))
    out.flush()
    del out
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def _open_rows(path: Path, size: int, dim: int) -> np.ndarray | None:
    """The saved float16 vectors, memory-mapped copy-on-write; None when the file is missing
    or is not what the manifest says (too few rows, another width or type)."""
    try:
        mapped = np.load(path, mmap_mode="c", allow_pickle=False)
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


def _remove_other_saves(folder: Path, kind: str, keep: set[str]) -> None:
    """Delete the files of earlier saves of ``kind`` (a file still mapped stays readable
    until it is unmapped)."""
    names = [f"{kind}.usearch", f"{kind}.prints.npy"]
    names += [p.name for p in folder.glob(f"{kind}.*.usearch")]
    names += [
        p.name for p in folder.glob(f"{kind}.*.npy") if not p.name.startswith(f"{kind}.keywords")
    ]
    for name in set(names) - keep:
        try:
            (folder / name).unlink(missing_ok=True)
        except OSError:
            log.warning("could not remove %s", folder / name)


def _tombstone_limit(count: int) -> int:
    """Entries a graph of ``count`` memories may have removed (or be caught up with) before a
    new graph is built instead."""
    return max(TOMBSTONE_LIMIT, count // 4)


def _slots_for(layout: list[str | None], uuids: list[str]) -> tuple[np.ndarray, int, np.ndarray]:
    """Each uuid's slot: its saved one, else one a gone uuid left (lowest first), else a new
    one at the end; the number of slots; and the positions of the uuids not in ``layout``."""
    new = np.zeros(0, dtype=np.int64)
    if layout == uuids:  # nothing changed since the save, nor the store's order: the usual
        return np.arange(len(uuids), dtype=np.int64), len(layout), new
    slots = positions_in(uuids, layout)
    new = np.flatnonzero(slots < 0)
    if not new.size:
        return slots, len(layout), new
    used = np.zeros(len(layout), dtype=bool)
    used[slots[slots >= 0]] = True
    spare = np.flatnonzero(~used)[: new.size]
    extra = new.size - spare.size
    slots[new] = np.concatenate([spare, np.arange(len(layout), len(layout) + extra)])
    return slots, len(layout) + extra, new
