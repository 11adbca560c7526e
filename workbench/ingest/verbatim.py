"""Keep what was said: an accepted episode's passages are written and indexed with it, and
embedded with it or just after.

``add_memory`` calls :class:`PassageWriter` in three steps: :meth:`~PassageWriter.prepare`
(split the episode: pure, fast; a short episode's passages are embedded here too, see below),
:meth:`~PassageWriter.write` (inside the transaction that inserts the episode) and
:meth:`~PassageWriter.publish` (after it, under the publish gate: the search engine indexes the
passages' words, and their vectors when they have them). So an episode is found by its words
the moment ``add_memory`` returns, before extraction and with no LLM at all.

Embedding costs tens of milliseconds a passage on a CPU, seconds for a long episode. An
episode of at most ``inline`` passages (``SVC_KNOWLEDGE_INLINE_PASSAGES`` with a local
embedder, none with a remote one: its latency is not ours to add) is embedded in
``prepare``, before the episode is written, so a search by meaning finds it when
``add_memory`` returns too. A longer episode's
passages are embedded just after, by a thread of the writer, in batches; so are a bulk job's
(:meth:`~PassageWriter.backlog`: an import) in larger ones, behind every live passage, each
group taking its turn (:mod:`workbench.ingest.backlog`). The thread writes their vectors (those
of passages deleted meanwhile are dropped, under the publish gate) and tells the search engine,
from when on a search finds them by meaning too. :meth:`~PassageWriter.flush` waits for it;
:meth:`~PassageWriter.status` says how many wait, per group, and when they should be done.

Passages left without a vector (a stop, a crash, an embedder that failed: logged) are embedded
by :meth:`~PassageWriter.catch_up` when a service or worker starts, or by ``workbench
reembed``; meanwhile their words find them. :meth:`~PassageWriter.close` waits a few seconds
for live passages only, never for a bulk backlog: a stop is not held up by an import.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from workbench.clock import Clock, utcnow
from workbench.ingest.backlog import Lanes, Rate, drain_times
from workbench.ingest.context import IngestContext
from workbench.ingest.passages import passage_rows
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store import graph as g
from workbench.store.history import passages_without_vector
from workbench.store.passages import existing_passages, insert_passages, unembedded_passages

log = logging.getLogger("workbench.ingest.verbatim")

__all__ = ["PassageWriter", "Passages", "INLINE_PASSAGES", "BATCH", "BULK_BATCH"]

BATCH = 64  # live passages embedded in one call
# a bulk call: large enough for the embedder's bulk rate (it sorts a call's texts by length
# and runs a batch on every core: 64 passages a call embed at 0.96x the rate of 256 a call, a
# CPU-second for a CPU-second), short enough that a live passage, or a stop, waits for one
# call only (about a second on two cores)
BULK_BATCH = 64
INLINE_PASSAGES = 4  # the default of SVC_KNOWLEDGE_INLINE_PASSAGES
# what a new passage's memory columns hold (the schema's defaults)
NEW_MEMORY = {"importance": 3, "stability": 3, "decay_score": 0.0, "lifecycle_state": "ACTIVE",
              "last_accessed_at": None, "access_count": 0}  # fmt: skip


def cached_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A new passage row as the search engine's row cache holds it (every column it reads)."""
    return {**row, **NEW_MEMORY}


@dataclass
class Passages:
    """An episode's passage rows, with their vectors when they were embedded at once."""

    rows: list[dict[str, Any]]
    vectors: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.rows[index]


