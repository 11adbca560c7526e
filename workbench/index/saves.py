"""Saving the live indexes beside the database, so the next open catches them up instead of
rebuilding them: the HNSW graph of each memory kind (:meth:`VectorIndex.save_graph`) and, for a
large one, its keyword index (:meth:`KeywordIndex.save`).

Where they go (:attr:`IndexSaves.folder`) is decided in one place,
``workbench.search.engine._graph_dir``: ``<database file>.search/`` by default; none for an
in-memory or read-only store; for a database server, a private folder filled from the saves
the database holds and stored back there (:mod:`workbench.index.shared_saves`). A save runs
at a clean stop and when a background graph build is done;
it records the newest vector write every index already holds (read between two writes, under
the publish gate), so the next open reads only the vectors written after it.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from workbench.index import shared_saves
from workbench.index.bm25 import KeywordIndex
from workbench.index.vectors import VectorIndex
from workbench.store import Store
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

    def __init__(self, store: Store, folder: Path | None):
        self.store = store
        self.folder = folder
        self._lock = threading.Lock()  # one save of the indexes at a time

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
    ) -> None:
        """Save the finished HNSW graph and the keyword index of ``kind`` (opened and caught up
        with the store at the next open); ``current()``: the indexes of ``kind`` to save,
        read once this save has its turn."""
        if self.folder is None:
            return
        seq = self._vector_seq(between_writes)
        with self._lock:
            vectors, keywords = current()
            if vectors is None:
                return
            path = self.keyword_path(kind)
            if keywords is not None and path is not None and len(keywords) >= KEYWORDS_SAVED_FROM:
                try:
                    keywords.save(path)
                except OSError:
                    log.exception("saving the %s keyword index failed (rebuilt at open)", kind)
            if vectors.uses_ann:
                try:
                    saved = vectors.save_graph(self.folder, kind, seq)
                except OSError:
                    log.exception("saving the %s graph failed (rebuilt at open)", kind)
                else:
                    if saved and self.store.shared:  # for every replica to start from
                        shared_saves.store_save(self.store, self.folder, kind)

    def fetch(self, kinds: Sequence[str]) -> None:
        """On a shared store, before the first load: the newest saves the database holds,
        written into :attr:`folder` (opened and caught up as a local file's saves are)."""
        if self.store.shared and self.folder is not None:
            shared_saves.fetch_saved(self.store, self.folder, kinds)

    def closed(self) -> None:
        """The indexes are closed: a shared store's private folder goes (its saves are in
        the database)."""
        if self.store.shared and self.folder is not None:
            shared_saves.remove(self.folder)

    def _vector_seq(self, between_writes: BetweenWrites) -> int | None:
        """The newest vector write, every earlier one told to the indexes (what a save
        records so that the next open reads only the vectors written after it); None when it
        cannot be known now (a save without it is caught up from every vector)."""
        try:
            return between_writes(
                functools.partial(sql.latest_vector_seq, self.store), SAVE_GATE_SECONDS
            )
        except Exception:  # a closed or failing store: the save still serves, less quickly
            log.warning("could not read the newest vector write", exc_info=True)
            return None
