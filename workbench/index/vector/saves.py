"""Saving a vector index's HNSW graph beside the database, and opening it again caught up with
the store (a cache: the store keeps the vectors). :meth:`GraphSaves.save_graph` writes the graph,
a fingerprint of each slot's vector and the float16 vectors, then the manifest that makes the
save count; :meth:`GraphSaves.restore` / :meth:`GraphSaves.restore_changed` open it and catch
it up (see :func:`workbench.index.vector.index.load_index`)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from workbench.index.arrays import (
    NPY_HEADERS,
    positions_in,
    row_prints,
    unit_rows,
)
from workbench.index.vector.file_rows import open_rows
from workbench.index.vector.graph import TOMBSTONE_LIMIT, GraphBuild, tombstone_limit
from workbench.index.vector.slots import VectorSlots

if TYPE_CHECKING:
    from workbench.store import Store

__all__ = ["SPOT_CHECKS", "TOMBSTONE_LIMIT", "GraphSaves", "SavedGraph", "saved_graph",
           "tombstone_limit"]  # fmt: skip

log = logging.getLogger("workbench.index.vector.saves")

# saved vectors a numbered restore compares with the store's, beyond those written since
SPOT_CHECKS = 256

_NO_SLOTS = np.zeros(0, dtype=np.int64)

# rows a save reads at a time (under the index's lock: a few MB, about a millisecond)
WRITE_ROWS = 8192


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


class GraphSaves:
    """The saving and restoring of a :class:`~workbench.index.vector.index.VectorIndex`'s graph:
    of its slots and the graph its build serves."""

    def __init__(self, slots: VectorSlots, graph: GraphBuild):
        self.slots = slots
        self.graph = graph
        self._save_lock = threading.Lock()  # one save of the index at a time

    def save_graph(
        self,
        graph_dir: str | Path,
        kind: str,
        seq: int | None = None,
        extra_files: dict[str, str] | None = None,
    ) -> bool:
        """Save the HNSW graph, a fingerprint of each slot's vector and, while the vectors are
        held as float16, the vectors themselves (with spare rows for new memories), then the
        manifest (the slot layout and the names of those files): the manifest, replaced last,
        is what makes a save count, so a crash part way leaves the previous one whole. The
        vectors are then served from the saved file, memory-mapped (see :meth:`_map_rows`).
        ``seq``: the number of the newest vector write this index holds, every earlier one
        included (:func:`~workbench.store.search.latest_vector_seq`, read while no write was
        between its commit and the index being told); the next open then reads only the
        vectors written after it. ``extra_files``: more files of this save, already written
        in ``graph_dir`` (the row snapshot), named in the manifest with the others. False when
        there is no finished graph to save.

        Writes and searches are not held up while the files are written: under the lock it
        copies only the graph (in memory), the fingerprints and the layout; the vectors are
        read a few thousand rows at a time (a row written meanwhile may be saved newer than
        its fingerprint, which the next open catches up as any vector written after ``seq``),
        and the slots written during the save are put again once the file is mapped."""
        folder = Path(graph_dir)
        with self._save_lock:  # one save of this index at a time
            with self.slots._lock:
                if self.slots._ann is None or self.graph.building:
                    return False
                size, half = self.slots._size, self.slots._mat.dtype == np.float16
                graph = self.slots._ann.copy()
                prints = self.slots._prints[:size].copy()
                layout = self.slots._uuids[:size]
                capacity = max(self.slots._mat.shape[0], size + max(1024, size // 8))
                params = self.graph.params_key()
                self.slots._written = set()
            try:
                return self._write_save(folder, kind, seq, graph, prints, layout, capacity,
                                        params, half, extra_files or {})  # fmt: skip
            finally:
                with self.slots._lock:
                    self.slots._written = None

    def _write_save(
        self, folder: Path, kind: str, seq: int | None, graph: Any, prints: np.ndarray,
        layout: list[str | None], capacity: int, params: dict[str, str], half: bool,
        extra_files: dict[str, str],
    ) -> bool:  # fmt: skip
        """:meth:`save_graph`'s files, written outside the lock."""
        folder.mkdir(parents=True, exist_ok=True)
        save = f"{kind}.{uuidlib.uuid4().hex[:12]}"
        files = {"graph": f"{save}.usearch", "prints": f"{save}.prints.npy"}
        files.update(extra_files)
        graph.save(str(folder / files["graph"]))
        del graph
        fsync_file(folder / files["graph"])
        write_synced(folder / files["prints"], prints.__getitem__, len(layout))
        if half:
            files["vectors"] = f"{save}.vectors.npy"
            write_synced(folder / files["vectors"], self._stored_now, len(layout), capacity)
        manifest: dict[str, object] = {"slots": layout, "params": params, "files": files}
        manifest["sha256"] = {
            role: file_sha256(folder / name) for role, name in files.items() if role in CHECKED
        }
        if seq is not None and "vectors" in files:
            manifest["seq"] = int(seq)
        tmp = folder / f"{kind}.json.tmp"
        tmp.write_text(json.dumps(manifest))
        tmp.replace(folder / f"{kind}.json")
        remove_other_saves(folder, kind, set(files.values()))
        if "vectors" in files:
            mapped = open_rows(folder / files["vectors"], len(layout), self.slots.dim)
            with self.slots._lock:
                self._serve_saved(mapped)
        return True

    def _stored_now(self, slots: slice) -> np.ndarray:
        """The vectors at ``slots`` as held now (a copy, read under the lock)."""
        with self.slots._lock:
            return np.array(self.slots._stored(slots), dtype=np.float16)

    def _serve_saved(self, mapped: np.ndarray | None) -> None:
        """Serve the vectors from the file just saved (hold the lock): the slots written since
        the save began (:attr:`_written`) are put again from the vectors held now. Not when
        they are no longer float16 (the graph was dropped) or outgrew the file."""
        if mapped is None or self.slots._mat.dtype != np.float16 or self.slots._written is None:
            return
        if mapped.shape[0] < max(self.slots._mat.shape[0], self.slots._size):
            return  # grown past the file's spare rows meanwhile: the next save maps
        written = np.fromiter(self.slots._written, dtype=np.int64, count=len(self.slots._written))
        written = np.sort(written[written < self.slots._size])
        rows = self.slots._stored(written)
        self.slots._map_rows(mapped)
        if written.size:
            self.slots._put(written, rows)

    def restore(
        self, saved: SavedGraph, uuids: list[str], vectors: np.ndarray, groups: list[str]
    ) -> None:
        """Lay the vectors out in the saved slots (a new uuid takes a slot a gone one left)
        and open the saved graph, then catch it up with the store: slots whose vector is not
        the one the graph holds (changed, gone, or taken by a new uuid) are removed from it,
        and the current vectors of those and of new slots added. A graph built with other
        parameters, unreadable, or further behind than a rebuild would be, is built anew.
        With the graph, the vectors saved beside it are memory-mapped and only the slots
        whose vector differs from the saved one are written (to private memory)."""
        slots, size, _ = slots_for(saved.layout, uuids)
        with self.slots._lock:
            self.slots._lay_out(slots, size, uuids, groups)
            unit = unit_rows(vectors, self.slots.dim)
            self.slots._prints[slots] = row_prints(unit)
            at = np.zeros(size, dtype=np.int64)  # slot -> row of ``unit``
            at[slots] = np.arange(slots.size)
            graph, stale, redo = self._caught_up(saved, lambda s: unit[at[s]])
            mapped = None
            if graph is not None and self.slots.half_under_graph and saved.vectors is not None:
                mapped = open_rows(saved.vectors, size, self.slots.dim)
            if mapped is not None:
                # the slots the graph was caught up on are those whose saved row is not the
                # current vector; copy-on-write: the file stays as saved
                self.slots._map_rows(mapped)
                self.slots._put(redo, unit[at[redo]])
            else:
                self.slots._set_matrix(
                    np.zeros((self.slots._alive.shape[0], self.slots.dim), dtype=np.float32)
                )
                self.slots._mat[slots] = unit
            if graph is not None:
                self.graph.serve(graph, stale)
                # now, not in a thread: a search must not see float32 cosines first and
                # float16 ones later (results are the same before and after a restart)
                self.slots._set_half(self.slots.half_under_graph)
            elif len(self.slots._slot) >= self.graph.ann_threshold:
                self.graph.start()

    def restore_changed(
        self, saved: SavedGraph, store: Store, kind: str, uuids: list[str], groups: list[str],
        seqs: np.ndarray, spot_checks: int | None = None,
    ) -> bool:  # fmt: skip
        """:meth:`restore` for a save that records the vector write it reflects
        (``saved.seq``) and holds the vectors: only the vectors written after it, and those
        of memories it did not hold, are read from the store; every other slot's vector and
        fingerprint are the saved ones (memory-mapped). False, with nothing to keep, when the
        save cannot serve this way (then restore from every vector). ``spot_checks``: saved
        vectors compared with the store's beyond those (:data:`SPOT_CHECKS` by default; none
        when the save is the store's own, caught up by the caller from where it was
        stamped)."""
        from workbench.store.search import latest_vector_seq, vectors_of

        known = len(saved.layout)
        if saved.seq is None or saved.vectors is None:
            return False
        if not (self.slots.half_under_graph and self._fits(saved, len(uuids))):
            return False
        if latest_vector_seq(store) < saved.seq:
            return False  # the database went back (restored from a copy): trust no save
        slots, size, new = slots_for(saved.layout, uuids)
        changed = np.union1d(new, np.flatnonzero((seqs > saved.seq) | (seqs < 0)))
        if changed.size > tombstone_limit(len(uuids)):
            return False  # a new graph is as quick: it needs every vector
        mapped = open_rows(saved.vectors, size, self.slots.dim)
        if mapped is None:
            return False
        # and a few of the others, whose saved fingerprints must match the store's vectors
        # (a save beside another database than its own does not)
        others = np.setdiff1d(np.arange(len(uuids)), changed)
        checks = SPOT_CHECKS if spot_checks is None else spot_checks
        checked = np.random.default_rng(len(uuids)).permutation(others)[:checks]
        wanted = [uuids[i] for i in np.concatenate([changed, checked]).tolist()]
        got, matrix = vectors_of(store, kind, wanted)
        if len(got) != len(wanted):
            return False  # written meanwhile: read them all
        unit = unit_rows(matrix[positions_in(wanted, got)], self.slots.dim)
        unit, spot = unit[: changed.size], unit[changed.size :]
        if not np.array_equal(row_prints(spot), saved.prints[slots[checked]]):
            return False
        with self.slots._lock:
            self.slots._lay_out(slots, size, uuids, groups)
            held = slots < known
            self.slots._prints[slots[held]] = saved.prints[slots[held]]
            self.slots._prints[slots[changed]] = row_prints(unit)
            at = np.full(size, -1, dtype=np.int64)  # slot -> row of ``unit``
            at[slots[changed]] = np.arange(changed.size)

            def rows_at(s: np.ndarray) -> np.ndarray:
                if (at[s] < 0).any():  # only a changed slot's print differs from the save
                    raise AssertionError("a slot whose vector was not read")
                picked: np.ndarray = unit[at[s]]
                return picked

            graph, stale, redo = self._caught_up(saved, rows_at)
            if graph is None:
                return False
            self.slots._map_rows(mapped)
            self.slots._put(redo, rows_at(redo))
            self.graph.serve(graph, stale)
            self.slots._set_half(True)
        return True

    def _fits(self, saved: SavedGraph, count: int) -> bool:
        """Whether a saved graph may serve ``count`` memories here: built with these
        parameters, whole, and for an index large enough to want a graph (a small one is
        searched exactly, cheaper than a graph)."""
        return (
            saved.params == self.graph.params_key()
            and saved.prints.shape == (len(saved.layout),)
            and count >= max(1, self.graph.ann_threshold // 2)
        )

    def _caught_up(
        self, saved: SavedGraph, rows_at: Callable[[np.ndarray], np.ndarray]
    ) -> tuple[Any, int, np.ndarray]:
        """The saved graph brought up to the laid-out vectors (``rows_at``: the current
        vectors of these slots), how many of its entries were removed, and the live slots
        whose vector is not the saved one (re-added); (None, 0, None) when it cannot or should
        not be used."""
        from usearch.index import Index

        known = len(saved.layout)
        if not self._fits(saved, len(self.slots._slot)):
            return None, 0, _NO_SLOTS
        in_graph = np.array([u is not None for u in saved.layout], dtype=bool)
        alive = self.slots._alive[: self.slots._size]
        current = self.slots._prints[:known]
        stale = np.flatnonzero(in_graph & ((current != saved.prints) | ~alive[:known]))
        graphed = np.zeros(self.slots._size, dtype=bool)
        graphed[:known] = in_graph
        fresh = np.flatnonzero(alive & ~graphed)
        redo = np.union1d(stale[alive[stale]], fresh)
        if stale.size + fresh.size > tombstone_limit(len(self.slots._slot)):
            return None, 0, _NO_SLOTS  # a new graph is as quick and leaves no tombstones
        try:
            graph = Index.restore(str(saved.graph))
        except Exception:  # unreadable file: rebuild
            return None, 0, _NO_SLOTS
        if graph is None or len(graph) != int(in_graph.sum()):
            return None, 0, _NO_SLOTS
        if stale.size:
            graph.remove(stale)
        if redo.size:
            graph.add(redo, rows_at(redo), threads=self.graph._build_threads)
        return graph, int(stale.size), redo


# the files of a save its manifest holds a checksum of (the keyword index's manifest holds
# its own, and may be rewritten by a save of the keywords alone)
CHECKED = ("graph", "prints", "vectors", "rows")


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def unverified(graph_dir: str | Path, kind: str) -> str | None:
    """Which file of the save of ``kind`` in ``graph_dir`` is not as saved (its checksum
    differs, or the manifest holds none: a save from before checksums, or edited); None when
    every one is, or there is no save."""
    folder = Path(graph_dir)
    try:
        manifest = json.loads((folder / f"{kind}.json").read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return "manifest"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    sums = manifest.get("sha256") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not isinstance(sums, dict):
        return "manifest"
    for role, name in files.items():
        if role not in CHECKED:
            continue
        try:
            if sums.get(role) != file_sha256(folder / str(name)):
                return str(role)
        except OSError:
            return str(role)
    return None


def saved_graph(graph_dir: str | Path, kind: str) -> SavedGraph | None:
    """What the manifest of ``kind`` in ``graph_dir`` names; None when it is missing or
    unreadable."""
    folder = Path(graph_dir)
    try:
        manifest = json.loads((folder / f"{kind}.json").read_text())
        # a save before the files were named by their save: fixed names, no vectors
        files = manifest.get("files") or {
            "graph": f"{kind}.usearch",
            "prints": f"{kind}.prints.npy",
        }
        with NPY_HEADERS:
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


def write_synced(
    path: Path, read: Callable[[slice], np.ndarray], count: int, capacity: int | None = None
) -> None:
    """Write the ``count`` rows ``read`` gives (``read(slice)``: those rows) as an ``.npy``
    file of ``capacity`` rows (the rest zeros, left as a hole in the file) and flush it to
    disk: the manifest that names it is written after."""
    first = read(slice(0, 0))
    shape = ((capacity or count),) + first.shape[1:]
    with NPY_HEADERS:
        out = np.lib.format.open_memmap(path, mode="w+", dtype=first.dtype, shape=shape)
    for start in range(0, count, WRITE_ROWS):
        end = min(start + WRITE_ROWS, count)
        out[start:end] = read(slice(start, end))
    out.flush()
    del out
    fsync_file(path)


def fsync_file(path: Path) -> None:
    """Flush the file to disk (a manifest that names it is written after)."""
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def remove_other_saves(folder: Path, kind: str, keep: set[str]) -> None:
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


def slots_for(layout: list[str | None], uuids: list[str]) -> tuple[np.ndarray, int, np.ndarray]:
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
