"""The durable episode queue: one loop that claims, prepares and writes, and honest metrics.

Messages live in the store (``workbench.store.queue``): an accepted episode survives crashes
and restarts. A group's messages are leased from its head (its oldest unfinished one), so a
group's episodes are written in order while groups run in parallel up to ``concurrency``; a
group with a backlog may be leased a *run* of its next ``run_size`` messages, which the work
prepares together and which are written in one transaction, in order
(:mod:`workbench.ingest.run`). What is done with a message belongs to one collaborator, an
:class:`~workbench.ingest.queue.work.EpisodeWork` (for episodes:
:class:`~workbench.ingest.pipeline.EpisodePipeline`): ``prepare`` (the LLM calls and reads;
writes nothing) and ``commit`` (the write, with the queue's acknowledgement in the same
transaction), ``prefetch`` reading a claimed batch's episodes at once.

There is one loop (:class:`~workbench.ingest.queue.dispatch.Dispatcher`) and two ways to run it: in
the background (:meth:`EpisodeQueue.start`: a dispatcher thread and a pool of ``concurrency``
worker threads, LLM calls being I/O bound), and on the caller's thread until no due message is
left (:meth:`EpisodeQueue.drain`: notebooks, the CLI, tests; its own pool prepares, so the
caller's thread keeps renewing the leases meanwhile). DuckDB charges per transaction and per
statement, not per row, so writing the prepared episodes of several workers in one
transaction is what lets ingestion keep up with a fast LLM (figures in
``docs/performance.md``).

Claims and commits hold the ``gate`` (the search engine's publisher): a claimed episode sees
everything written before it. Failures follow :mod:`workbench.ingest.queue.retry`
(:mod:`workbench.ingest.queue.outcomes`); the messages of a process that died come back through
:mod:`workbench.ingest.queue.recovery`; failed messages keep their category and message and can be
re-queued (:meth:`EpisodeQueue.retry_failed`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid as uuidlib
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from workbench.errors import StoreError
from workbench.ingest.context import IngestContext
from workbench.ingest.queue.budget import DailyBudget
from workbench.ingest.queue.config import QUEUE_NAME, QueueConfig
from workbench.ingest.queue.dispatch import Dispatcher, QueueParts
from workbench.ingest.queue.group_commit import GroupCommit
from workbench.ingest.queue.outcomes import Outcomes, QueueGauges
from workbench.ingest.queue.recovery import Recovery
from workbench.ingest.queue.setbacks import SingleGroups
from workbench.ingest.queue.work import EpisodeWork, RunWork
from workbench.store import queue as q
from workbench.store.queue import QueueMessage

__all__ = ["QUEUE_NAME", "EpisodeQueue", "EpisodeWork", "QueueConfig", "RunWork"]

log = logging.getLogger("workbench.ingest.queue.episode_queue")


class EpisodeQueue:
    """The queue's drivers over the durable queue (see the module docstring)."""

    def __init__(
        self,
        ctx: IngestContext,
        work: EpisodeWork,
        config: QueueConfig | None = None,
        *,
        budget: DailyBudget | None = None,
    ):
        config = config or QueueConfig()
        runs = hasattr(work, "prepare_run")
        config = replace(
            config,
            batch_size=max(1, config.batch_size),
            run_size=max(1, config.run_size) if runs else 1,
        )
        self.ctx, self.store, self.clock = ctx, ctx.store, ctx.clock
        self.config = config
        self.queue_name = config.queue_name
        # groups at their daily LLM budget wait (workbench.ingest.queue.budget)
        self.budget = budget
        self.gauges = QueueGauges(ctx.store, ctx.metrics, config.concurrency, config.queue_name)
        self.outcomes = Outcomes(
            ctx.store, ctx.clock, work, self.gauges, config.max_attempts, config.base_delay
        )
        publisher = ctx.publisher
        gate: AbstractContextManager[object] = (
            publisher if publisher is not None else threading.RLock()
        )
        self._parts = QueueParts(
            store=ctx.store,
            clock=ctx.clock,
            work=work,
            config=config,
            gate=gate,
            # bring the caches up to what other processes wrote, under the gate
            after_claim=publisher.caught_up if publisher is not None else None,
            outcomes=self.outcomes,
            gauges=self.gauges,
            recovery=Recovery(
                ctx.store, ctx.metrics, config.lease_seconds, config.max_crashes, self.queue_name
            ),
            singles=SingleGroups(),
            commits=GroupCommit(self._write, config.batch_size),
            budget=budget,
            in_flight=self._in_flight,
        )
        self._drivers: set[Dispatcher] = set()  # running: the background one, drains
        self._drivers_lock = threading.Lock()
        self._dispatcher: Dispatcher | None = None  # the background one, while running
        self._thread: threading.Thread | None = None

    @property
    def work(self) -> EpisodeWork:
        return self._parts.work

    @work.setter
    def work(self, work: EpisodeWork) -> None:
        self._parts.work = self.outcomes.work = work

    @property
    def running(self) -> bool:
        return self._thread is not None

    # --- producer side ------------------------------------------------------------------
    def notify_enqueued(self, priority: int) -> None:
        self.gauges.enqueued(priority)
        self._claimable()

    # --- the two drivers ----------------------------------------------------------------
    def start(self) -> None:
        """Run the loop in the background: a dispatcher thread and its worker pool."""
        if self._thread is not None:
            return
        self._parts.recovery.recover(self.clock(), ())
        pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="episode-worker")
        dispatcher = self._driver("dispatcher", pool)
        thread = threading.Thread(
            target=self._background, args=(dispatcher,), name="episode-dispatcher", daemon=True
        )
        thread.start()
        self._dispatcher, self._thread = dispatcher, thread
        self.refresh_gauges()

    def _background(self, dispatcher: Dispatcher) -> None:
        try:
            dispatcher.run()
        finally:
            self._leave(dispatcher)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop claiming, return claimed messages no worker has started to the queue, let the
        running ones finish and be written up to ``timeout``, release the rest."""
        dispatcher, thread = self._dispatcher, self._thread
        if dispatcher is not None and thread is not None:
            dispatcher.stop.set()
            dispatcher.wake.set()
            thread.join(timeout)
            if thread.is_alive():
                self._abandon(dispatcher)
            dispatcher.pool.shutdown(wait=not dispatcher.abandon, cancel_futures=True)
        self._dispatcher = self._thread = None
        self.refresh_gauges()

    def _abandon(self, dispatcher: Dispatcher) -> None:
        """The dispatcher exits without writing what is left; it goes back to the queue."""
        dispatcher.abandon = True
        dispatcher.wake.set()
        log.warning("episodes still running at stop: released to the queue")
        dispatcher.cancel_unstarted()
        try:
            q.release_all(self.store, dispatcher.owner if self.store.shared else None)
        except StoreError as exc:  # their leases run out instead
            log.warning("releasing the claimed episodes at stop failed: %s", exc)

    def drain(self, max_messages: int = 100_000) -> int:
        """Run the loop on the caller's thread until no due message is left (tests,
        notebooks, CLI): the same claims, preparing up to ``concurrency`` at a time and
        commits as the background workers. Returns how many messages were claimed."""
        pool = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix="episode-prepare")
        driver = self._driver("drain", pool)
        try:
            done = driver.drain(max_messages)
        finally:
            self._leave(driver)
            pool.shutdown(wait=not driver.abandon, cancel_futures=True)
        self.refresh_gauges()
        return done

    def _driver(self, kind: str, pool: Executor) -> Dispatcher:
        # the lease owner: unique across the processes sharing a store; says which host and
        # process holds a message
        owner = f"{socket.gethostname()}:{os.getpid()}:{kind}-{uuidlib.uuid4().hex[:8]}"
        driver = Dispatcher(self._parts, owner, pool)
        with self._drivers_lock:
            self._drivers.add(driver)
        return driver

    def _leave(self, driver: Dispatcher) -> None:
        with self._drivers_lock:
            self._drivers.discard(driver)

    def _running_drivers(self) -> list[Dispatcher]:
        with self._drivers_lock:
            return list(self._drivers)

    def _in_flight(self) -> list[str]:
        """The messages the running drivers work on (recovery keeps their leases)."""
        return [uuid for driver in self._running_drivers() for uuid in driver.in_flight()]

    def _claimable(self) -> None:
        for driver in self._running_drivers():
            driver.claimable()

    def _write(self, units: list[list[tuple[QueueMessage, Any]]]) -> None:
        """Write the results of several units and mark their messages done, in one
        transaction (a unit's messages in order)."""
        items = [item for unit in units for item in unit]
        uuids = [message["episode_uuid"] for message, _ in items]
        seqs = [message["seq"] for message, _ in items]
        with self._parts.gate:
            self._parts.work.commit(
                [result for _, result in items],
                lambda: q.mark_done_many(self.store, uuids, self.clock(), seqs),
            )

    # --- operations ---------------------------------------------------------------------
    def refresh_gauges(self) -> None:
        self.gauges.refresh()

    def retry_failed(
        self, episode_uuids: Sequence[str] | None = None, group_id: str | None = None
    ) -> list[str]:
        uuids: list[str] = q.requeue_failed(self.store, self.clock(), episode_uuids, group_id)
        for uuid in uuids:
            self.outcomes.status(uuid, "queued", "re-queued by request")
        self.refresh_gauges()
        self._claimable()
        return uuids
