"""The durable episode queue's dispatcher, workers and honest metrics.

Messages live in DuckDB (``workbench.store.queue``): an accepted episode survives crashes and
restarts. A group's messages are leased from its head (its oldest unfinished one), so a group's
episodes are written in order while groups run in parallel up to ``concurrency``; a group with
a backlog may be leased a *run* of its next ``run_size`` messages, which the work prepares
together and which are written in one transaction, in order (:mod:`workbench.ingest.run`).
What is done with a message belongs to one collaborator, an :class:`EpisodeWork` (for episodes:
:class:`~workbench.ingest.pipeline.EpisodePipeline`): ``prepare`` (the LLM calls and
reads; writes nothing) and ``commit`` (the write, with the queue's acknowledgement in the same
transaction), ``prefetch`` reading a claimed batch's episodes at once.

In the background (:meth:`EpisodeQueue.start`) one dispatcher thread claims messages for a pool
of ``concurrency`` worker threads (LLM calls are I/O bound): whenever no more than
``concurrency`` claimed messages are being prepared it claims the heads of up to ``2 ×
concurrency`` minus those, in one transaction, and renews the leases of every unfinished
message. One claim serves several workers (a claim costs about as much however many messages it
takes), and a worker never waits for a claim. A worker hands what it prepared back to the
dispatcher and takes its next message; the dispatcher commits the prepared episodes in one
transaction (:class:`~workbench.ingest.group_commit.GroupCommit`) once there are ``batch_size``
of them, nothing else is being prepared, or the oldest has waited ``COMMIT_LINGER_SECONDS`` (a
group's next episode waits for that write: it must see what the previous one wrote). DuckDB
charges per transaction and per statement, not per row, so this is what lets ingestion keep up
with a fast LLM (figures in ``docs/performance.md``).

:meth:`EpisodeQueue.drain` does the same inline (notebooks, the CLI, tests): it claims the heads
of up to ``batch_size`` groups at once, prepares them up to ``concurrency`` at a time and
commits them together.

Claims and commits hold the ``gate`` (the search engine's publish gate): a claimed episode sees
everything written before it. Failures follow :mod:`workbench.ingest.retry`; failed messages
keep their category and message and can be re-queued (:meth:`EpisodeQueue.retry_failed`).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from typing import Any, Protocol

from workbench.clock import Clock
from workbench.errors import StoreError, StoreUnavailable
from workbench.ingest.budget import DailyBudget
from workbench.ingest.group_commit import GroupCommit
from workbench.ingest.retry import TRANSIENT, categorize, decide
from workbench.ingest.setbacks import HeldMessages, PrepareAgain, StaleCounts
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store import queue as q
from workbench.store.queue import QueueMessage
from workbench.store.schema import PRIORITY_NAMES

log = logging.getLogger("workbench.ingest.episode_queue")

QUEUE_NAME = "episodes"
SINGLES_SECONDS = 300.0  # one message at a time after a group's run failed as a whole
RELEASED = object()  # an outcome: the message went back to the queue unspent
# how long a prepared episode may wait for others to share its commit while more are being
# prepared: a commit costs ~20 ms of DuckDB work however many episodes it writes
COMMIT_LINGER_SECONDS = 0.2


class EpisodeWork(Protocol):
    """What the queue needs done with the messages it claims."""

    def prefetch(self, messages: list[QueueMessage]) -> list[QueueMessage]:
        """The messages with their ``episode`` read (in a few queries for the whole batch)."""
        ...

    def prepare(self, message: QueueMessage) -> Any:
        """Everything but the write (LLM calls, reads); raises on failure."""
        ...

    def commit(self, results: list[Any], ack: Callable[[], None]) -> None:
        """Write the prepared results in one transaction that also calls ``ack()``; raises
        :class:`~workbench.ingest.setbacks.PrepareAgain` when they went stale."""
        ...

    def available(self) -> bool:
        """False while the work cannot be done (its LLM is known to be down): nothing is
        claimed, and a transient failure meanwhile does not spend an attempt."""
        ...


class RunWork(EpisodeWork, Protocol):
    """Work that can also prepare a run: consecutive messages of one group at once."""

    def prepare_run(self, messages: list[QueueMessage]) -> list[tuple[bool | None, Any]]:
        """Per message, in order: (True, result), (False, error) for the one that failed,
        (None, None) for those after it, which go back to the queue unprepared."""
        ...


Unit = list[QueueMessage]  # one message, or a run of one group's consecutive messages


class EpisodeQueue:
    """Dispatcher and worker pool over the durable queue (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        work: EpisodeWork,
        metrics: Metrics,
        clock: Clock,
        *,
        gate: AbstractContextManager[Any] | None = None,
        after_claim: Callable[[], None] | None = None,
        concurrency: int = 4,
        lease_seconds: float = 300.0,
        max_attempts: int = 6,
        poll_seconds: float = 0.5,
        base_delay: float = 2.0,
        batch_size: int = 16,
        max_crashes: int = 3,
        run_size: int = 1,
        budget: DailyBudget | None = None,
        queue_name: str = QUEUE_NAME,
    ):
        self.store = store
        self.budget = budget  # groups at their daily LLM budget wait (workbench.ingest.budget)
        # the ``queue_name`` label of its metrics (a re-extraction's shadow queue has its own)
        self.queue_name = queue_name
        # up to this many consecutive messages of a group with a backlog are claimed and
        # prepared together (work with ``prepare_run`` only)
        self.run_size = max(1, run_size) if hasattr(work, "prepare_run") else 1
        # groups whose last run failed as a whole: their messages go one at a time for a while,
        # so a failure is charged to the episode that caused it (group -> monotonic deadline)
        self._singles: dict[str, float] = {}
        self._singles_lock = threading.Lock()
        self.work = work
        self.max_crashes = max_crashes
        # held while claiming and while committing (until the commit's search-index updates
        # are done): a claimed episode sees everything written before it, in particular the
        # previous episode of its group
        self.gate = gate if gate is not None else threading.RLock()
        # under the gate, after a claim: bring the caches up to what other processes wrote
        self._after_claim = after_claim
        self.batch_size = max(1, batch_size)
        self._group = GroupCommit(self._write, self.batch_size)
        self._pool: ThreadPoolExecutor | None = None  # drain's preparers, made on first use
        self.metrics = metrics
        self.clock = clock
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.poll_seconds = poll_seconds
        self.base_delay = base_delay
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []  # the dispatcher, while running
        self._workers: ThreadPoolExecutor | None = None  # its pool, while running
        self._owner = ""  # the lease owner of the running dispatcher
        # the dispatcher's: claimed units being prepared (future -> unit), and prepared
        # messages waiting to be written together: (message, ok, result or error, start, unit
        # number; a run's messages are written in one transaction, in order)
        self._unfinished: dict[Any, Unit] = {}
        self._ready: list[tuple[QueueMessage, bool, Any, float, int]] = []
        self._held = HeldMessages()  # outcomes the store was away for (ingest.setbacks)
        self._units = 0
        self._ready_since = 0.0
        self._unfinished_lock = threading.Lock()
        self._abandon = False
        # False after a claim left no runnable head, until something may have changed that
        # (an enqueue, a finished episode, a poll): claims cost ~2-5 ms even when empty.
        # _claim_events counts those changes, so one that lands during a claim is not lost.
        self._may_claim = True
        self._claim_events = 0
        self._last_claim = 0.0  # monotonic time of the last claim attempt
        self._run = 0  # which start() the running dispatcher belongs to
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._avg_seconds = 1.0
        self._last_lease_check = None
        self._last_gauges = 0.0
        self._stale = StaleCounts()  # preparations gone stale in a row (PrepareAgain)

    # --- producer side ------------------------------------------------------------------
    def notify_enqueued(self, priority: int) -> None:
        self.metrics.record_enqueue(self.queue_name, PRIORITY_NAMES.get(priority, "normal"))
        self._claimable()

    # --- worker side --------------------------------------------------------------------
    def start(self) -> None:
        if self._threads:
            return
        self._recover(self.clock(), ())
        self._stop.clear()
        self._abandon = False
        with self._unfinished_lock:
            self._unfinished, self._ready = {}, []
        self._held.clear()
        self._may_claim = True
        self._run += 1  # a dispatcher of an earlier, abandoned run exits at its next turn
        # unique across the processes sharing a store; says which host and process holds it
        self._owner = f"{socket.gethostname()}:{os.getpid()}:dispatcher-{uuidlib.uuid4().hex[:8]}"
        self._workers = ThreadPoolExecutor(self.concurrency, thread_name_prefix="episode-worker")
        t = threading.Thread(
            target=self._dispatch, args=(self._run,), name="episode-dispatcher", daemon=True
        )
        t.start()
        self._threads = [t]
        self.refresh_gauges()

    @property
    def _shared(self) -> bool:
        """Whether other processes use the store's queue too (a database server)."""
        return self.store.shared

    def _recover(self, now, keep) -> None:
        """Return the messages of a process that died to the queue, counting a crash each:
        at start-up all in flight (a file has one process), on a shared store those whose
        lease ran out (see :func:`~workbench.store.queue.recover_crashed`)."""
        released, crashed = q.recover_crashed(
            self.store, now, self.max_crashes, expired_only=self._shared, keep=keep
        )
        if released:
            log.warning(
                "returned %d in-flight episodes of a stopped process to the queue", released
            )
        for uuid in crashed:
            log.error(
                "episode %s failed: the service process died %d times while processing "
                "it (crash loop); retry_failed_episodes queues it again",
                uuid,
                self.max_crashes,
            )
            self.metrics.record_processing_complete(
                self.queue_name, 0.0, False, "UnknownError", None
            )

    def stop(self, timeout: float = 30.0) -> None:
        """Stop claiming, return claimed messages no worker has started to the queue, let the
        running ones finish and be written up to ``timeout``, release the rest."""
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout)
        if any(t.is_alive() for t in self._threads):
            self._abandon = True  # the dispatcher exits without writing what is left
            self._wake.set()
            log.warning("episodes still running at stop: released to the queue")
            with self._unfinished_lock:
                unstarted = list(self._unfinished)
            for future in unstarted:  # no worker may start them after the release
                future.cancel()
            try:
                q.release_all(self.store, self._owner if self._shared else None)
            except StoreError as exc:  # their leases run out instead
                log.warning("releasing the claimed episodes at stop failed: %s", exc)
        abandoned = self._abandon
        self._threads = []
        for pool in (self._workers, self._pool):
            if pool is not None:
                pool.shutdown(wait=not abandoned, cancel_futures=True)
        self._workers = self._pool = None
        self.refresh_gauges()

    @property
    def running(self) -> bool:
        return bool(self._threads)

    def _claimable(self) -> None:
        """Something happened that may have made a head runnable: the next claim may try."""
        self._claim_events += 1
        self._may_claim = True
        self._wake.set()

    def _current(self, run: int) -> bool:
        return run == self._run and not self._abandon

    def _dispatch(self, run: int) -> None:
        """Claim for the worker pool and write what it prepared (see the module docstring),
        until :meth:`stop`; then finish the started work and return the rest."""
        renew_every = self.lease_seconds / 3
        renewed = time.monotonic()
        while self._current(run):
            stopping = self._stop.is_set()
            claimed, failed = 0, False
            if not self.store.available:  # nothing can be written, claimed or released
                if stopping:
                    self._left_at_stop()
                    return
                renewed = 0.0  # once it is back: renew at once (the leases may have run out)
                self._wake.wait(self.poll_seconds)
                self._wake.clear()
                continue
            try:
                self._release_held()
                if stopping:
                    self._return_unstarted()
                self._write_ready(force=stopping)
                if not stopping:
                    claimed = self._claim_for_workers()
                if time.monotonic() - renewed >= renew_every:
                    renewed = time.monotonic()
                    self._renew_unfinished()
            except Exception:  # never let the dispatcher die: log and keep going
                log.exception("queue dispatcher error")
                failed = True
            with self._unfinished_lock:
                idle = not self._unfinished and not self._ready
            if stopping and idle:
                return
            if not claimed:
                wait = min(self.poll_seconds, self._linger_left())
                if not idle:  # leases to renew in time
                    wait = min(wait, max(0.0, renewed + renew_every - time.monotonic()))
                if failed:  # the store is failing: do not spin on it
                    wait = max(wait, min(self.poll_seconds, 0.1))
                self._wake.wait(wait)
                self._wake.clear()
            if time.monotonic() - self._last_claim >= self.poll_seconds:
                self._may_claim = True  # a poll: retries fall due, leases run out

    def _left_at_stop(self) -> None:
        """Stopping while the store is down: what was claimed stays leased to this process
        and returns to the queue when its lease runs out (nothing is lost)."""
        with self._unfinished_lock:
            left = len(self._ready) + sum(len(u) for u in self._unfinished.values())
        log.warning(
            "stopping while the database is unreachable: %d claimed episodes return to the "
            "queue when their leases run out",
            left + len(self._held),
        )

    def _hold(self, message: QueueMessage) -> None:
        """The store went away before what happened to ``message`` could be recorded: it is
        returned to the queue, unspent, once the store is back (:meth:`_release_held`)."""
        self._held.add(message)

    def _release_held(self) -> None:
        released = self._held.release(lambda uuid: q.release(self.store, uuid, self._owner))
        if released:
            log.info("%d episodes held during a database outage returned to the queue", released)

    def _claim_for_workers(self) -> int:
        """Claim and hand out messages when at most ``concurrency`` are being prepared."""
        with self._unfinished_lock:
            preparing = sum(len(unit) for unit in self._unfinished.values())
        # a run of one group may take up to run_size messages however few workers there are
        room = max(2 * self.concurrency, self.run_size) - preparing
        if preparing > self.concurrency or room <= 0 or not self._may_claim:
            return 0
        if not self.work.available():  # the next poll looks again
            return 0
        events = self._claim_events
        self._last_claim = time.monotonic()
        now = self.clock()
        self._requeue_expired(now)
        if self.budget is not None:
            self.budget.hold(now)
        with self.gate:
            if self._stop.is_set() or self._abandon:  # stopped while waiting for the gate
                return 0
            messages, more = q.claim_heads(
                self.store,
                self._owner,
                now,
                self.lease_seconds,
                room,
                self.run_size,
                self._single_groups(),
            )
            if messages and self._after_claim is not None:
                self._after_claim()
        if not more and events == self._claim_events:
            self._may_claim = False  # every runnable head is taken: no use asking again yet
        handed = 0
        try:
            for unit in _units(self._prefetched(messages)):
                pool = self._workers
                if pool is None:
                    raise RuntimeError("the worker pool is shut down")
                with self._unfinished_lock:
                    future = pool.submit(self._work, unit)
                    self._unfinished[future] = unit
                future.add_done_callback(self._prepared)
                handed += len(unit)
        except BaseException:  # nothing claimed stays leased to nobody
            for message in messages[handed:]:
                q.release(self.store, message["episode_uuid"], self._owner)
            raise
        return len(messages)

    def _work(self, unit: Unit) -> list[tuple[bool | None, Any, float]]:
        """A worker's part: prepare the unit (the dispatcher writes it and renews the
        leases). Per message: (ok, result or error, start); ok None: not prepared."""
        starts = [self._begin(message) for message in unit]
        try:
            outcomes = self._prepare_unit(unit)
        finally:
            self._set_busy(-len(unit))
        return [(ok, value, started) for (ok, value), started in zip(outcomes, starts)]

    def _prepare_unit(self, unit: Unit) -> list[tuple[bool | None, Any]]:
        """(True, result), (False, error) or (None, None) per message of the unit."""
        if len(unit) == 1:
            return self._prepare_all(unit, parallel=False)
        try:
            return self.work.prepare_run(unit)  # type: ignore[attr-defined]
        except Exception as exc:  # a step of the whole run failed: whose fault is unknown
            self._run_failed(unit, exc)
            return [(None, None)] * len(unit)

    def _run_failed(self, unit: Unit, exc: BaseException) -> None:
        """A run failed as a whole (a run-wide step, or its write): every message goes back
        to the queue unspent and its group runs one message at a time for a while, so the
        failure, if it comes again, is charged to the episode that causes it."""
        group = unit[0]["group_id"]
        log.warning(
            "a run of %d episodes of group %s failed as a whole (%s: %s): they return to the "
            "queue and the group goes one episode at a time for %.0f s",
            len(unit),
            group,
            type(exc).__name__,
            exc,
            SINGLES_SECONDS,
        )
        with self._singles_lock:
            self._singles[group] = time.monotonic() + SINGLES_SECONDS

    def _single_groups(self) -> list[str]:
        now = time.monotonic()
        with self._singles_lock:
            self._singles = {g: t for g, t in self._singles.items() if t > now}
            return sorted(self._singles)

    def _prepared(self, future) -> None:
        """Done callback: a prepared unit's messages join the ones waiting to be written;
        those a run did not prepare go back to the queue."""
        error = None
        unprepared: list[QueueMessage] = []
        with self._unfinished_lock:
            unit = self._unfinished.pop(future, None)  # None: of a run stopped since
            if unit is not None and not future.cancelled():  # cancelled: stop released it
                if future.exception() is not None:
                    error = future.exception()
                else:
                    self._units += 1
                    for message, (ok, value, started) in zip(unit, future.result()):
                        if ok is None:
                            unprepared.append(message)
                            continue
                        if not self._ready:
                            self._ready_since = time.monotonic()
                        self._ready.append((message, ok, value, started, self._units))
        if error is not None:
            for message in unit:
                self._lost(message, error)
            self._claimable()  # its group's next episode may be claimed
        for message in unprepared:
            self._release(message, self._owner)
        self._wake.set()  # room for another claim, maybe a write

    def _release(self, message: QueueMessage, owner: str) -> None:
        """Back to the queue unspent (a run stopped before it)."""
        if not self.store.available and owner == self._owner:
            self._hold(message)
            return
        try:
            q.release(self.store, message["episode_uuid"], owner)
        except Exception:  # its lease runs out and it returns
            log.exception("returning episode %s to the queue failed", message["episode_uuid"])

    def _lost(self, message: QueueMessage, error: BaseException) -> None:
        """A worker raised past its own handling: an interrupt returns the message to the
        queue; anything else counts as a failed attempt (a release would hand it out again at
        once, forever). When even that fails, the message's lease runs out and it returns."""
        uuid = message["episode_uuid"]
        if isinstance(error, StoreUnavailable) or not self.store.available:
            self._hold(message)
            return
        try:
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                log.error(
                    "preparing episode %s was interrupted (%r): returned to the queue", uuid, error
                )
                q.release(self.store, uuid, self._owner)
            else:
                self._failed(message, error, 0.0)
        except Exception:
            log.exception(
                "episode %s: recording what happened to it failed; it returns to "
                "the queue when its lease runs out",
                uuid,
            )

    def _linger_left(self) -> float:
        """How long prepared messages may still wait for others to share their commit (the
        poll interval when none is waiting)."""
        with self._unfinished_lock:
            return self._linger_left_locked() if self._ready else self.poll_seconds

    def _write_ready(self, force: bool = False) -> None:
        """Write the prepared messages in one transaction when there are ``batch_size`` of
        them, nothing else is being prepared, or the oldest has waited
        ``COMMIT_LINGER_SECONDS`` (``force``: now)."""
        with self._unfinished_lock:
            if not self._ready:
                return
            full = len(self._ready) >= self.batch_size or not self._unfinished
            if not (force or full or self._linger_left_locked() == 0):
                return
            ready, self._ready = self._ready, []
        outcomes = [(m, v, t) for m, ok, v, t, _ in ready if not ok]  # errors of preparing
        outcomes += self._commit_units(
            [(m, v, t, u) for m, ok, v, t, u in ready if ok], self._owner
        )
        for message, error, started in outcomes:
            if error is None:
                self._completed(message, started)
            elif error is not RELEASED:
                self._record_failure(message, error, started)
        self._claimable()  # their groups' next messages become heads
        self._maybe_refresh_gauges()

    def _record_failure(self, message: QueueMessage, error: BaseException, started: float) -> None:
        if isinstance(error, StoreUnavailable) or not self.store.available:
            self._hold(message)  # the outage's failure, not the episode's: no attempt spent
            return
        try:
            self._failed(message, error, time.perf_counter() - started)
        except Exception:  # its lease runs out and it returns; the others are unaffected
            log.exception(
                "episode %s: recording its failure (%s) failed; it returns to the "
                "queue when its lease runs out",
                message["episode_uuid"],
                error,
            )

    def _commit_units(
        self, written: list[tuple[QueueMessage, Any, float, int]], owner: str
    ) -> list[tuple[QueueMessage, Any, float]]:
        """Write prepared messages, each unit (a run) in one transaction with its messages in
        order; per message its error (None: written) and start."""
        units: dict[int, list[tuple[QueueMessage, Any, float]]] = {}
        for message, value, started, unit in written:
            units.setdefault(unit, []).append((message, value, started))
        if not units:
            return []
        groups = list(units.values())
        tickets = self._group.submit_many([[(m, v) for m, v, _ in group] for group in groups])
        out: list[tuple[QueueMessage, BaseException | None, float]] = []
        for ticket, group in zip(tickets, groups):
            if isinstance(ticket.error, PrepareAgain) and self._stale.again(
                m["episode_uuid"] for m, _, _ in group
            ):
                log.info("%d episodes are prepared again: %s", len(group), ticket.error)
                for message, _, started in group:
                    self._release(message, owner)
                    out.append((message, RELEASED, started))
                continue
            if ticket.error is not None and len(group) > 1 and isinstance(ticket.error, Exception):
                # a run's write failed: back to the queue, the group one at a time for a while
                self._run_failed([m for m, _, _ in group], ticket.error)
                for message, _, started in group:
                    self._release(message, owner)
                    out.append((message, RELEASED, started))
                continue
            out += [(message, ticket.error, started) for message, _, started in group]
        return out

    def _linger_left_locked(self) -> float:
        return max(0.0, self._ready_since + COMMIT_LINGER_SECONDS - time.monotonic())

    def _return_unstarted(self) -> None:
        """Stopping: claimed messages no worker has started go back to the queue."""
        with self._unfinished_lock:
            unfinished = list(self._unfinished.items())
        for future, unit in unfinished:
            if future.cancel():
                for message in unit:
                    q.release(self.store, message["episode_uuid"], self._owner)

    def _renew_unfinished(self) -> None:
        uuids = self._in_flight()
        if uuids:
            q.renew_leases(
                self.store, uuids, self._owner, self.clock() + _seconds(self.lease_seconds)
            )

    def drain(self, max_messages: int = 100_000) -> int:
        """Process due messages inline until none is left (tests, notebooks, CLI).

        The heads of up to ``batch_size`` groups are claimed, prepared up to ``concurrency``
        at a time (their LLM calls overlap), then written in one transaction.
        """
        done = 0
        while done < max_messages:
            limit = min(self.batch_size, max_messages - done)
            claimed = self._claim_and_process("inline", limit)
            if not claimed:
                break
            done += claimed
        self.refresh_gauges()
        return done

    def _claim_and_process(self, owner: str, limit: int) -> int:
        """Claim up to ``limit`` due messages, prepare them and write them together. Returns
        how many (none while the work is unavailable: ``drain`` then stops)."""
        if not self.work.available():
            return 0
        now = self.clock()
        self._requeue_expired(now)
        if self.budget is not None:
            self.budget.hold(now)
        with self.gate:
            messages = q.claim_batch(
                self.store,
                owner,
                now,
                self.lease_seconds,
                limit,
                self.run_size,
                self._single_groups(),
            )
            if messages and self._after_claim is not None:
                self._after_claim()
        if messages:
            self._process_batch(messages, owner)
        return len(messages)

    def _requeue_expired(self, now) -> None:
        """Return expired leases to the queue, at most every lease/10 (clock time); not those
        of messages this queue is still working on (it renews them; however far the clock
        jumped, they are not abandoned)."""
        every = min(self.lease_seconds / 10, 5.0)
        last = self._last_lease_check
        if last is None or (now - last).total_seconds() >= every:
            self._last_lease_check = now
            if self._shared:  # an expired lease: its process died (or stalled)
                self._recover(now, self._in_flight())
            else:
                q.requeue_expired_leases(self.store, now, self._in_flight())

    def _in_flight(self) -> list[str]:
        """Uuids of the claimed messages the dispatcher's workers prepare or it will write."""
        with self._unfinished_lock:
            return (
                [m["episode_uuid"] for unit in self._unfinished.values() for m in unit]
                + [m["episode_uuid"] for m, *_ in self._ready]
            ) + self._held.uuids()

    def _begin(self, message: QueueMessage) -> float:
        wait = (self.clock() - message["enqueued_at"]).total_seconds()
        self.metrics.record_dequeue(self.queue_name, None, wait)
        self._set_busy(+1)
        return time.perf_counter()

    def _process_batch(self, messages: list[QueueMessage], owner: str) -> None:
        """Prepare the messages (several units at a time, up to ``concurrency``: heads of
        different groups, or runs of one), then write the prepared ones together."""
        starts = {m["episode_uuid"]: self._begin(m) for m in messages}
        try:
            with self._leases_kept(messages, owner):
                units = _units(self._prefetched(messages))
                outcomes = self._map(self._prepare_unit, units)
        except BaseException:  # KeyboardInterrupt, SystemExit: nothing is lost
            for message in messages:
                q.release(self.store, message["episode_uuid"], owner)
            self._set_busy(-len(messages))
            raise
        prepared: list[tuple[QueueMessage, Any, float, int]] = []
        for number, (unit, results) in enumerate(zip(units, outcomes)):
            for message, (ok, value) in zip(unit, results):
                started = starts[message["episode_uuid"]]
                if ok:
                    prepared.append((message, value, started, number))
                    continue
                self._set_busy(-1)
                if ok is None:
                    self._release(message, owner)
                else:
                    self._failed(message, value, time.perf_counter() - started)
        if not prepared:
            return
        # written together with the batches other workers submit meanwhile: one transaction
        for message, error, started in self._commit_units(prepared, owner):
            self._set_busy(-1)
            if error is RELEASED:
                continue
            if error is not None:
                self._failed(message, error, time.perf_counter() - started)
            else:
                self._completed(message, started)
        self._maybe_refresh_gauges()

    @contextmanager
    def _leases_kept(self, messages: list[QueueMessage], owner: str) -> Iterator[None]:
        """Renew the leases every lease/3 while the messages are prepared: slow LLM calls
        (with their retries) may take longer than one lease, and an expired lease would hand a
        message that is still being worked on to another worker."""
        stop = threading.Event()
        uuids = [m["episode_uuid"] for m in messages]

        def keep() -> None:
            while not stop.wait(self.lease_seconds / 3):
                try:
                    q.renew_leases(
                        self.store, uuids, owner, self.clock() + _seconds(self.lease_seconds)
                    )
                except Exception:  # the next round tries again
                    log.exception("renewing the leases of %d messages failed", len(uuids))

        keeper = threading.Thread(target=keep, name="lease-keeper", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join(5)

    def _prefetched(self, messages: list[QueueMessage]) -> list[QueueMessage]:
        if len(messages) < 2:  # the lone message's episode is read by prepare
            return messages
        try:
            return self.work.prefetch(messages)
        except Exception:  # prepare reads what it needs itself
            log.exception("prefetching %d messages failed", len(messages))
            return messages

    def _prepare_all(
        self, messages: list[QueueMessage], parallel: bool = True
    ) -> list[tuple[bool, Any]]:
        """(True, result) or (False, error) per message, in order."""

        def one(message: QueueMessage) -> tuple[bool, Any]:
            try:
                return True, self.work.prepare(message)
            except Exception as exc:
                return False, exc

        if not parallel:
            return [one(message) for message in messages]
        return self._map(one, messages)

    def _map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        """``fn`` over the items, up to ``concurrency`` at a time, results in order."""
        if self.concurrency <= 1 or len(items) <= 1:
            return [fn(item) for item in items]
        with self._busy_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self.concurrency, thread_name_prefix="episode-prepare"
                )
        return list(self._pool.map(fn, items))

    def _write(self, units: list[list[tuple[QueueMessage, Any]]]) -> None:
        """Write the results of several units and mark their messages done, in one
        transaction (a unit's messages in order)."""
        items = [item for unit in units for item in unit]
        uuids = [message["episode_uuid"] for message, _ in items]
        seqs = [message["seq"] for message, _ in items]
        with self.gate:
            self.work.commit(
                [result for _, result in items],
                lambda: q.mark_done_many(self.store, uuids, self.clock(), seqs),
            )

    def _completed(self, message: QueueMessage, started: float) -> None:
        self._stale.forget(message["episode_uuid"])
        duration = time.perf_counter() - started
        self._avg_seconds = 0.8 * self._avg_seconds + 0.2 * duration
        end = (self.clock() - message["enqueued_at"]).total_seconds()
        self.metrics.record_processing_complete(self.queue_name, duration, True, None, end)

    def _failed(self, message: QueueMessage, exc: BaseException, duration: float) -> None:
        category = categorize(exc)
        text = f"{type(exc).__name__}: {exc}"[:2000]
        uuid = message["episode_uuid"]
        decision = decide(
            category,
            message["attempts"],
            message["validation_failures"],
            self.max_attempts,
            self.base_delay,
        )
        now = self.clock()
        seq = message.get("seq")
        if category in TRANSIENT and not self.work.available():
            self._wait_for_llm(message, category, text, now)
            return
        if decision.action == "retry":
            if not q.schedule_retry(
                self.store,
                uuid,
                now + _seconds(decision.delay),
                category,
                text,
                category == "ValidationError",
                seq,
                owner=message.get("lease_owner"),
            ):
                self._stale_failure(message, category, text)
                return
            log.warning(
                "episode %s attempt %d failed (%s), retrying in %.1fs: %s",
                uuid,
                message["attempts"],
                category,
                decision.delay,
                text,
            )
            self.metrics.record_retry(self.queue_name)
            self._on_status(uuid, "queued", f"retrying after {category}: {text}")
            return
        if not q.mark_failed(
            self.store, uuid, now, category, text, seq, owner=message.get("lease_owner")
        ):
            self._stale_failure(message, category, text)
            return
        log.error(
            "episode %s failed after %d attempts (%s): %s",
            uuid,
            message["attempts"],
            category,
            text,
        )
        self._on_status(uuid, "failed", f"{category}: {text}")
        end = (now - message["enqueued_at"]).total_seconds()
        self.metrics.record_processing_complete(self.queue_name, duration, False, category, end)

    def _wait_for_llm(self, message: QueueMessage, category: str, text: str, now) -> None:
        """The LLM is known to be down: the message waits for it without spending the
        attempt (it is claimed again once the LLM is back)."""
        uuid = message["episode_uuid"]
        if not q.schedule_retry(
            self.store,
            uuid,
            now,
            category,
            text,
            False,
            message.get("seq"),
            refund=True,
            owner=message.get("lease_owner"),
        ):
            self._stale_failure(message, category, text)
            return
        log.warning("episode %s waits for the LLM (down; attempt not counted): %s", uuid, text)
        self._on_status(uuid, "queued", f"waiting: the LLM is unavailable ({category})")

    @staticmethod
    def _stale_failure(message: QueueMessage, category: str, text: str) -> None:
        log.info(
            "episode %s: a delivery failed (%s: %s) after its message was written by "
            "another delivery, deleted, or added again; the message is left as it is",
            message["episode_uuid"],
            category,
            text,
        )

    def _on_status(self, uuid: str, status: str, detail: str) -> None:
        q.set_episode_status(self.store, [uuid], status, detail)

    def _set_busy(self, delta: int) -> None:
        with self._busy_lock:
            self._busy += delta

    def _maybe_refresh_gauges(self, every: float = 0.25) -> None:
        if time.monotonic() - self._last_gauges >= every:
            self.refresh_gauges()

    def refresh_gauges(self) -> None:
        self._last_gauges = time.monotonic()
        depth = q.depth_by_priority(self.store)
        for priority, count in depth.items():
            self.metrics.update_queue_depth(self.queue_name, count, priority)
        workers = max(1, self.concurrency)
        lag = sum(depth.values()) * self._avg_seconds / workers
        self.metrics.update_consumer_metrics(self.queue_name, self._busy, self._busy / workers, lag)

    # --- operations ---------------------------------------------------------------------
    def retry_failed(self, episode_uuids=None, group_id=None) -> list[str]:
        uuids = q.requeue_failed(self.store, self.clock(), episode_uuids, group_id)
        for uuid in uuids:
            self._on_status(uuid, "queued", "re-queued by request")
        self.refresh_gauges()
        self._claimable()
        return uuids


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


def _units(messages: list[QueueMessage]) -> list[Unit]:
    """Claimed messages as units: consecutive messages of one group (a claim returns each
    group's run together, in order) form one."""
    units: list[Unit] = []
    for message in messages:
        if units and units[-1][0]["group_id"] == message["group_id"]:
            units[-1].append(message)
        else:
            units.append([message])
    return units
