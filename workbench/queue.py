"""The durable episode queue's workers, retry policy and honest metrics.

Messages live in DuckDB (``workbench.store.queue``): an accepted episode survives crashes and
restarts. Only the head message of a group is ever leased, so a group's episodes run in order
while groups run in parallel up to ``concurrency``.

In the background (:meth:`EpisodeQueue.start`) one dispatcher thread claims messages for a pool
of ``concurrency`` worker threads (LLM calls are I/O bound): whenever no more than
``concurrency`` claimed messages are being prepared it claims the heads of up to ``2 ×
concurrency`` minus those, in one transaction, reads what they need in a few queries, and
renews the leases of every unfinished message. One claim serves several workers (a claim costs
~5–10 ms of DuckDB work however many messages it takes), and a worker never waits for a claim.

With a ``commit`` function the processor only prepares (LLM calls, reads) and the queue writes.
A worker hands what it prepared to the dispatcher and takes its next message; the dispatcher
writes the prepared episodes in one transaction once there are ``batch_size`` of them, nothing
else is being prepared, or the oldest has waited ``COMMIT_LINGER_SECONDS`` (a group's next
episode waits for that write: it must see what the previous one wrote). ``drain`` claims the
heads of up to ``batch_size`` groups at once and writes them together. DuckDB charges ~20 ms
per transaction of an episode batch however many episodes it holds (each statement costs
~1–6 ms), so this is what lets ingestion keep up with a fast LLM.

Retry policy (pure, :func:`decide`): rate limit, timeout and connection errors retry with
exponential backoff and jitter up to ``max_attempts``; a validation error is retried at most
once; anything else fails at once. Failed messages keep their category and message and can be
re-queued (:meth:`EpisodeQueue.retry_failed`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import duckdb
import pydantic

from workbench import errors
from workbench.clock import Clock
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store import queue as q
from workbench.store.schema import PRIORITY_NAMES

log = logging.getLogger("workbench.queue")

QUEUE_NAME = "episodes"
CATEGORIES = ("ConnectionError", "ValidationError", "TimeoutError", "RateLimitError",
              "UnknownError")
TRANSIENT = {"ConnectionError", "TimeoutError", "RateLimitError"}
# how long a prepared episode may wait for others to share its commit while more are being
# prepared: a commit costs ~20 ms of DuckDB work however many episodes it writes
COMMIT_LINGER_SECONDS = 0.2


def categorize(exc: BaseException) -> str:
    """The spec's coarse ``error_type`` for a failure."""
    if isinstance(exc, errors.LLMRateLimited):
        return "RateLimitError"
    if isinstance(exc, (errors.LLMTimeout, TimeoutError)):
        return "TimeoutError"
    if isinstance(exc, (errors.LLMTransientError, errors.EmbedderError, ConnectionError,
                        duckdb.IOException, errors.StoreError)):
        return "ConnectionError"
    if isinstance(exc, (errors.StructuredOutputError, errors.InvalidInput, ValueError,
                        pydantic.ValidationError)):
        return "ValidationError"
    name = type(exc).__name__.lower()
    if "ratelimit" in name:
        return "RateLimitError"
    if "timeout" in name:
        return "TimeoutError"
    if "connection" in name:
        return "ConnectionError"
    return "UnknownError"


@dataclass(frozen=True)
class Decision:
    action: str          # "retry" or "fail"
    delay: float = 0.0


def decide(category: str, attempts: int, validation_failures: int, max_attempts: int,
           base_delay: float = 2.0, max_delay: float = 300.0,
           rand: Callable[[], float] = random.random) -> Decision:
    """What to do after a failed attempt (``attempts`` counts the one that just failed)."""
    if category in TRANSIENT and attempts < max_attempts:
        delay = min(max_delay, base_delay * 2 ** (attempts - 1))
        return Decision("retry", delay * (0.5 + rand()))
    if category == "ValidationError" and validation_failures < 1:
        return Decision("retry", 0.0)
    return Decision("fail")


