"""Keep what was said: an accepted episode's passages are written and indexed with it, and
embedded just after.

``add_memory`` calls :class:`PassageWriter` in three steps: :meth:`~PassageWriter.prepare`
(split the episode: pure, fast), :meth:`~PassageWriter.write` (inside the transaction that
inserts the episode) and :meth:`~PassageWriter.publish` (after it, under the publish gate: the
search engine indexes the passages' words). So an episode is found by its words the moment
``add_memory`` returns, before extraction and with no LLM at all.

Embedding is the slow part (tens of milliseconds a passage on a CPU, seconds for a long
episode), so it runs after ``add_memory`` has returned: a thread of the writer embeds the
passages waiting, in batches, writes their vectors (those of passages deleted meanwhile are
dropped, under the publish gate) and tells the search engine, from when on a search finds
them by meaning too (usually within a fraction of a second). :meth:`~PassageWriter.flush` waits
for it. Passages left without a vector (a crash, an embedder that failed: logged) are
embedded by :meth:`~PassageWriter.catch_up` when a service or worker starts, or by
``workbench reembed``; meanwhile their words find them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from workbench.ingest.passages import passage_rows
from workbench.store import Store
from workbench.store import graph as g
from workbench.store.passages import existing_passages, insert_passages, unembedded_passages

log = logging.getLogger("workbench.ingest.verbatim")

__all__ = ["PassageWriter"]

BATCH = 64  # passages embedded in one call
# what a new passage's memory columns hold (the schema's defaults)
NEW_MEMORY = {"importance": 3, "stability": 3, "decay_score": 0.0, "lifecycle_state": "ACTIVE",
              "last_accessed_at": None, "access_count": 0}  # fmt: skip


def cached_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A new passage row as the search engine's row cache holds it (every column it reads)."""
    return {**row, **NEW_MEMORY}


class PassageWriter:
    """Splits, writes and publishes an episode's passages, and embeds them in a thread of its
    own (see the module doc)."""

    def __init__(self, store: Store, embedder: Any, publisher: Any):
        self.store = store
        self.embedder = embedder
        self.publisher = publisher
        self._waiting: list[dict[str, Any]] = []
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    # --- add_memory's three steps ---------------------------------------------------------
    def prepare(self, episode: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The episode's passage rows."""
        return passage_rows(episode)

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        """Inside the caller's transaction."""
        insert_passages(self.store, rows)

    def publish(self, rows: Sequence[dict[str, Any]]) -> None:
        """After the commit, under the publish gate: indexed now, embedded soon."""
        if rows:
            self.publisher.inserted(
                "passage", [cached_row(r) for r in rows], "accepting an episode"
            )
            self._queue(rows)

    # --- embedding ------------------------------------------------------------------------
    def catch_up(self) -> int:
        """Queue the stored passages that have no vector (left by a crash or a failed
        embedder); how many."""
        rows = unembedded_passages(self.store)
        self._queue(rows)
        return len(rows)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every passage queued so far is embedded (or given up); whether it was
        within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._waiting or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Embed what waits (up to ``timeout`` seconds; the rest at the next start), then stop
        the thread."""
        if not self.flush(timeout):
            log.warning("passages still waiting for vectors at close: embedded at next start")
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=timeout)

    def _queue(self, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        with self._cond:
            self._waiting.extend(rows)
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(
                    target=self._run, name="workbench-passage-embedder", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if not self._waiting:
                    return
                batch, self._waiting = self._waiting[:BATCH], self._waiting[BATCH:]
                self._busy = True
            try:
                self._embed(batch)
            except Exception:  # noqa: BLE001 - left without vectors: caught up at next start
                log.warning(
                    "embedding %d passages failed: found by their words only until the next "
                    "start or `workbench reembed`",
                    len(batch),
                    exc_info=True,
                )
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _embed(self, rows: list[dict[str, Any]]) -> None:
        vectors = np.asarray(self.embedder.embed([r["text"] for r in rows]), np.float32)
        with self.publisher:
            with self.store.transaction():
                # a passage deleted (with its episode) since it was queued gets no vector
                here = existing_passages(self.store, [r["uuid"] for r in rows])
                keep = [i for i, r in enumerate(rows) if r["uuid"] in here]
                kept = [rows[i] for i in keep]
                g.insert_embeddings(
                    self.store, "passage", [r["uuid"] for r in kept], vectors[keep],
                    self.embedder.model,
                )  # fmt: skip
            self.publisher.vectors_added(
                "passage", [r["uuid"] for r in kept], vectors[keep], "embedding passages"
            )
