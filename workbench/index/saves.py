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

**Checked before use.** Each save's manifest holds a SHA-256 of its files (the graph, the
slot fingerprints, the vectors, the row snapshot; the keyword index's manifest one of its
own). A save whose file differs from its checksum (edited, or damaged on disk), or whose
manifest holds none, is not opened: :meth:`IndexSaves.verify` logs which file, counts it on
``knowledge_search_saves_rejected_total`` and removes the save, and the indexes are built
from the store (the source of truth) instead.

A kind is not saved again (nor stored in the database again) while its indexes hold what its
last save holds: the same newest vector write, and no change told since (:meth:`changed`),
counted from the save opened at the start or the last one written.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from workbench.errors import StoreUnavailable
from workbench.index import row_snapshot, shared_saves
from workbench.index.keyword.bm25 import KeywordIndex
from workbench.index.row_snapshot import Stamp
from workbench.index.rows import RowCache
from workbench.index.vector.index import VectorIndex
from workbench.index.vector.saves import remove_other_saves, unverified
from workbench.store import Store, saved_indexes
from workbench.store import changes as changes_sql
from workbench.store import search as sql

if TYPE_CHECKING:
    import pyarrow as pa

    from workbench.metrics import Metrics

__all__ = ["IndexSaves", "KEYWORDS_SAVED_FROM", "SAVE_GATE_SECONDS"]

log = logging.getLogger("workbench.index.saves")

# a keyword index this large is saved beside the database at close (reopened, not rebuilt)
KEYWORDS_SAVED_FROM = 1_000
SAVE_GATE_SECONDS = 5.0  # how long a save waits for a moment between writes
# changes since a row snapshot (or a quarter of its rows, if more) beyond which every row is
# read instead of catching the snapshot up
CATCH_UP_LIMIT = 50_000

# ``read()`` at a moment no write is between its commit and the indexes being told
# (:meth:`~workbench.index.publish.Publisher.between_writes`), None after ``timeout`` seconds
BetweenWrites = Callable[[Callable[[], Stamp], float], "Stamp | None"]
# the indexes of a kind to save: vectors, keywords, and a snapshot of the rows (read when
# called, holding the rows still)
Current = tuple["VectorIndex | None", "KeywordIndex | None", "Callable[[], pa.Table] | None"]


