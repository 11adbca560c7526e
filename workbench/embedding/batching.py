"""Micro-batched query embedding: searches that arrive together are embedded in one model call.

A local model embeds a batch of queries for much less CPU per query than one query at a time
(the per-call overhead of the runtime is shared), so under concurrent searches
:class:`BatchingEmbedder` collects the queries that wait and embeds them together. It wraps any
:class:`~workbench.embedding.base.Embedder`; only :meth:`~BatchingEmbedder.embed_queries` is
batched (stored text is batched by its callers already, and passes straight through).

The contract:

* **A lone query never waits.** There is no background thread and no timer on the idle path:
  the caller that finds a free *lane* (at most ``lanes`` model calls run at once) embeds its
  own query at once, in its own thread.
* **Queries that arrive while every lane is busy wait in a queue**; when a lane's call ends,
  the oldest waiting caller takes the lane and embeds everything queued (up to ``max_batch``
  texts) in one call. Such a caller may first wait up to ``window`` seconds for the batch to
  fill (only then: the service is busy, and one more query per call is cheaper than the wait).
* **Results go to their caller, errors too.** Each caller gets the rows of its own texts (the
  same vectors, to float rounding, as embedding them alone). When a batched call fails, each
  of its requests is embedded alone, so one bad request fails only its own caller.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.embedding.base import Embedder, embed_queries

__all__ = ["LANES", "MAX_BATCH", "WINDOW", "BatchingEmbedder"]

# Chosen by measurement (bench/bench_throughput.py --sweep, 8 clients in process; the figures
# are in docs/performance.md): the CPU per query halves from 1 to 8 queries a call and falls
# no further, while a call's wall time keeps growing with its size.
MAX_BATCH = 8
# one model call at a time leaves the other core to the request handling (Python, which holds
# the GIL) and lets the queue, hence the batches, grow with the load: less CPU per search than
# two lanes
LANES = 1
# a queued query does not wait for more: the queue fills while the lane is busy, and a wait
# of 2 ms made fewer calls but no CPU saving and fewer searches a second
WINDOW = 0.0


class _Request:
    """One caller's texts and what it gets back: its vectors or an error."""

    __slots__ = ("error", "ready", "taken", "texts", "vectors")

    def __init__(self, texts: list[str]):
        self.texts = texts
        self.ready = threading.Event()  # its result is in, or a lane may be free
        self.taken = False  # in a batch (no longer queued)
        self.vectors: np.ndarray | None = None
        self.error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.vectors is not None or self.error is not None


class BatchingEmbedder:
    """Batches concurrent :meth:`embed_queries` calls of ``inner``; see the module docstring.

    Every other attribute (``similarity_baseline``, ``keyword_weight``, ``warm_up``, …) is the
    wrapped embedder's."""

    def __init__(
        self,
        inner: Embedder,
        *,
        max_batch: int = MAX_BATCH,
        lanes: int = LANES,
        window: float = WINDOW,
    ):
        self.inner = inner
        self.model = inner.model
        self.dimensions = inner.dimensions
        self.max_batch = max(1, int(max_batch))
        self.lanes = max(1, int(lanes))
        self.window = max(0.0, float(window))
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[_Request] = deque()
        self._running = 0  # lanes in use
        self.model_calls = 0  # calls of the model for queries (batches and requests alone)

    def __getattr__(self, name: str) -> Any:
        if name == "inner":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Stored text: straight to the wrapped embedder."""
        return self.inner.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """What searches ask, embedded together with the queries of concurrent callers."""
        texts = list(texts)
        if not texts or len(texts) >= self.max_batch:
            return self._embed_alone(texts)
        me = _Request(texts)
        with self._cond:
            self._queue.append(me)
            lead = self._claim()
            if not lead:
                self._cond.notify_all()  # a lane waiting for its batch to fill
        busy = not lead
        while not me.done:
            if lead:
                self._lead(me, busy)
                lead = False
                continue  # its texts are embedded, or in another lane's batch
            me.ready.wait()
            with self._cond:
                me.ready.clear()
                if me.done:
                    break
                if me.taken:  # another lane took it: pass the wake-up on
                    self._wake_next()
                else:
                    lead = self._claim()
        if me.error is not None:
            raise me.error
        assert me.vectors is not None
        return me.vectors

    def _embed_alone(self, texts: list[str]) -> np.ndarray:
        self.model_calls += 1
        return np.asarray(embed_queries(self.inner, texts), dtype=np.float32)

    # --- lanes (called holding self._cond) ----------------------------------------------
    def _claim(self) -> bool:
        if self._running < self.lanes:
            self._running += 1
            return True
        return False

    def _wake_next(self) -> None:
        """A lane is free: the oldest queued caller takes it."""
        if self._running < self.lanes and self._queue:
            self._queue[0].ready.set()

    def _lead(self, me: _Request, busy: bool) -> None:
        """Holding a lane: embed the queue's batches in this thread until ``me`` is in one,
        then free the lane for the oldest waiting caller. ``busy``: every lane was in use when
        ``me`` came (the window may apply)."""
        try:
            while True:
                with self._cond:
                    if busy and self.window and not me.taken:
                        # the wait releases the lock: another lane may take ``me`` meanwhile
                        self._cond.wait_for(self._full, timeout=self.window)
                    if me.taken:
                        return
                    batch = self._take()
                self._run(batch)
        finally:
            with self._cond:
                self._running -= 1
                self._wake_next()

    def _full(self) -> bool:
        return sum(len(r.texts) for r in self._queue) >= self.max_batch

    def _take(self) -> list[_Request]:
        """The oldest queued requests, up to ``max_batch`` texts (at least one request)."""
        batch = [self._queue.popleft()]
        size = len(batch[0].texts)
        while self._queue and size + len(self._queue[0].texts) <= self.max_batch:
            size += len(self._queue[0].texts)
            batch.append(self._queue.popleft())
        for request in batch:
            request.taken = True
        return batch

    def _run(self, batch: list[_Request]) -> None:
        """Embed ``batch`` in one call and give each request its rows (or its error)."""
        try:
            if len(batch) == 1:
                self._answer(batch[0])
                return
            try:
                vectors = self._embed_alone([t for r in batch for t in r.texts])
            except Exception:  # noqa: BLE001 - retried one by one: each caller gets its own
                for request in batch:
                    self._answer(request)
                return
            at = 0
            for request in batch:
                request.vectors = vectors[at : at + len(request.texts)].copy()
                at += len(request.texts)
        except BaseException as exc:  # interrupted: nobody may wait forever
            for request in batch:
                if not request.done:
                    request.error = exc
            raise
        finally:
            for request in batch:
                request.ready.set()

    def _answer(self, request: _Request) -> None:
        try:
            request.vectors = self._embed_alone(request.texts)
        except Exception as exc:  # noqa: BLE001 - raised in the caller's own thread
            request.error = exc
