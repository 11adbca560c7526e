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
  (:class:`FileRows`), not through the mapping: a page read through a mapping also maps the
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
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from workbench.errors import InvalidInput
from workbench.index.vector_math import (
    row_prints,
    unit_rows,
)
from workbench.index.vector_saves import GraphSaves, saved_graph, tombstone_limit
from workbench.index.vector_search import Allowed, VectorSearch

if TYPE_CHECKING:
    from workbench.store import Store

__all__ = ["Allowed", "KINDS", "VectorIndex", "load_index"]

log = logging.getLogger("workbench.index.vectors")

# vectors added to a graph being built between two looks at whether it was called off
BUILD_CHUNK = 2048

KINDS = ("entity", "fact", "passage")


class VectorIndex(VectorSearch, GraphSaves):
    """Exact-then-approximate cosine index over unit vectors, keyed by uuid: its slots
    (:class:`~workbench.index.vector_slots.VectorSlots`), searches
    (:class:`~workbench.index.vector_search.VectorSearch`) and saves
    (:class:`~workbench.index.vector_saves.GraphSaves`); here the writes and the HNSW graph's
    build in the background."""

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
        super().__init__(dim, half_under_graph)
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
        self._ann_tombstones = 0
        self._builder = None
        self._deferring = 0  # bulk loads under way (see defer_graph)
        self._build_gen = 0
        self._dirty: set[int] = set()  # slots changed while a graph was being built
        self._save_lock = threading.Lock()
        # called (in the builder's thread, without the lock) when a background build is done
        self.on_built: Callable[[], None] | None = None

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

    def _new_graph(self, slots: np.ndarray, gen: int) -> Any:
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

    def _finish_build(self, gen: int, graph: Any, notify: bool = False) -> None:
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

    def _maybe_compact_ann(self) -> None:
        if self._builder is None and self._ann_tombstones > tombstone_limit(len(self._slot)):
            self._start_build()  # the current graph keeps serving until the new one is ready

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait for a background graph build; True when none is running any more."""
        builder = self._builder
        if builder is not None and builder is not threading.current_thread():
            builder.join(timeout)
        return self._builder is None


def load_index(
    store: Store,
    kind: str,
    ann_threshold: int = 50_000,
    graph_dir: str | Path | None = None,
    on_built: Callable[..., None] | None = None,
    held: Callable[[str], str | None] | None = None,
    **options: Any,
) -> VectorIndex:
    """A :class:`VectorIndex` holding every stored vector of ``kind`` ("entity" or "fact")
    whose memory row exists (the store is the source of truth).

    With ``graph_dir``, an HNSW graph saved there by :meth:`VectorIndex.save_graph` is opened
    and caught up with the stored vectors (those changed, deleted or added since it was saved:
    a crash after a commit loses nothing and brings nothing back); a graph too far behind, or
    built with other parameters, is rebuilt in the background.

    ``held``: the group of each memory the store held when the save was made (None for one
    it did not), when the caller catches the index up with every vector written since itself
    (a replica from its change log, started where the save was stamped): the saved slots are
    then taken as the store's vectors, without reading each memory's number."""
    from workbench.store.search import load_vector_seqs, load_vectors

    if kind not in KINDS:
        raise InvalidInput(f"unknown memory kind {kind!r}; expected one of {', '.join(KINDS)}")

    def new_index() -> VectorIndex:
        index = VectorIndex(store.dim, ann_threshold=ann_threshold, **options)
        if on_built is not None:  # before anything can start a build
            index.on_built = functools.partial(on_built, index=index)
        return index

    index = new_index()
    saved = saved_graph(graph_dir, kind) if graph_dir else None
    if saved is not None and saved.seq is not None and held is not None:
        uuids, groups = _held(saved.layout, held)
        seqs = np.zeros(len(uuids), dtype=np.int64)  # none after the save: the caller's log
        if uuids and index._restore_changed(saved, store, kind, uuids, groups, seqs, 0):
            return index
        index = new_index()
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


def _held(
    layout: list[str | None], held: Callable[[str], str | None]
) -> tuple[list[str], list[str]]:
    """The uuids of a saved layout whose memory the store held, and their groups."""
    uuids, groups = [], []
    for uuid in layout:
        group = None if uuid is None else held(uuid)
        if group is not None:
            uuids.append(cast(str, uuid))
            groups.append(group)
    return uuids, groups