class GroupCommit:
    """Leader/follower batching of writes: ``submit(item)`` returns once ``write(items)`` has
    written ``item``, together with whatever other threads submitted meanwhile.

    The first submitter becomes the leader and writes everything pending; the others wait for
    it (and the next leader takes what arrived during that write). When a batch fails, its
    items are written one by one so one bad item fails alone; ``submit`` raises that item's
    error in its own thread (``submit_many``: a worker's batch, each item's error on its
    ticket). Queue workers submit their batches here, so the episodes several workers finish
    at about the same time share one transaction.
    """

    def __init__(self, write: Callable[[list[Any]], None], max_batch: int = 16):
        self._write = write
        self.max_batch = max(1, max_batch)
        self._cv = threading.Condition()
        self._pending: list[_Ticket] = []
        self._leading = False

    def submit(self, item: Any) -> None:
        self.submit_many([item])[0].result()

    def submit_many(self, items: list[Any]) -> list[_Ticket]:
        """Like :meth:`submit` for several items (written together with whatever else is
        pending); returns their tickets, each with its own ``error`` (None when written)."""
        tickets = [_Ticket(item) for item in items]
        if not tickets:
            return tickets
        with self._cv:
            self._pending.extend(tickets)
        while True:  # lead batches (oldest first) until these tickets are all written
            with self._cv:
                while not tickets[-1].done and self._leading:
                    self._cv.wait()
                if tickets[-1].done:  # batches are taken oldest first: the rest are done
                    break
                self._leading = True
                batch = self._pending[: self.max_batch]
                self._pending = self._pending[self.max_batch :]
            try:
                self.write_batch(batch)
            finally:
                with self._cv:
                    self._leading = False
                    self._cv.notify_all()
        return tickets

    def write_batch(self, tickets: list[_Ticket]) -> None:
        try:
            self._write([t.item for t in tickets])
        except BaseException as exc:
            if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: none written
                for ticket in tickets:
                    ticket.error, ticket.done = exc, True
                raise
            if len(tickets) == 1:
                tickets[0].error = exc
            else:
                log.warning("a batch of %d writes failed (%s): writing them one by one",
                            len(tickets), exc)
                for ticket in tickets:
                    try:
                        self._write([ticket.item])
                    except Exception as one:
                        ticket.error = one
        for ticket in tickets:
            ticket.done = True


@dataclass
class _Ticket:
    item: Any
    done: bool = False
    error: BaseException | None = None

    def result(self) -> None:
        if self.error is not None:
            raise self.error


