"""The durable episode queue's workers, retry policy and honest metrics.

Messages live in DuckDB (``workbench.store.queue``): an accepted episode survives crashes and
restarts. Workers are threads (LLM calls are I/O bound); each leases the head message of a
group, so a group's episodes run in order while groups run in parallel up to ``concurrency``.

With a ``commit`` function the processor only prepares (LLM calls, reads) and the queue writes:
episodes finished at the same time share one transaction (group commit: a worker that finds a
commit in progress queues its result for the next one), and ``drain`` claims the heads of up to
``batch_size`` groups at once and writes them together. DuckDB charges ~1–3 ms per commit and
~0.5 ms per statement, so this is what lets ingestion keep up with a fast LLM.

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
from contextlib import AbstractContextManager, contextmanager
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
        self._threads: list[threading.Thread] = []
        self._busy = 0
        self._busy_lock = threading.Lock()
        self._avg_seconds = 1.0
        self._last_lease_check = None
        self._last_gauges = 0.0
        self._waiting_groups = 0  # groups with queued messages at the last gauge refresh

    # --- producer side ------------------------------------------------------------------
    def notify_enqueued(self, priority: int) -> None:
        self.metrics.record_enqueue(QUEUE_NAME, PRIORITY_NAMES.get(priority, "normal"))
        self._wake.set()

    # --- worker side --------------------------------------------------------------------
    def start(self) -> None:
        if self._threads:
            return
        released = q.release_all(self.store)
        if released:
            log.warning("returned %d in-flight episodes of a previous run to the queue", released)
        self._stop.clear()
        for i in range(self.concurrency):
            t = threading.Thread(target=self._loop, name=f"episode-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)
        self.refresh_gauges()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop claiming, let in-flight episodes finish up to ``timeout``, release the rest."""
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]
        if self._threads:
            log.warning("%d episodes still running at stop: released to the queue",
                        len(self._threads))
            q.release_all(self.store)
        self._threads = []
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.refresh_gauges()

    @property
    def running(self) -> bool:
        return bool(self._threads)

    def _loop(self) -> None:
        owner = f"{threading.current_thread().name}-{uuidlib.uuid4().hex[:6]}"
        while not self._stop.is_set():
            try:
                worked = self.run_once(owner)
            except Exception:  # never let a worker die: log and keep going
                log.exception("queue worker error")
                worked = False
            if not worked:
                self._wake.wait(self.poll_seconds)
                self._wake.clear()

    def run_once(self, owner: str = "inline") -> bool:
        """Claim and process due messages (one, or a share of a backlog: :meth:`claim_size`);
        False when there was none."""
        return self._claim_and_process(owner, self.claim_size(), parallel=False) > 0

    def claim_size(self) -> int:
        """How many messages a worker claims: one, or when many groups are waiting its share of
        them, up to ``batch_size / concurrency``, so that workers write several episodes per
        transaction when there is a queue to drain while every worker still finds work."""
        if self.commit is None:
            return 1
        workers = max(1, self.concurrency)
        return max(1, min(self.batch_size // workers, self._waiting_groups // workers))

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
        """Return expired leases to the queue, at most every lease/10 (clock time)."""
        every = min(self.lease_seconds / 10, 5.0)
        last = self._last_lease_check
        if last is None or (now - last).total_seconds() >= every:
            self._last_lease_check = now
            q.requeue_expired_leases(self.store, now)

    def _begin(self, message: dict[str, Any]) -> float:
        wait = (self.clock() - message["enqueued_at"]).total_seconds()
        self.metrics.record_dequeue(QUEUE_NAME, None, wait)
        self._set_busy(+1)
        return time.perf_counter()

    def _process(self, message: dict[str, Any], owner: str) -> None:
        started = self._begin(message)
        try:
            with self._leases_kept([message], owner):  # slow LLM calls outlast one lease
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
        with self.gate:
            self.commit([result for _, result in items],
                        lambda: q.mark_done_many(self.store, uuids, self.clock()))

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
        if decision.action == "retry":
            log.warning("episode %s attempt %d failed (%s), retrying in %.1fs: %s", uuid,
                        message["attempts"], category, decision.delay, text)
            self.metrics.record_retry(QUEUE_NAME)
            q.schedule_retry(self.store, uuid, now + _seconds(decision.delay), category, text,
                             category == "ValidationError")
            self._on_status(uuid, "queued", f"retrying after {category}: {text}")
            return
        log.error("episode %s failed after %d attempts (%s): %s", uuid, message["attempts"],
                  category, text)
        q.mark_failed(self.store, uuid, now, category, text)
        self._on_status(uuid, "failed", f"{category}: {text}")
        end = (now - message["enqueued_at"]).total_seconds()
        self.metrics.record_processing_complete(QUEUE_NAME, duration, False, category, end)

    def _on_status(self, uuid: str, status: str, detail: str) -> None:
        self.store.execute(
            "UPDATE episodes SET status = ?, status_detail = ? WHERE uuid = ?",
            [status, detail, uuid])

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
        self._waiting_groups = q.waiting_groups(self.store) if self.commit else 0
        lag = sum(depth.values()) * self._avg_seconds / workers
        self.metrics.update_consumer_metrics(QUEUE_NAME, self._busy, self._busy / workers, lag)

    # --- operations ---------------------------------------------------------------------
    def retry_failed(self, episode_uuids=None, group_id=None) -> list[str]:
        uuids = q.requeue_failed(self.store, self.clock(), episode_uuids, group_id)
        for uuid in uuids:
            self._on_status(uuid, "queued", "re-queued by request")
        self.refresh_gauges()
        self._wake.set()
        return uuids


def _seconds(value: float):
    from datetime import timedelta

    return timedelta(seconds=value)
