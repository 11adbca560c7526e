"""The passages waiting for a vector, in the order they are embedded (no threads, no I/O:
:class:`~workbench.ingest.verbatim.PassageWriter` holds one under its lock).

Two lanes: **live** (the passages of ``add_memory`` calls) before **bulk** (an import's, and
those a restart finds without a vector). Within a lane the groups take turns: a batch takes an
equal share of each waiting group, so one group's backlog of a hundred thousand passages
delays another group's new ones by at most one batch, never by the whole backlog.

:func:`drain_times` predicts when each group's passages are all embedded, from the recent
rate (:class:`Rate`) and that rule of turns.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["Lanes", "Rate", "drain_times"]

Row = dict[str, Any]


class _Lane:
    def __init__(self) -> None:
        self.groups: dict[str, deque[Row]] = {}

    def add(self, rows: Sequence[Row]) -> None:
        for row in rows:
            self.groups.setdefault(row["group_id"], deque()).append(row)

    def take(self, n: int) -> list[Row]:
        """Up to ``n`` rows, an equal share of each group (the rest of a share goes to the
        groups that have more)."""
        out: list[Row] = []
        while len(out) < n and self.groups:
            share = max(1, (n - len(out)) // len(self.groups))
            for group in list(self.groups):
                rows = self.groups[group]
                for _ in range(min(share, len(rows), n - len(out))):
                    out.append(rows.popleft())
                if not rows:
                    del self.groups[group]
                if len(out) >= n:
                    break
        return out

    def counts(self) -> dict[str, int]:
        return {group: len(rows) for group, rows in self.groups.items()}

    def __len__(self) -> int:
        return sum(len(rows) for rows in self.groups.values())


class Lanes:
    """Live passages first, then bulk ones, each lane's groups in turns."""

    def __init__(self) -> None:
        self.live = _Lane()
        self.bulk = _Lane()

    def add(self, rows: Sequence[Row], live: bool) -> None:
        (self.live if live else self.bulk).add(rows)

    def take(self, live_batch: int, bulk_batch: int) -> tuple[list[Row], bool]:
        """The next batch and whether it is live: live passages while any wait (up to
        ``live_batch``), else up to ``bulk_batch`` bulk ones."""
        if len(self.live):
            return self.live.take(live_batch), True
        return self.bulk.take(bulk_batch), False

    def counts(self) -> dict[str, int]:
        """Passages waiting, per group (both lanes)."""
        out = self.bulk.counts()
        for group, n in self.live.counts().items():
            out[group] = out.get(group, 0) + n
        return out

    def live_waiting(self) -> int:
        return len(self.live)

    def __len__(self) -> int:
        return len(self.live) + len(self.bulk)


class Rate:
    """Passages embedded a second over the last ``window`` batches (model time only)."""

    def __init__(self, window: int = 20, clock: Callable[[], float] = time.monotonic):
        self._batches: deque[tuple[int, float]] = deque(maxlen=window)
        self.clock = clock

    def add(self, passages: int, seconds: float) -> None:
        if passages > 0 and seconds > 0:
            self._batches.append((passages, seconds))

    @property
    def per_second(self) -> float | None:
        seconds = sum(s for _, s in self._batches)
        return sum(n for n, _ in self._batches) / seconds if seconds else None


def drain_times(waiting: Mapping[str, int], rate: float | None) -> dict[str, float | None]:
    """Seconds until each group's waiting passages are embedded at ``rate`` a second, the
    groups taking turns: a group of ``n`` waits for ``min(n, m)`` of every group of ``m``
    (None: no rate known yet)."""
    if not rate:
        return {group: None for group in waiting}
    return {group: sum(min(n, m) for m in waiting.values()) / rate for group, n in waiting.items()}
