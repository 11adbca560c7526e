"""Write, then tell the search indexes: the one object every writer of entities and facts uses.

The search engine keeps rows, vectors and keyword documents in memory, and ingestion reads the
graph from those rows (``workbench.ingest.reads``). So a write is not finished when its
transaction commits: the engine must also know it before anyone reads again. The
:class:`Publisher` (one per :class:`~workbench.index.live.LiveIndexes`, as its
``publisher``) holds that rule in one place:

* **The gate.** A writer holds it (``with publisher:``) from its transaction until the engine
  has been told; the queue claims episodes under it too. So when an episode is claimed,
  everything written before, in particular the previous episode of its group, is in the rows.
* **Telling never fails the writer.** The write is committed (for an episode, acknowledged), so
  an error here must not have it redone (duplicates): a failure is tried once more (the
  engine's updates are idempotent), then the rows and indexes are re-read whole.
* **Maintenance** writes queued accesses before a run reads ``last_accessed_at``
  (:meth:`before_maintenance`) and re-reads every row after a real run or a recovery
  (:meth:`states_changed`): states, decay scores and purges.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

import numpy as np

from workbench.index.rows import RowCache

log = logging.getLogger("workbench.index.publish")

# (kind, rows, vectors or None): what one write changed of one memory kind
Upsert = tuple[str, list[dict[str, Any]], "np.ndarray | None"]


class Indexes(Protocol):
    """What the publisher tells and reads (the :class:`~workbench.index.live.LiveIndexes`)."""

    def on_upsert(
        self, kind: str, rows: list[dict[str, Any]], vectors: np.ndarray | None = None
    ) -> None: ...

    def on_insert(self, kind: str, rows: list[dict[str, Any]]) -> None: ...

    def on_vectors(self, kind: str, uuids: Sequence[str], vectors: np.ndarray) -> None: ...

    def on_delete(self, kind: str, uuids: Sequence[str]) -> None: ...

    def replace(self, removed: Mapping[str, Sequence[str]], changes: list[Upsert]) -> None: ...

    def rebuild(self) -> None: ...

    def catch_up(self) -> int: ...

    def refresh_states(self) -> None: ...

    def flush(self) -> int: ...

    def bulk_load(self) -> AbstractContextManager[None]: ...

    def cached_rows(self) -> AbstractContextManager[tuple[RowCache, RowCache]]: ...

    def similar(
        self, kind: str, vectors: np.ndarray, group_id: str | None, k: int
    ) -> list[list[tuple[str, float]]]: ...


class Publisher:
    """The publish gate and the telling of the search engine (see the module docstring)."""

    def __init__(self, engine: Indexes):
        self._engine = engine
        self._gate = threading.RLock()

    def __enter__(self) -> Publisher:
        self._gate.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._gate.release()

    # --- after a committed write, under the gate ------------------------------------------
    def between_writes(self, read: Callable[[], Any], timeout: float) -> Any:
        """``read()`` at a moment when no write is between its commit and the engine being
        told (so what it reads of the store, the engine knows); None when writers keep the
        gate for ``timeout`` seconds."""
        if not self._gate.acquire(timeout=timeout):
            return None
        try:
            return read()
        finally:
            self._gate.release()

    def upserted(self, changes: Iterable[Upsert], what: str) -> None:
        """The engine indexes new or changed memories (rows need ``uuid`` and ``group_id``;
        vectors replace the embeddings of the first rows; None keeps theirs)."""
        changes = [c for c in changes if c[1]]

        def tell() -> None:
            for kind, rows, vectors in changes:
                self._engine.on_upsert(kind, rows, vectors)

        self._tell(tell, what)

    def inserted(self, kind: str, rows: list[dict[str, Any]], what: str) -> None:
        """The engine indexes memories just inserted whose rows are complete (nothing is
        re-read from the store), without vectors yet."""
        self._tell(lambda: self._engine.on_insert(kind, rows), what)

    def inserted_with_vectors(self, changes: Iterable[Upsert], what: str) -> None:
        """The engine indexes memories just inserted, with their vectors (one a row, or None):
        rows complete as stored (every column the row cache holds), so nothing is re-read
        from the store (a bulk import: its chunks' rows, as it wrote them)."""
        changes = [c for c in changes if c[1]]

        def tell() -> None:
            for kind, rows, vectors in changes:
                self._engine.on_insert(kind, rows)
                if vectors is not None and len(vectors):
                    self._engine.on_vectors(kind, [r["uuid"] for r in rows], vectors)

        self._tell(tell, what)

    def vectors_added(
        self, kind: str, uuids: Sequence[str], vectors: np.ndarray, what: str
    ) -> None:
        """The engine takes the vectors of memories it indexes already."""
        self._tell(lambda: self._engine.on_vectors(kind, uuids, vectors), what)

    def deleted(self, removed: Mapping[str, Sequence[str]], what: str) -> None:
        """The engine forgets removed memories (``removed``: kind -> uuids)."""

        def tell() -> None:
            for kind in ("entity", "fact", "passage"):
                self._engine.on_delete(kind, removed.get(kind, ()))

        self._tell(tell, what)

    def replaced(
        self, removed: Mapping[str, Sequence[str]], changes: Iterable[Upsert], what: str
    ) -> None:
        """The engine forgets ``removed`` and indexes ``changes`` at once: no search sees
        some of them done and not the others (a re-extraction's promote)."""
        changes = [c for c in changes if c[1]]
        self._tell(lambda: self._engine.replace(removed, changes), what)

    def _tell(self, tell: Callable[[], None], what: str) -> None:
        for attempt in (1, 2):
            try:
                tell()
                return
            except Exception:  # noqa: BLE001 - written already: never fail the writer
                log.exception(
                    "updating the search indexes after %s failed (attempt %d)", what, attempt
                )
        try:
            self._engine.rebuild()
        except Exception:  # noqa: BLE001
            log.exception(
                "re-reading the search indexes failed too: searches and extraction "
                "may miss the newest memories until the service restarts"
            )

    def caught_up(self) -> None:
        """Apply what other processes sharing the store wrote (the queue calls it after a
        claim, so an episode is prepared on rows holding its group's earlier episodes)."""
        with self._gate:
            self._engine.catch_up()

    def bulk(self) -> AbstractContextManager[None]:
        """Around a bulk write (an import): the engine builds its graphs after it, once."""
        return self._engine.bulk_load()

    # --- maintenance ----------------------------------------------------------------------
    def before_maintenance(self) -> None:
        """Write queued access updates, so a run reads current ``last_accessed_at``."""
        self._engine.flush()

    def states_changed(self) -> None:
        """Re-read every row after a maintenance run or a recovery (states, decay, purges)."""
        self._engine.refresh_states()

    # --- what ingestion reads -------------------------------------------------------------
    def cached_rows(self) -> AbstractContextManager[tuple[RowCache, RowCache]]:
        """The engine's (entity, fact) row caches, held still while read."""
        return self._engine.cached_rows()

    def similar(
        self, kind: str, vectors: np.ndarray, group_id: str | None, k: int
    ) -> list[list[tuple[str, float]]]:
        """Per vector, its ``k`` nearest memories of ``kind`` in the group: (uuid, cosine)."""
        return self._engine.similar(kind, vectors, group_id, k)
