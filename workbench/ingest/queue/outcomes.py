"""What happened to a claimed message, recorded: written, retried later, failed for good, or
waiting for the LLM; and the queue's gauges (depth, busy workers, estimated lag).

:class:`Outcomes` applies :mod:`workbench.ingest.queue.retry` to a failure (a transient failure
while the LLM is known to be down spends no attempt) and writes the message's new state and its
episode's status; a message another delivery wrote, deleted or added again meanwhile is left
as it is. :class:`QueueGauges` counts the messages being prepared and keeps a moving average of
an episode's duration for the lag estimate.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from workbench.clock import Clock
from workbench.ingest.queue.retry import TRANSIENT, categorize, decide
from workbench.ingest.queue.setbacks import StaleCounts
from workbench.ingest.queue.work import EpisodeWork
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store import queue as q
from workbench.store.queue import QueueMessage
from workbench.store.schema import PRIORITY_NAMES

__all__ = ["Outcomes", "QueueGauges"]

log = logging.getLogger("workbench.ingest.queue.episode_queue")


class QueueGauges:
    """The queue's depth, busy and lag gauges, and the counts behind them."""

    def __init__(self, store: Store, metrics: Metrics, concurrency: int, label: str):
        self.store = store
        self.metrics = metrics
        self.concurrency = concurrency
        self.label = label
        self.busy = 0  # messages being prepared
        self.avg_seconds = 1.0  # moving average of an episode's duration
        self._lock = threading.Lock()
        self._last = 0.0

    def enqueued(self, priority: int) -> None:
        self.metrics.record_enqueue(self.label, PRIORITY_NAMES.get(priority, "normal"))

    def begin(self, message: QueueMessage, now: datetime) -> float:
        """A message's preparation starts: its wait is recorded; returns its start."""
        wait = (now - message["enqueued_at"]).total_seconds()
        self.metrics.record_dequeue(self.label, None, wait)
        self.add_busy(+1)
        return time.perf_counter()

    def add_busy(self, delta: int) -> None:
        with self._lock:
            self.busy += delta

    def took(self, duration: float) -> None:
        self.avg_seconds = 0.8 * self.avg_seconds + 0.2 * duration

    def maybe_refresh(self, every: float = 0.25) -> None:
        if time.monotonic() - self._last >= every:
            self.refresh()

    def refresh(self) -> None:
        self._last = time.monotonic()
        depth = q.depth_by_priority(self.store)
        for priority, count in depth.items():
            self.metrics.update_queue_depth(self.label, count, priority)
        workers = max(1, self.concurrency)
        lag = sum(depth.values()) * self.avg_seconds / workers
        self.metrics.update_consumer_metrics(self.label, self.busy, self.busy / workers, lag)


class Outcomes:
    """Records what happened to claimed messages (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        work: EpisodeWork,
        gauges: QueueGauges,
        max_attempts: int,
        base_delay: float,
    ):
        self.store = store
        self.clock = clock
        self.work = work
        self.gauges = gauges
        self.metrics = gauges.metrics
        self.max_attempts = max_attempts
        self.base_delay = base_delay
        self.stale = StaleCounts()  # preparations gone stale in a row (PrepareAgain)

    def completed(self, message: QueueMessage, started: float) -> None:
        self.stale.forget(message["episode_uuid"])
        duration = time.perf_counter() - started
        self.gauges.took(duration)
        end = (self.clock() - message["enqueued_at"]).total_seconds()
        self.metrics.record_processing_complete(self.gauges.label, duration, True, None, end)

    def failed(self, message: QueueMessage, exc: BaseException, duration: float) -> None:
        """A failed attempt: retried after a delay, or failed for good (``retry``)."""
        category = categorize(exc)
        text = f"{type(exc).__name__}: {exc}"[:2000]
        uuid = message["episode_uuid"]
        now = self.clock()
        if category in TRANSIENT and not self.work.available():
            self._wait_for_llm(message, category, text, now)
            return
        decision = decide(
            category,
            message["attempts"],
            message["validation_failures"],
            self.max_attempts,
            self.base_delay,
        )
        owner = message.get("lease_owner")
        if decision.action == "retry":
            due = now + timedelta(seconds=decision.delay)
            validation = category == "ValidationError"
            seq = message.get("seq")
            if not q.schedule_retry(
                self.store, uuid, due, category, text, validation, seq, owner=owner
            ):
                self._stale(message, category, text)
                return
            log.warning(
                "episode %s attempt %d failed (%s), retrying in %.1fs: %s",
                uuid,
                message["attempts"],
                category,
                decision.delay,
                text,
            )
            self.metrics.record_retry(self.gauges.label)
            self.status(uuid, "queued", f"retrying after {category}: {text}")
            return
        if not q.mark_failed(
            self.store, uuid, now, category, text, message.get("seq"), owner=owner
        ):
            self._stale(message, category, text)
            return
        log.error(
            "episode %s failed after %d attempts (%s): %s",
            uuid,
            message["attempts"],
            category,
            text,
        )
        self.status(uuid, "failed", f"{category}: {text}")
        end = (now - message["enqueued_at"]).total_seconds()
        self.metrics.record_processing_complete(self.gauges.label, duration, False, category, end)

    def _wait_for_llm(self, message: QueueMessage, category: str, text: str, now: datetime) -> None:
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
            self._stale(message, category, text)
            return
        log.warning("episode %s waits for the LLM (down; attempt not counted): %s", uuid, text)
        self.status(uuid, "queued", f"waiting: the LLM is unavailable ({category})")

    @staticmethod
    def _stale(message: QueueMessage, category: str, text: str) -> None:
        log.info(
            "episode %s: a delivery failed (%s: %s) after its message was written by "
            "another delivery, deleted, or added again; the message is left as it is",
            message["episode_uuid"],
            category,
            text,
        )

    def status(self, uuid: str, status: str, detail: str) -> None:
        q.set_episode_status(self.store, [uuid], status, detail)
