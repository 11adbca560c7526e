"""What waits to be spoken, and the rules a person next to the speaker wants (pure, but for the
locking of :class:`PlaybackQueue`).

* **Order**: one at a time, by priority (``high`` before ``normal`` before ``low``), and in the
  order accepted within a priority. A high-priority notification is the next one spoken, never
  cutting one that is already playing.
* **Bound**: at most ``capacity`` wait; one more is refused (HTTP 429).
* **Duplicates** (:class:`Duplicates`): a notification identical to one accepted less than
  ``window`` seconds before (same text, voice and speed) is not queued again; the caller is told
  the id of the one that will be (or was) spoken.
* **Expiry** (:func:`expired`): a notification that waited more than ``max_wait`` seconds is
  no longer news; it is dropped when its turn comes (logged, counted ``expired``).
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from voice.errors import QueueFull

PRIORITIES = {"high": 0, "normal": 1, "low": 2}  # rank: lower is spoken first
Item = TypeVar("Item")


def expired(received_at: float, now: float, max_wait: float) -> bool:
    """True when a notification accepted at ``received_at`` waited too long (``max_wait`` 0:
    never)."""
    return max_wait > 0 and now - received_at > max_wait


class PlaybackQueue(Generic[Item]):
    """A bounded priority queue, first-in first-out within a priority; closable."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._heap: list[tuple[int, int, Item]] = []
        self._order = itertools.count()
        self._ready = threading.Condition()
        self._closed = False

    def put(self, item: Item, priority: str = "normal") -> int:
        """Queue ``item``; its place (1 = next). Raises QueueFull, or ValueError for an unknown
        priority or after :meth:`close`."""
        rank = PRIORITIES[priority]
        with self._ready:
            if self._closed:
                raise ValueError("the playback queue is closed (the server is stopping)")
            if len(self._heap) >= self.capacity:
                raise QueueFull(f"the playback queue is full ({self.capacity} notifications "
                                "waiting); retry later")  # fmt: skip
            heapq.heappush(self._heap, (rank, next(self._order), item))
            self._ready.notify()
            return sum(1 for r, _, _ in self._heap if r <= rank)

    def get(self, timeout: float | None = None) -> Item | None:
        """The next item; None when closed and empty, or after ``timeout`` seconds."""
        with self._ready:
            if not self._ready.wait_for(lambda: self._heap or self._closed, timeout):
                return None
            return heapq.heappop(self._heap)[2] if self._heap else None

    def close(self) -> None:
        """Take no more; :meth:`get` drains what is there, then returns None."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def clear(self) -> list[Item]:
        """Remove and return everything waiting, in the order it would have been spoken."""
        with self._ready:
            items = [entry[2] for entry in sorted(self._heap)]
            self._heap.clear()
            return items

    def __len__(self) -> int:
        with self._ready:
            return len(self._heap)


class Duplicates:
    """Remembers recently accepted notifications by key, for ``window`` seconds after each was
    first accepted (a burst of copies does not stretch the window)."""

    def __init__(self, window: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window, self.clock = window, clock
        self._seen: dict[Hashable, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def original(self, key: Hashable, note_id: str) -> tuple[str, float] | None:
        """``(id, seconds ago)`` of the notification ``key`` duplicates, or None, in which case
        ``note_id`` is remembered as the original for the next ``window`` seconds."""
        if self.window <= 0:
            return None
        now = self.clock()
        with self._lock:
            self._seen = {k: v for k, v in self._seen.items() if now - v[1] < self.window}
            if key in self._seen:
                first_id, at = self._seen[key]
                return first_id, now - at
            self._seen[key] = (note_id, now)
            return None

    def forget(self, key: Hashable) -> None:
        """The original was refused after all (the queue was full): copies may be accepted."""
        with self._lock:
            self._seen.pop(key, None)
