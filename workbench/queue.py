"""The durable episode queue's workers, retry policy and honest metrics.

Messages live in DuckDB (``workbench.store.queue``): an accepted episode survives crashes and
restarts. Workers are threads (LLM calls are I/O bound); each leases the head message of a
group, so a group's episodes run in order while groups run in parallel up to ``concurrency``.

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
from collections.abc import Callable
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


class EpisodeQueue:
    """Worker pool over the durable queue. ``processor(message)`` does the work."""

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
    ):
        self.store = store
        self.processor = processor
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
        """Claim and process one due message; False when there was none."""
        now = self.clock()
        self._requeue_expired(now)
        message = q.claim_next(self.store, owner, now, self.lease_seconds)
        if message is None:
            return False
        self._process(message, owner)
        return True

    def drain(self, max_messages: int = 100_000) -> int:
        """Process due messages inline until none is left (tests, notebooks, CLI)."""
        done = 0
        while done < max_messages and self.run_once():
            done += 1
        self.refresh_gauges()
        return done

    def _requeue_expired(self, now) -> None:
        """Return expired leases to the queue, at most every lease/10 (clock time)."""
        every = min(self.lease_seconds / 10, 5.0)
        last = self._last_lease_check
        if last is None or (now - last).total_seconds() >= every:
            self._last_lease_check = now
            q.requeue_expired_leases(self.store, now)

    def _process(self, message: dict[str, Any], owner: str) -> None:
        started = time.perf_counter()
        now = self.clock()
        wait = (now - message["enqueued_at"]).total_seconds()
        self.metrics.record_dequeue(QUEUE_NAME, None, wait)
        self._set_busy(+1)
        try:
            self.processor(message)
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                q.release(self.store, message["episode_uuid"], owner)
                raise
            self._failed(message, exc, time.perf_counter() - started)
        else:
            duration = time.perf_counter() - started
            self._avg_seconds = 0.8 * self._avg_seconds + 0.2 * duration
            end = (self.clock() - message["enqueued_at"]).total_seconds()
            self.metrics.record_processing_complete(QUEUE_NAME, duration, True, None, end)
        finally:
            self._set_busy(-1)
            self._maybe_refresh_gauges()

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