class PassageWriter:
    """Splits, writes and publishes an episode's passages, and embeds them in a thread of its
    own (see the module doc). ``inline``: the most passages an episode may have to be
    embedded before ``add_memory`` returns (0: never)."""

    def __init__(
        self,
        store: Store,
        embedder: Any,
        publisher: Any,
        inline: int = 0,
        clock: Clock = utcnow,
        metrics: Metrics | None = None,
    ):
        self.store = store
        self.embedder = embedder
        self.publisher = publisher
        self.inline = inline
        self.clock = clock
        self.metrics = metrics
        self.rate = Rate()
        self._lanes = Lanes()
        self._busy = 0  # passages of the batch being embedded
        self._busy_live = False  # whether that batch is live passages
        self._closed = False
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    @classmethod
    def of(cls, ctx: IngestContext) -> PassageWriter:
        """The writer of a workbench: short episodes embedded at once with a local embedder."""
        parts = ctx.episode_parts()
        local = parts.settings.embedder_kind == "local"
        inline = parts.settings.inline_passages if local else 0
        return cls(ctx.store, parts.embedder, parts.publisher, inline, ctx.clock, ctx.metrics)

    # --- add_memory's three steps ---------------------------------------------------------
    def prepare(self, episode: Mapping[str, Any]) -> Passages:
        """The episode's passage rows, embedded now when there are few enough (an embedder
        that fails leaves them to the thread)."""
        rows = passage_rows(episode)
        if not rows or len(rows) > self.inline:
            return Passages(rows)
        try:
            vectors = np.asarray(self.embedder.embed([r["text"] for r in rows]), np.float32)
        except Exception:  # noqa: BLE001 - embedded by the thread instead
            log.warning("embedding %d passages failed: queued for the thread", len(rows))
            return Passages(rows)
        return Passages(rows, vectors)

    def write(self, passages: Passages | Sequence[dict[str, Any]]) -> None:
        """Inside the caller's transaction."""
        passages = _as_passages(passages)
        insert_passages(self.store, passages.rows)
        if passages.vectors is not None:
            uuids = [r["uuid"] for r in passages.rows]
            g.insert_embeddings(self.store, "passage", uuids, passages.vectors, self.embedder.model)

    def publish(self, passages: Passages | Sequence[dict[str, Any]]) -> None:
        """After the commit, under the publish gate: indexed now (with their vectors when
        embedded at once), else embedded soon."""
        passages = _as_passages(passages)
        if not passages.rows:
            return
        rows = [cached_row(r) for r in passages.rows]
        if passages.vectors is not None:
            change = ("passage", rows, passages.vectors)
            self.publisher.inserted_with_vectors([change], "accepting an episode")
            return
        self.publisher.inserted("passage", rows, "accepting an episode")
        self._queue(passages.rows, live=True)

    # --- embedding ------------------------------------------------------------------------
    def backlog(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Queue passages of a bulk job (committed and published already) behind live ones."""
        self._queue(rows, live=False)

    def catch_up(self) -> int:
        """Queue the stored passages that have no vector (left by a stop, a crash or a
        failed embedder) behind live ones; how many."""
        rows = unembedded_passages(self.store)
        self._queue(rows, live=False)
        return len(rows)

    def waiting(self) -> int:
        """Passages this process has yet to embed (the batch in progress included)."""
        with self._cond:
            return len(self._lanes) + self._busy

    def status(self, stored: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The backlog as ``get_queue_status`` shows it: ``stored`` (group -> passages the
        store holds without a vector; read when not given), the rate of this process's recent
        batches and when each group should be done."""
        if stored is None:
            stored = passages_without_vector(self.store)
        rate = self.rate.per_second
        ends = drain_times(stored, rate)
        now = self.clock()
        total = sum(stored.values())
        last = max((s for s in ends.values() if s is not None), default=None)
        return {
            "passages": total,
            "rate_per_second": round(rate, 1) if rate else None,
            "estimated_end": _at(now, last) if total else None,
            "groups": [
                {"group_id": group, "passages": n, "estimated_end": _at(now, ends[group])}
                for group, n in sorted(stored.items(), key=lambda kv: -kv[1])
            ],
        }

    def flush(self, timeout: float | None = None, live_only: bool = False) -> bool:
        """Wait until every passage queued so far (``live_only``: every live one) is embedded
        (or given up); whether it was within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._pending(live_only):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _pending(self, live_only: bool) -> bool:
        if live_only:
            return bool(self._lanes.live_waiting() or (self._busy and self._busy_live))
        return bool(len(self._lanes) or self._busy)

    def close(self, timeout: float = 5.0) -> None:
        """Embed the live passages that wait (up to ``timeout`` seconds), then stop the thread
        after its batch: the rest, a bulk backlog above all, at the next start."""
        if not self.flush(timeout, live_only=True):
            log.warning("live passages still waiting for vectors at close: embedded at next start")
        with self._cond:
            left = len(self._lanes)
            self._closed = True
            self._cond.notify_all()
        if left:
            log.info("%d passages wait for vectors: embedded at the next start", left)
        thread = self._thread
        if thread is not None:
            thread.join(timeout=max(timeout, 1.0) * 2)

    def _queue(self, rows: Sequence[Mapping[str, Any]], live: bool) -> None:
        if not rows:
            return
        with self._cond:
            self._lanes.add([dict(r) for r in rows], live)
            if self._thread is None or not self._thread.is_alive():
                self._closed = False
                self._thread = threading.Thread(
                    target=self._run, name="workbench-passage-embedder", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()
        self._gauge()

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.passages_without_vector.set(self.waiting())

    def _run(self) -> None:
        while True:
            with self._cond:
                while not len(self._lanes) and not self._closed:
                    self._cond.wait()
                if self._closed:
                    self._lanes = Lanes()  # left for catch_up at the next start
                    self._cond.notify_all()
                    return
                batch, self._busy_live = self._lanes.take(BATCH, BULK_BATCH)
                self._busy = len(batch)
            started = time.monotonic()
            try:
                self._embed(batch)
                self.rate.add(len(batch), time.monotonic() - started)
            except Exception:  # noqa: BLE001 - left without vectors: caught up at next start
                log.warning(
                    "embedding %d passages failed: found by their words only until the next "
                    "start or `workbench reembed`",
                    len(batch),
                    exc_info=True,
                )
            finally:
                with self._cond:
                    self._busy = 0
                    self._cond.notify_all()
                self._gauge()

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


def _as_passages(passages: Passages | Sequence[dict[str, Any]]) -> Passages:
    return passages if isinstance(passages, Passages) else Passages(list(passages))


def _at(now: datetime, seconds: float | None) -> str | None:
    return None if seconds is None else (now + timedelta(seconds=seconds)).isoformat()
