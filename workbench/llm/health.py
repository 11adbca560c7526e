"""Whether the LLM answers: the outcome of recent calls, and whether it is known to be down.

"Configured" says nothing about a backend that refuses every request or a local model server
that died. :class:`LLMHealth` keeps what the calls themselves observed: the last success, and
since when and how they have been failing (error type and message). A supervisor that knows
better (the ``--local-llm`` server's watcher) marks the LLM *down* while it restarts it; the
queue then leaves episodes waiting instead of spending their attempts on a server that is not
there. ``status()`` is the ``llm`` part of ``GET /health``.
"""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

from workbench.clock import Clock, utcnow
from workbench.safety import scrub


class LLMHealth:
    """Thread-safe record of recent LLM call outcomes (see the module docstring)."""

    def __init__(self, clock: Clock = utcnow):
        self._clock = clock
        self._lock = threading.Lock()
        self.last_success_at: datetime | None = None
        self.failing_since: datetime | None = None
        self.consecutive_failures = 0
        self.last_error_type: str | None = None
        self.last_error: str | None = None
        self.down_reason: str | None = None

    def succeeded(self) -> None:
        with self._lock:
            self.last_success_at = self._clock()
            self.failing_since = None
            self.consecutive_failures = 0

    def failed(self, error_type: str, message: str) -> None:
        with self._lock:
            if self.failing_since is None:
                self.failing_since = self._clock()
            self.consecutive_failures += 1
            self.last_error_type = error_type
            self.last_error = scrub(message[:300])

    def mark_down(self, reason: str) -> None:
        """The backend is known to be unavailable (e.g. being restarted)."""
        with self._lock:
            self.down_reason = reason

    def mark_up(self) -> None:
        with self._lock:
            self.down_reason = None

    @property
    def available(self) -> bool:
        """False while the backend is known to be down (calls would only fail)."""
        return self.down_reason is None

    def status(self) -> dict[str, Any]:
        """``state``: ``ok`` (the last call succeeded, or none was made yet), ``failing`` (the
        calls since ``failing_since`` failed) or ``down`` (known unavailable)."""
        with self._lock:
            if self.down_reason is not None:
                state = "down"
            elif self.failing_since is not None:
                state = "failing"
            else:
                state = "ok"
            return {
                "state": state,
                "down_reason": self.down_reason,
                "last_success_at": _iso(self.last_success_at),
                "failing_since": _iso(self.failing_since),
                "consecutive_failures": self.consecutive_failures,
                "last_error_type": self.last_error_type if state != "ok" else None,
                "last_error": self.last_error if state != "ok" else None,
            }


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
