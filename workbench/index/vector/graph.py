"""The HNSW graph of a vector index: when one is built (past ``ann_threshold`` vectors, after
a bulk load, when tombstones pile up), building it in the background from the slots while exact
search serves, replaying what was written meanwhile, and keeping it in step with each write
(the rules in :mod:`workbench.index.vector.index`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from workbench.index.vector.slots import VectorSlots

__all__ = ["BUILD_CHUNK", "TOMBSTONE_LIMIT", "GraphBuild", "tombstone_limit"]

log = logging.getLogger("workbench.index.vector.index")

# vectors added to a graph being built between two looks at whether it was called off
BUILD_CHUNK = 2048

# tombstones a graph may carry (or changes it may be caught up with at open) before a new
# graph is built instead: at least this many, or a quarter of the index
TOMBSTONE_LIMIT = 10_000


def tombstone_limit(count: int) -> int:
    """Entries a graph of ``count`` memories may have removed (or be caught up with) before a
    new graph is built instead."""
    return max(TOMBSTONE_LIMIT, count // 4)


class GraphBuild:
    """The graph over a :class:`~workbench.index.vector.slots.VectorSlots` (held as its
    ``_ann``): its parameters, the build under way (at most one), and its upkeep on every
    write. Methods named "hold the lock" expect the caller to hold the slots' lock."""

    def __init__(
        self,
        slots: VectorSlots,
        ann_threshold: int,
        *,
        connectivity: int = 24,
        expansion_add: int = 96,
        ann_dtype: str = "i8",
        build_threads: int = 1,
        background_build: bool = True,
    ):
        self.slots = slots
        self.ann_threshold = max(1, int(ann_threshold))
        self._ann_params: dict[str, Any] = dict(
            connectivity=connectivity, expansion_add=expansion_add, dtype=ann_dtype
        )
        self._build_threads = build_threads
        self.background_build = background_build
        self._ann_tombstones = 0
        self._builder: threading.Thread | None = None
        self._deferring = 0  # bulk loads under way (see defer)
        self._build_gen = 0
        self._dirty: set[int] = set()  # slots changed while a graph was being built
        # called (in the builder's thread, without the lock) when a background build is done
        self.on_built: Callable[[], None] | None = None

    @property
    def uses_ann(self) -> bool:
        return self.slots._ann is not None

    @property
    def state(self) -> str:
        """``graph`` (searched through the HNSW graph), ``building`` (exact search while the
        graph is built in the background) or ``exact`` (too small for a graph, or deferred)."""
        with self.slots._lock:
            if self.slots._ann is not None:
                return "graph"
            return "building" if self._builder is not None else "exact"

    def params_key(self) -> dict[str, str]:
        """The graph's parameters as a save records them."""
        return {k: str(v) for k, v in self._ann_params.items()}

    @property
    def building(self) -> bool:
        return self._builder is not None

    # --- upkeep on writes (hold the lock) -------------------------------------------------
    def added(self, slots: np.ndarray, vecs: np.ndarray, replaced: Sequence[int]) -> None:
        """``vecs`` were written at ``slots`` (``replaced``: those that held another vector)."""
        ann = self.slots._ann
        if self._builder is not None:
            self._dirty.update(int(s) for s in slots)
        if ann is not None:
            if replaced:
                ann.remove(np.asarray(replaced, dtype=np.int64))
                self._ann_tombstones += len(replaced)
            ann.add(slots, vecs, threads=self._build_threads)
            self._maybe_compact()
        elif len(self.slots) >= self.ann_threshold and self._builder is None:
            if not self._deferring:
                self.start()

    def removed(self, slots: list[int]) -> None:
        """These slots were freed."""
        if self._builder is not None:
            self._dirty.update(slots)
        if len(self.slots) < self.ann_threshold // 2:
            self.drop()  # small again: exact search is cheaper than the graph
        elif self.slots._ann is not None:
            self.slots._ann.remove(np.asarray(slots, dtype=np.int64))
            self._ann_tombstones += len(slots)
            self._maybe_compact()

    def serve(self, graph: Any, tombstones: int) -> None:
        """Serve ``graph`` (a restored one) carrying ``tombstones`` removed entries (hold the
        lock)."""
        self.slots._ann, self._ann_tombstones = graph, tombstones

    @contextmanager
    def defer(self) -> Iterator[None]:
        """A bulk load: no graph is started while it runs (its vectors are searched exactly,
        or join a graph that already exists); one is built after it when the index is large
        enough. A build started at the threshold would replay, under the lock, every vector
        written while it ran, and hold the load up."""
        lock = self.slots._lock
        with lock:
            self._deferring += 1
        try:
            yield
        finally:
            with lock:
                self._deferring -= 1
                idle = not self._deferring and self.slots._ann is None and self._builder is None
                if idle and len(self.slots) >= self.ann_threshold:
                    self.start()

    # --- the build ------------------------------------------------------------------------
    def start(self) -> None:
        """Build the HNSW graph over the slots in use now, in a background thread unless told
        not to; exact search serves meanwhile. Changes made during the build are replayed on
        it (hold the lock)."""
        self._build_gen += 1
        gen = self._build_gen
        slots = np.flatnonzero(self.slots._alive[: self.slots._size])
        self._dirty = set()
        if not self.background_build:
            self._builder = threading.current_thread()
            self._finish(gen, self._new_graph(slots, gen))
            return
        self._builder = threading.Thread(
            target=lambda: self._finish(gen, self._new_graph(slots, gen), True),
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

        held = self.slots
        graph = Index(ndim=held.dim, metric="cos", **self._ann_params)
        for start in range(0, slots.size, BUILD_CHUNK):
            with held._lock:
                if gen != self._build_gen:
                    return None
                chunk = slots[start : start + BUILD_CHUNK]
                chunk = chunk[held._alive[chunk]]  # (one freed meanwhile: replayed as gone)
                rows = held._rows(chunk)
            if chunk.size:
                graph.add(chunk, rows, threads=self._build_threads)
        return graph

    def _finish(self, gen: int, graph: Any, notify: bool = False) -> None:
        held = self.slots
        with held._lock:
            if gen != self._build_gen or graph is None:
                return  # called off meanwhile (closed, or the index became small again)
            dirty = np.fromiter(self._dirty, dtype=np.int64, count=len(self._dirty))
            if dirty.size:
                graph.remove(dirty)
                live = dirty[held._alive[dirty]]
                if live.size:
                    graph.add(live, held._rows(live), threads=self._build_threads)
            self.serve(graph, int(dirty.size))
            held._set_half(held.half_under_graph)
            self._builder, self._dirty = None, set()
            hook = self.on_built if notify else None
        if hook is not None:
            try:
                hook()
            except Exception:  # a cache left unsaved is rebuilt or caught up at the next open
                log.exception("after a graph build")

    def drop(self) -> None:
        """Serve without a graph (hold the lock)."""
        self._build_gen += 1
        self.serve(None, 0)
        self._builder, self._dirty = None, set()
        self.slots._set_half(False)

    def _maybe_compact(self) -> None:
        if self._builder is None and self._ann_tombstones > tombstone_limit(len(self.slots)):
            self.start()  # the current graph keeps serving until the new one is ready

    def close(self, timeout: float = 60) -> None:
        """Call off a graph build under way and wait for its thread (at most one chunk): a
        build left running in native code when the process exits aborts it. The store keeps
        the vectors: the next open builds the graph again."""
        with self.slots._lock:
            builder = self._builder
            if builder is None or builder is threading.current_thread():
                return
            self._build_gen += 1
        builder.join(timeout)
        with self.slots._lock:
            if self._builder is builder:
                self._builder, self._dirty = None, set()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait for a background graph build; True when none is running any more."""
        builder = self._builder
        if builder is not None and builder is not threading.current_thread():
            builder.join(timeout)
        return self._builder is None
