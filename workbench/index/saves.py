"""Saving the live indexes beside the database, so the next open catches them up instead of
rebuilding them: the HNSW graph of each memory kind (:meth:`VectorIndex.save_graph`) and, for a
large one, its keyword index (:meth:`KeywordIndex.save`).

Where they go (:attr:`IndexSaves.folder`) is decided in one place,
``workbench.search.engine._graph_dir``: ``<database file>.search/`` by default; none for an
in-memory or read-only store; for a database server, a private folder filled from the saves
the database holds and stored back there (:mod:`workbench.index.shared_saves`). A save runs
at a clean stop, when a background graph build is done and, every ``every`` seconds while the
process runs (``SVC_KNOWLEDGE_SEARCH_SAVE_SECONDS``), for a kind whose indexes changed; it
records the newest vector write every index already holds (read between two writes, under
the publish gate), so the next open reads only the vectors written after it.

A kind is not saved again (nor stored in the database again) while its indexes hold what its
last save holds: the same newest vector write, and no change told since (:meth:`changed`),
counted from the save opened at the start or the last one written.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from workbench.index import shared_saves
from workbench.index.bm25 import KeywordIndex
from workbench.index.vectors import VectorIndex
from workbench.store import Store, saved_indexes
from workbench.store import search as sql

__all__ = ["IndexSaves", "KEYWORDS_SAVED_FROM", "SAVE_GATE_SECONDS"]

log = logging.getLogger("workbench.index.saves")

# a keyword index this large is saved beside the database at close (reopened, not rebuilt)
KEYWORDS_SAVED_FROM = 1_000
SAVE_GATE_SECONDS = 5.0  # how long a save waits for a moment between writes

# ``read()`` at a moment no write is between its commit and the indexes being told
# (:meth:`~workbench.index.publish.Publisher.between_writes`), None after ``timeout`` seconds
BetweenWrites = Callable[[Callable[[], int], float], "int | None"]


class IndexSaves:
    """The saves of one store's indexes in ``folder`` (None: nothing is saved or opened)."""

    def __init__(self, store: Store, folder: Path | None, every: float = 0.0):
        self.store = store
        self.folder = folder
        self.every = every  # seconds between periodic saves (0: none)
        self._lock = threading.Lock()  # one save of the indexes at a time
        self._changes: dict[str, int] = {}  # kind -> changes told to its indexes
        # kind -> (newest vector write, changes told) its save in the folder holds
        self._held: dict[str, tuple[int | None, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def keyword_path(self, kind: str) -> Path | None:
        return None if self.folder is None else self.folder / f"{kind}.keywords.npz"

    def open_keywords(self, uuids: list[str], texts: list[str], groups: list[str],
                      kind: str) -> KeywordIndex | None:  # fmt: skip
        """The keyword index saved for ``kind``, caught up with these documents; None when
        there is none (or it cannot serve)."""
        path = self.keyword_path(kind)
        if path is None:
            return None
        saved = KeywordIndex.open_saved(path, uuids, texts, groups)
        return None if saved is None else saved[0]

    def save(
        self,
        kind: str,
        current: Callable[[], tuple[VectorIndex | None, KeywordIndex | None]],
        between_writes: BetweenWrites,
        force: bool = False,
        periodic: bool = False,
    ) -> None:
        """Save the finished HNSW graph and the keyword index of ``kind`` (opened and caught up
        with the store at the next open); ``current()``: the indexes of ``kind`` to save,
        read once this save has its turn. Skipped when the last save holds the same (see the
        module doc), unless ``force`` (a graph just built); a ``periodic`` one on a shared
        store also when the database holds a save of the same vectors (another replica's:
        the rows changed since are caught up from the change log)."""
        if self.folder is None:
            return
        seq, changes = self._state(kind, between_writes)
        with self._lock:
            if not force and seq is not None and self._held.get(kind) == (seq, changes):
                return  # the save in the folder (and the database) holds all this already
            if periodic and seq is not None and self._stored_since(kind, seq):
                return
            vectors, keywords = current()
            if vectors is None:
                return
            path = self.keyword_path(kind)
            saved = not vectors.uses_ann  # no graph to save: the keyword index is all
            if keywords is not None and path is not None and len(keywords) >= KEYWORDS_SAVED_FROM:
                try:
                    keywords.save(path)
                except OSError:
                    log.exception("saving the %s keyword index failed (rebuilt at open)", kind)
                    saved = False
            if vectors.uses_ann:
                try:
                    saved = vectors.save_graph(self.folder, kind, seq)
                except OSError:
                    log.exception("saving the %s graph failed (rebuilt at open)", kind)
                if saved and self.store.shared:  # for every replica to start from
                    saved = shared_saves.store_save(self.store, self.folder, kind)
            if saved:
                self._held[kind] = (seq, changes)

    def _stored_since(self, kind: str, seq: int) -> bool:
        """On a shared store: whether the database holds a save of ``kind`` with every vector
        write up to ``seq`` (stored by another replica)."""
        if not self.store.shared:
            return False
        try:
            stored = saved_indexes.newest(self.store, [kind]).get(kind)
        except Exception:  # the save then fails the same way, and says so
            return False
        return stored is not None and stored >= seq

    def changed(self, kind: str) -> None:
        """The indexes of ``kind`` were told a change (saved again at the next save)."""
        self._changes[kind] = self._changes.get(kind, 0) + 1

    def start(self, save: Callable[..., None], kinds: Sequence[str]) -> None:
        """Save each kind every :attr:`every` seconds (``save(kind, periodic=True)``, skipped
        when unchanged), in a thread of its own, until :meth:`stop`."""
        if self.every <= 0 or self.folder is None or self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._periodic, args=(save, tuple(kinds)), name="workbench-index-saves",
            daemon=True,
        )  # fmt: skip
        self._thread.start()

    def stop(self) -> None:
        """Stop the periodic saves (a save under way ends first)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()

    def _periodic(self, save: Callable[..., None], kinds: tuple[str, ...]) -> None:
        while not self._stop.wait(self.every):
            for kind in kinds:
                if self._stop.is_set():
                    return
                try:
                    save(kind, periodic=True)
                except Exception:  # the next one, or the one at the stop, saves it
                    log.exception("the periodic save of the %s indexes failed", kind)

    def fetch(self, kinds: Sequence[str]) -> None:
        """On a shared store, before the first load: the newest saves the database holds,
        written into :attr:`folder` (opened and caught up as a local file's saves are)."""
        if self.store.shared and self.folder is not None:
            shared_saves.fetch_saved(self.store, self.folder, kinds)
        if self.folder is not None:  # what the saves opened hold (nothing told them yet)
            for kind in kinds:
                self._held[kind] = (saved_indexes.save_seq(self.folder, kind), 0)

    def closed(self) -> None:
        """The indexes are closed: a shared store's private folder goes (its saves are in
        the database)."""
        if self.store.shared and self.folder is not None:
            shared_saves.remove(self.folder)

    def _state(self, kind: str, between_writes: BetweenWrites) -> tuple[int | None, int]:
        """The newest vector write, every earlier one told to the indexes (what a save
        records so that the next open reads only the vectors written after it; None when it
        cannot be known now: a save without it is caught up from every vector), and the
        changes told to the indexes of ``kind`` by then (both read between two writes)."""
        told = [self._changes.get(kind, 0)]  # (read first: a change after it is saved again)

        def read() -> int:
            told[0] = self._changes.get(kind, 0)
            return sql.latest_vector_seq(self.store)

        try:
            seq = between_writes(read, SAVE_GATE_SECONDS)
        except Exception:  # a closed or failing store: the save still serves, less quickly
            log.warning("could not read the newest vector write", exc_info=True)
            seq = None
        return seq, told[0]