class IndexSaves:
    """The saves of one store's indexes in ``folder`` (None: nothing is saved or opened)."""

    def __init__(
        self,
        store: Store,
        folder: Path | None,
        every: float = 0.0,
        metrics: Metrics | None = None,
    ):
        self.store = store
        self.folder = folder
        self.metrics = metrics
        self.every = every  # seconds between periodic saves (0: none)
        self._lock = threading.Lock()  # one save of the indexes at a time
        self._changes: dict[str, int] = {}  # kind -> changes told to its indexes
        # kind -> (newest vector write, changes told) its save in the folder holds
        self._held: dict[str, tuple[int | None, int]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def verify(self, kind: str) -> bool:
        """Whether the saves of ``kind`` (graph and keywords) are as written, before they
        are opened; a save that is not is logged, counted and removed (rebuilt from the
        store)."""
        if self.folder is None:
            return True
        whole = True
        part = unverified(self.folder, kind)
        if part is not None:
            self._rejected(kind, part)
            (self.folder / f"{kind}.json").unlink(missing_ok=True)
            remove_other_saves(self.folder, kind, set())
            whole = False
        keywords = self.keyword_path(kind)
        if keywords is not None and not KeywordIndex.verify_saved(keywords):
            self._rejected(kind, "keywords")
            for path in (keywords, keywords.with_name(keywords.name + ".json")):
                path.unlink(missing_ok=True)
            whole = False
        return whole

    def _rejected(self, kind: str, part: str) -> None:
        log.warning(
            "the saved %s search index failed its check (%s: not as saved, or unchecked): "
            "not used, rebuilt from the store",
            kind,
            part,
        )
        if self.metrics is not None:
            self.metrics.search_saves_rejected.labels(kind, part).inc()

    def keyword_path(self, kind: str) -> Path | None:
        return None if self.folder is None else self.folder / f"{kind}.keywords.npz"

    def keywords_as_saved(self, kind: str, stamp: Stamp) -> KeywordIndex | None:
        """The keyword index of ``kind`` saved with the rows of ``stamp``, as saved (the
        caller catches both up from the stamp); None when it is not that save."""
        path = self.keyword_path(kind)
        if path is None or stamp.keywords is None or stamp.changes is None:
            return None
        return KeywordIndex.read_saved(path, stamp.keywords)

    def open_keywords(self, uuids: list[str], texts: list[str], groups: list[str],
                      kind: str) -> KeywordIndex | None:  # fmt: skip
        """The keyword index saved for ``kind``, caught up with these documents; None when
        there is none (or it cannot serve)."""
        path = self.keyword_path(kind)
        if path is None:
            return None
        saved = KeywordIndex.open_saved(path, uuids, texts, groups)
        return None if saved is None else saved[0]

    def open_rows(self, kind: str) -> tuple[RowCache, Stamp] | None:
        """The rows of ``kind`` from the snapshot saved with its graph and its stamp, when the
        store's change log can catch it up (the caller follows it from the stamp; see
        :mod:`workbench.index.row_snapshot`); None when every row must be read (why is
        logged)."""
        if not self.store.shared:
            return None  # a database file: its rows are read whole (see row_snapshot)
        found = row_snapshot.read(self.folder, kind, sql.COLUMNS[kind])
        if found is None:
            return None
        table, stamp = found
        try:
            why = self._not_current(stamp, table.num_rows)
            if why is None:
                cache = RowCache(kind)
                cache.load_table(table)
                return cache, stamp
        except StoreUnavailable:
            raise
        except Exception:  # noqa: BLE001 - a damaged snapshot: every row is read instead
            log.warning("the saved %s rows could not be loaded", kind, exc_info=True)
            why = "unreadable"
        log.info("the saved %s rows are not used (%s): reading them from the store", kind, why)
        return None

    def _not_current(self, stamp: Stamp, rows: int) -> str | None:
        """Why a snapshot with this stamp cannot be caught up from a shared store's change
        log (None: it can)."""
        if stamp.changes is None:
            return "no change-log position"
        last = stamp.changes[0]
        pruned, top = changes_sql.horizon(self.store)[2], changes_sql.latest_seq(self.store)
        if pruned > last:
            return "the change log no longer holds what was written since"
        if top < last or sql.latest_vector_seq(self.store) < (stamp.vector_seq or 0):
            return "the database is older than the save (restored from a copy?)"
        if top - last > max(CATCH_UP_LIMIT, rows // 4):
            return f"{top - last} changes since: reading every row is as quick"
        return None

    def save(
        self,
        kind: str,
        current: Callable[[], Current],
        between_writes: BetweenWrites,
        stamp: Callable[[], Stamp],
        force: bool = False,
        periodic: bool = False,
    ) -> None:
        """Save the finished HNSW graph, the keyword index and the rows of ``kind`` (opened
        and caught up with the store at the next open); ``current()``: the indexes of
        ``kind`` to save, read once this save has its turn; ``stamp()``: what the indexes
        hold, read between two writes (every write up to it is in what is saved). Skipped
        when the last save holds the same (see the module doc), unless ``force`` (a graph
        just built); a ``periodic`` one on a shared store also when the database holds a
        save of the same vectors (another replica's: the rows changed since are caught up
        from the change log)."""
        if self.folder is None:
            return
        taken, changes = self._stamp(kind, between_writes, stamp)
        seq = None if taken is None else taken.vector_seq
        with self._lock:
            if not force and seq is not None and self._held.get(kind) == (seq, changes):
                return  # the save in the folder (and the database) holds all this already
            if periodic and seq is not None and self._stored_since(kind, seq):
                return
            vectors, keywords, rows = current()
            if vectors is None:
                return
            path = self.keyword_path(kind)
            digest = None
            saved = not vectors.uses_ann  # no graph to save: the keyword index is all
            if keywords is not None and path is not None and len(keywords) >= KEYWORDS_SAVED_FROM:
                try:
                    digest = keywords.save(path)
                except OSError:
                    log.exception("saving the %s keyword index failed (rebuilt at open)", kind)
                    saved = False
            if vectors.uses_ann:
                if taken is not None:  # the keywords saved now: caught up from the stamp too
                    taken = dataclasses.replace(taken, keywords=digest)
                extra = self._write_rows(kind, rows, taken)
                try:
                    saved = vectors.saves.save_graph(self.folder, kind, seq, extra)
                except OSError:
                    log.exception("saving the %s graph failed (rebuilt at open)", kind)
                else:
                    kept = extra.get("rows") if saved else None
                    row_snapshot.remove_others(self.folder, kind, kept)
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

    def _write_rows(self, kind: str, rows: Callable[[], pa.Table] | None,
                    stamp: Stamp | None) -> dict[str, str]:  # fmt: skip
        """The row snapshot of ``kind`` written beside the graph (and the keyword index's
        manifest, when there is one): the files to name in the graph's manifest. None is
        written when the moment between writes was not found, or on a shared store without a
        change-log position (it could not be caught up)."""
        assert self.folder is not None
        files: dict[str, str] = {}
        keywords = self.keyword_path(kind)
        if keywords is not None and keywords.with_name(keywords.name + ".json").is_file():
            files["keywords_manifest"] = keywords.name + ".json"  # fetched with the graph
        if rows is None or stamp is None or stamp.changes is None:
            return files  # (a database file has no change log: no snapshot, see open_rows)
        try:
            files["rows"] = row_snapshot.write(self.folder, kind, rows(), stamp)
        except OSError:
            log.exception("saving the %s rows failed (read from the store at open)", kind)
        return files

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

    def _stamp(
        self, kind: str, between_writes: BetweenWrites, stamp: Callable[[], Stamp]
    ) -> tuple[Stamp | None, int]:
        """What the indexes hold, read at a moment no write is between its commit and the
        indexes being told (so that the next open reads only what was written after it;
        None when it cannot be known now: a save without it is caught up from every vector
        and its rows are read whole), and the changes told to the indexes of ``kind`` by
        then."""
        told = [self._changes.get(kind, 0)]  # (read first: a change after it is saved again)

        def read() -> Stamp:
            told[0] = self._changes.get(kind, 0)
            return stamp()

        try:
            taken: Stamp | None = between_writes(read, SAVE_GATE_SECONDS)
        except Exception:  # a closed or failing store: the save still serves, less quickly
            log.warning("could not read what the saved indexes hold", exc_info=True)
            taken = None
        return taken, told[0]