class EpisodeQueue:
    """Worker pool over the durable queue.

    Without ``commit``, ``processor(message)`` does all the work (and acknowledges). With it,
    ``processor(message)`` returns a result and ``commit(results, ack)`` writes results of
    one or more messages in one transaction, calling ``ack()`` inside it.
    """

    def __init__(
        self,
        store: Store,
        processor: Callable[[dict[str, Any]], None],
        metrics: Metrics,
        clock: Clock,
        concurrency: int = 4,
        lease_seconds: float = 300.0,
        max_attempts: int = 6,
        poll_seconds: float = 0.5,
        base_delay: float = 2.0,
        commit: Callable[[list[Any], Callable[[], None]], None] | None = None,
        batch_size: int = 16,
        prefetch: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
        gate: AbstractContextManager[Any] | None = None,
    ):
        self.store = store
        # held while claiming and while committing (until the commit's search-index updates
        # are done): a claimed episode sees everything written before it, in particular the
        # previous episode of its group (see workbench.graph_reads)
        self.gate = gate if gate is not None else threading.RLock()
        self.processor = processor
        self.commit = commit
        self.prefetch = prefetch  # reads a claimed batch needs, in a few queries for all
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
        # the dispatcher's: claimed messages being prepared (future -> message), and prepared
        # ones waiting to be written together: (message, ok, result or error, start)
        self._unfinished: dict[Any, dict[str, Any]] = {}
        self._ready: list[tuple[dict[str, Any], bool, Any, float]] = []
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

    # --- producer side ------------------------------------------------------------------
    def notify_enqueued(self, priority: int) -> None:
        self.metrics.record_enqueue(QUEUE_NAME, PRIORITY_NAMES.get(priority, "normal"))
        self._claimable()

    # --- worker side --------------------------------------------------------------------
    def start(self) -> None:
        if self._threads:
            return
        released = q.release_all(self.store)
        if released:
            log.warning("returned %d in-flight episodes of a previous run to the queue", released)
        self._stop.clear()
        self._abandon = False
        with self._unfinished_lock:
            self._unfinished, self._ready = {}, []
        self._may_claim = True
        self._run += 1  # a dispatcher of an earlier, abandoned run exits at its next turn
        self._owner = f"dispatcher-{uuidlib.uuid4().hex[:6]}"
        self._workers = ThreadPoolExecutor(self.concurrency, thread_name_prefix="episode-worker")
        t = threading.Thread(target=self._dispatch, args=(self._run,), name="episode-dispatcher",
                             daemon=True)
        t.start()
        self._threads = [t]
        self.refresh_gauges()

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
            q.release_all(self.store)
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
            try:
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

    def _claim_for_workers(self) -> int:
        """Claim and hand out messages when at most ``concurrency`` are being prepared."""
        with self._unfinished_lock:
            preparing = len(self._unfinished)
        room = 2 * self.concurrency - preparing
        if preparing > self.concurrency or room <= 0 or not self._may_claim:
            return 0
        events = self._claim_events
        self._last_claim = time.monotonic()
        now = self.clock()
        self._requeue_expired(now)
        with self.gate:
            if self._stop.is_set() or self._abandon:  # stopped while waiting for the gate
                return 0
            messages, more = q.claim_heads(self.store, self._owner, now, self.lease_seconds,
                                           room)
        if not more and events == self._claim_events:
            self._may_claim = False  # every runnable head is taken: no use asking again yet
        handed = 0
        try:
            for message in self._prefetched(messages):
                pool = self._workers
                if pool is None:
                    raise RuntimeError("the worker pool is shut down")
                with self._unfinished_lock:
                    future = pool.submit(self._work, message)
                    self._unfinished[future] = message
                future.add_done_callback(self._prepared)
                handed += 1
        except BaseException:  # nothing claimed stays leased to nobody
            for message in messages[handed:]:
                q.release(self.store, message["episode_uuid"], self._owner)
            raise
        return len(messages)

    def _work(self, message: dict[str, Any]) -> tuple[bool, Any, float] | None:
        """A worker's part: prepare (with a ``commit`` function; the dispatcher writes) or
        process the message. Returns (ok, result or error, start) to be written, or None."""
        if self.commit is None:
            self._process(message, self._owner, keep_leases=False)  # the dispatcher renews
            return None
        started = self._begin(message)
        try:
            ok, value = self._prepare_all([message], parallel=False)[0]
        finally:
            self._set_busy(-1)
        return ok, value, started

    def _prepared(self, future) -> None:
        """Done callback: a prepared message joins the ones waiting to be written."""
        error = None
        finished = False
        with self._unfinished_lock:
            message = self._unfinished.pop(future, None)  # None: of a run stopped since
            if message is not None and not future.cancelled():  # cancelled: stop released it
                if future.exception() is not None:
                    error = future.exception()
                elif future.result() is not None:
                    if not self._ready:
                        self._ready_since = time.monotonic()
                    self._ready.append((message, *future.result()))
                else:
                    finished = True  # processed and acknowledged (no commit function)
        if error is not None:
            self._lost(message, error)
        if finished or error is not None:
            self._claimable()  # its group's next episode may be claimed
        self._wake.set()  # room for another claim, maybe a write

    def _lost(self, message: dict[str, Any], error: BaseException) -> None:
        """A worker raised past its own handling: an interrupt returns the message to the
        queue; anything else counts as a failed attempt (a release would hand it out again at
        once, forever). When even that fails, the message's lease runs out and it returns."""
        uuid = message["episode_uuid"]
        try:
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                log.error("preparing episode %s was interrupted (%r): returned to the queue",
                          uuid, error)
                q.release(self.store, uuid, self._owner)
            else:
                self._failed(message, error, 0.0)
        except Exception:
            log.exception("episode %s: recording what happened to it failed; it returns to "
                          "the queue when its lease runs out", uuid)

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
        written = [(m, v, t) for m, ok, v, t in ready if ok]
        outcomes = [(m, v, t) for m, ok, v, t in ready if not ok]  # errors of preparing
        if written:
            tickets = self._group.submit_many([(m, v) for m, v, _ in written])
            outcomes += [(m, t.error, started)
                         for t, (m, _, started) in zip(tickets, written)]
        for message, error, started in outcomes:
            if error is None:
                self._completed(message, started)
            else:
                self._record_failure(message, error, started)
        self._claimable()  # their groups' next messages become heads
        self._maybe_refresh_gauges()

    def _record_failure(self, message: dict[str, Any], error: BaseException,
                        started: float) -> None:
        try:
            self._failed(message, error, time.perf_counter() - started)
        except Exception:  # its lease runs out and it returns; the others are unaffected
            log.exception("episode %s: recording its failure (%s) failed; it returns to the "
                          "queue when its lease runs out", message["episode_uuid"], error)

    def _linger_left_locked(self) -> float:
        return max(0.0, self._ready_since + COMMIT_LINGER_SECONDS - time.monotonic())

    def _return_unstarted(self) -> None:
        """Stopping: claimed messages no worker has started go back to the queue."""
        with self._unfinished_lock:
            unfinished = list(self._unfinished.items())
        for future, message in unfinished:
            if future.cancel():
                q.release(self.store, message["episode_uuid"], self._owner)

    def _renew_unfinished(self) -> None:
        uuids = self._in_flight()
        if uuids:
            q.renew_leases(self.store, uuids, self._owner,
                           self.clock() + _seconds(self.lease_seconds))

    def run_once(self, owner: str = "inline") -> bool:
        """Claim and process the next due message, inline; False when there was none."""
        return self._claim_and_process(owner, 1, parallel=False) > 0

    def drain(self, max_messages: int = 100_000) -> int:
        """Process due messages inline until none is left (tests, notebooks, CLI).

        With a ``commit`` function, the heads of up to ``batch_size`` groups are claimed,
        prepared up to ``concurrency`` at a time (their LLM calls overlap), then written in one
        transaction.
        """
        done = 0
        while done < max_messages:
            limit = min(self.batch_size if self.commit else 1, max_messages - done)
            claimed = self._claim_and_process("inline", limit, parallel=True)
            if not claimed:
                break
            done += claimed
        self.refresh_gauges()
        return done

    def _claim_and_process(self, owner: str, limit: int, parallel: bool) -> int:
        """Claim up to ``limit`` due messages and process them: one on its own, several as a
        batch (prepared ``parallel`` or one after the other). Returns how many."""
        now = self.clock()
        self._requeue_expired(now)
        with self.gate:
            messages = q.claim_batch(self.store, owner, now, self.lease_seconds, limit)
        if len(messages) == 1:
            self._process(messages[0], owner)
        elif messages:
            self._process_batch(messages, owner, parallel)
        return len(messages)

    def _requeue_expired(self, now) -> None:
        """Return expired leases to the queue, at most every lease/10 (clock time); not those
        of messages this queue is still working on (it renews them; however far the clock
        jumped, they are not abandoned)."""
        every = min(self.lease_seconds / 10, 5.0)
        last = self._last_lease_check
        if last is None or (now - last).total_seconds() >= every:
            self._last_lease_check = now
            q.requeue_expired_leases(self.store, now, self._in_flight())

    def _in_flight(self) -> list[str]:
        """Uuids of the claimed messages the dispatcher's workers prepare or it will write."""
        with self._unfinished_lock:
            return ([m["episode_uuid"] for m in self._unfinished.values()]
                    + [m["episode_uuid"] for m, *_ in self._ready])

    def _begin(self, message: dict[str, Any]) -> float:
        wait = (self.clock() - message["enqueued_at"]).total_seconds()
        self.metrics.record_dequeue(QUEUE_NAME, None, wait)
        self._set_busy(+1)
        return time.perf_counter()

    def _process(self, message: dict[str, Any], owner: str, keep_leases: bool = True) -> None:
        started = self._begin(message)
        try:
            # slow LLM calls outlast one lease
            with self._leases_kept([message], owner) if keep_leases else nullcontext():
                result = self.processor(message)
                if self.commit is not None:
                    self._group.submit((message, result))
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                q.release(self.store, message["episode_uuid"], owner)
                raise
            self._failed(message, exc, time.perf_counter() - started)
        else:
            self._completed(message, started)
        finally:
            self._set_busy(-1)
            self._maybe_refresh_gauges()

    def _process_batch(self, messages: list[dict[str, Any]], owner: str,
                       parallel: bool = True) -> None:
        """Prepare the messages (``parallel``: several at a time, up to ``concurrency``; they
        are heads of different groups), then write the prepared ones together."""
        starts = [self._begin(message) for message in messages]
        try:
            with self._leases_kept(messages, owner):
                outcomes = self._prepare_all(self._prefetched(messages), parallel)
        except BaseException:  # KeyboardInterrupt, SystemExit: nothing is lost
            for message in messages:
                q.release(self.store, message["episode_uuid"], owner)
            self._set_busy(-len(messages))
            raise
        prepared: list[tuple[dict[str, Any], Any, float]] = []
        for message, started, (ok, value) in zip(messages, starts, outcomes):
            if ok:
                prepared.append((message, value, started))
            else:
                self._set_busy(-1)
                self._failed(message, value, time.perf_counter() - started)
        if not prepared:
            return
        # written together with the batches other workers submit meanwhile: one transaction
        tickets = self._group.submit_many([(message, result) for message, result, _ in prepared])
        for ticket, (message, _, started) in zip(tickets, prepared):
            self._set_busy(-1)
            if ticket.error is not None:
                self._failed(message, ticket.error, time.perf_counter() - started)
            else:
                self._completed(message, started)
        self._maybe_refresh_gauges()

    @contextmanager
    def _leases_kept(self, messages: list[dict[str, Any]], owner: str) -> Iterator[None]:
        """Renew the leases every lease/3 while the messages are prepared: slow LLM calls
        (with their retries) may take longer than one lease, and an expired lease would hand a
        message that is still being worked on to another worker."""
        stop = threading.Event()
        uuids = [m["episode_uuid"] for m in messages]

        def keep() -> None:
            while not stop.wait(self.lease_seconds / 3):
                try:
                    q.renew_leases(self.store, uuids, owner,
                                   self.clock() + _seconds(self.lease_seconds))
                except Exception:  # the next round tries again
                    log.exception("renewing the leases of %d messages failed", len(uuids))

        keeper = threading.Thread(target=keep, name="lease-keeper", daemon=True)
        keeper.start()
        try:
            yield
        finally:
            stop.set()
            keeper.join(5)

    def _prefetched(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.prefetch is None or len(messages) < 2:
            return messages
        try:
            return self.prefetch(messages)
        except Exception:  # the processor reads what it needs itself
            log.exception("prefetching %d messages failed", len(messages))
            return messages

    def _prepare_all(self, messages: list[dict[str, Any]],
                     parallel: bool = True) -> list[tuple[bool, Any]]:
        """(True, result) or (False, error) per message, in order."""

        def one(message: dict[str, Any]) -> tuple[bool, Any]:
            try:
                return True, self.processor(message)
            except Exception as exc:
                return False, exc

        if not parallel or self.concurrency <= 1 or len(messages) == 1:
            return [one(message) for message in messages]
        with self._busy_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency,
                                                thread_name_prefix="episode-prepare")
        return list(self._pool.map(one, messages))

    def _write(self, items: list[tuple[dict[str, Any], Any]]) -> None:
        """Write results of several messages and mark them done, in one transaction."""
        uuids = [message["episode_uuid"] for message, _ in items]
        seqs = [message["seq"] for message, _ in items]
        with self.gate:
            self.commit([result for _, result in items],
                        lambda: q.mark_done_many(self.store, uuids, self.clock(), seqs))

    def _completed(self, message: dict[str, Any], started: float) -> None:
        duration = time.perf_counter() - started
        self._avg_seconds = 0.8 * self._avg_seconds + 0.2 * duration
        end = (self.clock() - message["enqueued_at"]).total_seconds()
        self.metrics.record_processing_complete(QUEUE_NAME, duration, True, None, end)

    def _failed(self, message: dict[str, Any], exc: BaseException, duration: float) -> None:
        category = categorize(exc)
        text = f"{type(exc).__name__}: {exc}"[:2000]
        uuid = message["episode_uuid"]
        decision = decide(category, message["attempts"], message["validation_failures"],
                          self.max_attempts, self.base_delay)
        now = self.clock()
        seq = message.get("seq")
        if decision.action == "retry":
            if not q.schedule_retry(self.store, uuid, now + _seconds(decision.delay), category,
                                    text, category == "ValidationError", seq):
                self._stale_failure(message, category, text)
                return
            log.warning("episode %s attempt %d failed (%s), retrying in %.1fs: %s", uuid,
                        message["attempts"], category, decision.delay, text)
            self.metrics.record_retry(QUEUE_NAME)
            self._on_status(uuid, "queued", f"retrying after {category}: {text}")
            return
        if not q.mark_failed(self.store, uuid, now, category, text, seq):
            self._stale_failure(message, category, text)
            return
        log.error("episode %s failed after %d attempts (%s): %s", uuid, message["attempts"],
                  category, text)
        self._on_status(uuid, "failed", f"{category}: {text}")
        end = (now - message["enqueued_at"]).total_seconds()
        self.metrics.record_processing_complete(QUEUE_NAME, duration, False, category, end)

    @staticmethod
    def _stale_failure(message: dict[str, Any], category: str, text: str) -> None:
        log.info("episode %s: a delivery failed (%s: %s) after its message was written by "
                 "another delivery, deleted, or added again; the message is left as it is",
                 message["episode_uuid"], category, text)

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
            self.metrics.update_queue_depth(QUEUE_NAME, count, priority)
        workers = max(1, self.concurrency)
        lag = sum(depth.values()) * self._avg_seconds / workers
        self.metrics.update_consumer_metrics(QUEUE_NAME, self._busy, self._busy / workers, lag)

    # --- operations ---------------------------------------------------------------------
    def retry_failed(self, episode_uuids=None, group_id=None) -> list[str]:
        uuids = q.requeue_failed(self.store, self.clock(), episode_uuids, group_id)
        for uuid in uuids:
            self._on_status(uuid, "queued", "re-queued by request")
        self.refresh_gauges()
        self._claimable()
        return uuids


def _seconds(value: float):
    from datetime import timedelta

    return timedelta(seconds=value)
