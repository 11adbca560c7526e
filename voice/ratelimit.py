"""A token bucket per client: ``burst`` requests at once, refilled at ``per_minute``."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class RateLimiter:
    def __init__(
        self, per_minute: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = per_minute / 60.0
        self.burst = max(1, burst)
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, updated at)
        self._lock = threading.Lock()

    def allow(self, client: str) -> bool:
        """Take one token for ``client``; False when it has none left."""
        if self.rate <= 0:
            return True
        with self._lock:
            now = self.clock()
            tokens, updated = self._buckets.get(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - updated) * self.rate)
            allowed = tokens >= 1.0
            self._buckets[client] = (tokens - 1.0 if allowed else tokens, now)
            self._forget_full(now)
            return allowed

    def retry_after(self, client: str) -> float:
        """Seconds until ``client`` has a token again."""
        with self._lock:
            tokens, _ = self._buckets.get(client, (float(self.burst), 0.0))
        return 0.0 if tokens >= 1.0 or self.rate <= 0 else (1.0 - tokens) / self.rate

    def _forget_full(self, now: float) -> None:
        """Keep the table small: a bucket that has refilled completely holds no information."""
        if len(self._buckets) < 1024:
            return
        horizon = self.burst / self.rate
        self._buckets = {c: v for c, v in self._buckets.items() if now - v[1] < horizon}
