"""Setbacks of the queue that are nobody's fault, so they spend no attempt: a preparation that
went stale before its write, and a store that went away before an outcome could be recorded.

* :class:`PrepareAgain` — raised by the work's ``commit`` when the graph an episode was
  prepared against changed under it (another writer made one of its new entities meanwhile):
  nothing was written, and the messages go back to the queue unspent. :class:`StaleCounts`
  bounds that to ``STALE_LIMIT`` times in a row per episode; past it the failure counts.
* :class:`HeldMessages` — claimed messages whose outcome (a failure, a release) could not be
  written because the store was unreachable: they keep their lease (renewed with the others)
  and are released, unspent, once the store answers again.
* :class:`SingleGroups` — groups whose last run failed as a whole (whose fault is unknown):
  their messages go back unspent and the group goes one message at a time for
  ``SINGLES_SECONDS``, so a failure, if it comes again, is charged to the episode causing it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from workbench.store.queue import QueueMessage

STALE_LIMIT = 3
SINGLES_SECONDS = 300.0  # one message at a time after a group's run failed as a whole

log = logging.getLogger("workbench.ingest.queue.episode_queue")


class PrepareAgain(Exception):  # noqa: N818 - an outcome, not a fault
    """What was prepared went stale before its write: nothing was written; prepare again."""


class StaleCounts:
    """How many times in a row each episode's preparation went stale."""

    def __init__(self, limit: int = STALE_LIMIT):
        self.limit = limit
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def again(self, uuids: Iterable[str]) -> bool:
        """Count one more stale preparation of these episodes: whether they may be prepared
        again (False past the limit, which also forgets them)."""
        uuids = list(uuids)
        with self._lock:
            counts = [self._counts.get(uuid, 0) + 1 for uuid in uuids]
            if max(counts, default=0) > self.limit:
                for uuid in uuids:
                    self._counts.pop(uuid, None)
                return False
            self._counts.update(zip(uuids, counts))
            return True

    def forget(self, uuid: str) -> None:
        """The episode was written (or failed): its count starts again."""
        with self._lock:
            self._counts.pop(uuid, None)


class HeldMessages:
    """Claimed messages waiting for the store to come back (see the module docstring)."""

    def __init__(self) -> None:
        self._items: list[QueueMessage] = []
        self._lock = threading.Lock()

    def add(self, message: QueueMessage) -> None:
        with self._lock:
            self._items.append(message)

    def uuids(self) -> list[str]:
        with self._lock:
            return [m["episode_uuid"] for m in self._items]

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items = []

    def release(self, release: Callable[[str], None]) -> int:
        """``release(uuid)`` each held message; how many. When one fails, it and the ones
        after it are kept for the next call, and the error is raised."""
        with self._lock:
            held, self._items = self._items, []
        for i, message in enumerate(held):
            try:
                release(message["episode_uuid"])
            except BaseException:
                with self._lock:
                    self._items[:0] = held[i:]
                raise
        return len(held)


class SingleGroups:
    """Groups going one message at a time for a while (see the module docstring)."""

    def __init__(self, seconds: float = SINGLES_SECONDS):
        self.seconds = seconds
        self._until: dict[str, float] = {}  # group -> monotonic deadline
        self._lock = threading.Lock()

    def run_failed(self, unit: list[QueueMessage], exc: BaseException) -> None:
        """A run of ``unit``'s group failed as a whole (a run-wide step, or its write)."""
        group = unit[0]["group_id"]
        log.warning(
            "a run of %d episodes of group %s failed as a whole (%s: %s): they return to the "
            "queue and the group goes one episode at a time for %.0f s",
            len(unit),
            group,
            type(exc).__name__,
            exc,
            self.seconds,
        )
        with self._lock:
            self._until[group] = time.monotonic() + self.seconds

    def groups(self) -> list[str]:
        """The groups going one at a time now."""
        now = time.monotonic()
        with self._lock:
            self._until = {g: t for g, t in self._until.items() if t > now}
            return sorted(self._until)
