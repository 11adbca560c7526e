"""An in-process vector index for one memory kind ("entity", "fact" or "passage").

DuckDB (``entity_embeddings`` / ``fact_embeddings``) is the source of truth; this index is a
cache loaded at open (:func:`load_index`) and kept in step by the search engine's
``on_upsert`` / ``on_delete``. Its parts, each held by the index: the slots
(``slots``), the graph's build (``graph``), searches (``search``) and saves (``saves``).

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
  Once saved (:meth:`GraphSaves.save_graph`), the float16 matrix is served from the saved
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
are replayed on it when it is ready. :meth:`GraphSaves.save_graph` writes the graph with its
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
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from workbench.errors import InvalidInput
from workbench.index.arrays import (
    row_prints,
    unit_rows,
)
from workbench.index.vector.graph import GraphBuild
from workbench.index.vector.saves import GraphSaves, saved_graph
from workbench.index.vector.search import Allowed, VectorSearch
from workbench.index.vector.slots import VectorSlots

if TYPE_CHECKING:
    from workbench.store import Store

__all__ = ["Allowed", "KINDS", "VectorIndex", "load_index"]

log = logging.getLogger("workbench.index.vector.index")

KINDS = ("entity", "fact", "passage")


class VectorIndex:
    """Exact-then-approximate cosine index over unit vectors, keyed by uuid. It holds its
    parts: the slots (:attr:`slots`, a :class:`~workbench.index.vector.slots.VectorSlots`),
    the HNSW graph's build (:attr:`graph`, a
    :class:`~workbench.index.vector.graph.GraphBuild`), the searches (:attr:`searches`, a
    :class:`~workbench.index.vector.search.VectorSearch`) and the saves (:attr:`saves`, a
    :class:`~workbench.index.vector.saves.GraphSaves`); here the writes, which touch the
    slots and the graph together."""

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
        self.slots = VectorSlots(dim, half_under_graph)
        self.dim = dim
        self.graph = GraphBuild(
            self.slots, ann_threshold, connectivity=connectivity, expansion_add=expansion_add,
            ann_dtype=ann_dtype, build_threads=build_threads, background_build=background_build,
        )  # fmt: skip
        self.searches = VectorSearch(
            self.slots, ef_search=ef_search, ef_reference_size=ef_reference_size,
            ann_candidates=ann_candidates, exact_subset_limit=exact_subset_limit,
        )  # fmt: skip
        self.saves = GraphSaves(self.slots, self.graph)

    # --- what it holds --------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.slots)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self.slots

    def groups(self) -> set[str]:
        """The group ids that hold at least one vector."""
        return self.slots.groups()

    def uuids(self) -> list[str]:
        return self.slots.uuids()

    def vector(self, uuid: str) -> np.ndarray | None:
        return self.slots.vector(uuid)

    @property
    def state(self) -> str:
        """``graph``, ``building`` or ``exact`` (see :attr:`GraphBuild.state`)."""
        return self.graph.state

    @property
    def uses_ann(self) -> bool:
        return self.graph.uses_ann

    # --- searching ------------------------------------------------------------------------
    def search(
        self,
        query: np.ndarray,
        k: int,
        group_ids: Sequence[str] | None = None,
        allowed: Allowed = None,
    ) -> list[tuple[str, float]]:
        """The ``k`` nearest uuids by cosine, best first (see :meth:`VectorSearch.search`)."""
        return self.searches.search(query, k, group_ids, allowed)

    def similarity(self, query: np.ndarray, uuids: Sequence[str]) -> np.ndarray:
        """Exact cosine of ``query`` with each uuid's vector (NaN when unknown)."""
        return self.searches.similarity(query, uuids)

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
        held = self.slots
        with held._lock:
            replaced = [held._slot[u] for u in uuids if u in held._slot]
            held._reserve(len(uuids) - len(replaced))
            slots = np.fromiter(
                (held._claim(u, g) for u, g in zip(uuids, group_ids)),
                dtype=np.int64,
                count=len(uuids),
            )
            held._put(slots, vecs)
            held._prints[slots] = row_prints(vecs)
            self.graph.added(slots, vecs, replaced)

    def remove(self, uuids: Sequence[str]) -> None:
        """Forget these uuids (unknown ones are ignored)."""
        held = self.slots
        with held._lock:
            slots = [held._release(u) for u in uuids if u in held._slot]
            if slots:
                self.graph.removed(slots)

    def defer_graph(self) -> AbstractContextManager[None]:
        """A bulk load: no graph is started while it runs (see :meth:`GraphBuild.defer`)."""
        return self.graph.defer()

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Wait for a background graph build; True when none is running any more."""
        return self.graph.wait_ready(timeout)

    def close(self, timeout: float = 60) -> None:
        """Call off a graph build under way and wait for its thread (see
        :meth:`GraphBuild.close`)."""
        self.graph.close(timeout)


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
            index.graph.on_built = functools.partial(on_built, index=index)
        return index

    index = new_index()
    saved = saved_graph(graph_dir, kind) if graph_dir else None
    if saved is not None and saved.seq is not None and held is not None:
        uuids, groups = _held(saved.layout, held)
        seqs = np.zeros(len(uuids), dtype=np.int64)  # none after the save: the caller's log
        if uuids and index.saves.restore_changed(saved, store, kind, uuids, groups, seqs, 0):
            return index
        index = new_index()
    if saved is not None and saved.seq is not None:
        uuids, groups, seqs = load_vector_seqs(store, kind)
        if uuids and index.saves.restore_changed(saved, store, kind, uuids, groups, seqs):
            return index
        index = new_index()
    uuids, groups, vectors = load_vectors(store, kind)
    if saved is not None and uuids:
        index.saves.restore(saved, uuids, vectors, groups)
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
