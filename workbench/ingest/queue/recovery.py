"""Messages whose process died go back to the queue (or fail, in a crash loop).

At start-up every message in flight on a file belongs to a process that died (a file has one
process); on a store shared by several processes only those whose lease ran out do (their
process stopped renewing it). While running, expired leases are looked for at most every
lease/10 (clock time), never taking the messages this process still works on: it renews their
leases, however far the clock jumped (:func:`~workbench.store.queue.recover_crashed`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store import queue as q

__all__ = ["Recovery"]

log = logging.getLogger("workbench.ingest.queue.episode_queue")


class Recovery:
    """Returns the messages of stopped processes to the queue (see the module docstring)."""

    def __init__(
        self, store: Store, metrics: Metrics, lease_seconds: float, max_crashes: int, label: str
    ):
        self.store = store
        self.metrics = metrics
        self.lease_seconds = lease_seconds
        self.max_crashes = max_crashes
        self.label = label  # the queue_name of the metrics
        self._last_check: datetime | None = None

    def recover(self, now: datetime, keep: Sequence[str] = ()) -> None:
        """Return the messages of a process that died to the queue, counting a crash each."""
        released, crashed = q.recover_crashed(
            self.store, now, self.max_crashes, expired_only=self.store.shared, keep=keep
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
            self.metrics.record_processing_complete(self.label, 0.0, False, "UnknownError", None)

    def requeue_expired(self, now: datetime, keep: Sequence[str]) -> None:
        """Return expired leases to the queue, at most every lease/10 (clock time), except
        ``keep`` (the messages this queue is still working on)."""
        every = min(self.lease_seconds / 10, 5.0)
        last = self._last_check
        if last is not None and (now - last).total_seconds() < every:
            return
        self._last_check = now
        if self.store.shared:  # an expired lease: its process died (or stalled)
            self.recover(now, keep)
        else:
            q.requeue_expired_leases(self.store, now, keep)
