"""Retry policy, error classification and the requests-per-minute throttle (pure or injectable).

``error_type`` follows the spec's table for ``graph_llm_errors_total``: ``rate_limit`` (HTTP 429),
``timeout`` (the request timed out), else the exception class name (``APIConnectionError``,
``InternalServerError``, ``BadRequestError`` …). Transient errors — 429, 408, 409, 5xx, timeouts,
connection errors — are retried with exponential backoff and jitter, honouring ``Retry-After``.
"""

from __future__ import annotations

import email.utils
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import openai

from workbench.errors import LLMRateLimited, LLMTimeout, LLMTransientError

BACKOFF_BASE = 0.5
BACKOFF_CAP = 30.0
RETRY_AFTER_CAP = 60.0
_TRANSIENT_STATUS = {408, 409, 425, 429}


@dataclass(frozen=True)
class ErrorInfo:
    error_type: str
    transient: bool
    retry_after: float | None
    message: str


def classify_error(exc: BaseException) -> ErrorInfo:
    """What a failed request means for metrics and for the retry loop."""
    message = _message(exc)
    if isinstance(exc, openai.RateLimitError):
        return ErrorInfo("rate_limit", True, retry_after_seconds(exc), message)
    if isinstance(exc, openai.APITimeoutError):
        return ErrorInfo("timeout", True, None, message)
    if isinstance(exc, openai.APIConnectionError):
        return ErrorInfo(type(exc).__name__, True, None, message)
    if isinstance(exc, openai.APIStatusError):
        transient = exc.status_code >= 500 or exc.status_code in _TRANSIENT_STATUS
        return ErrorInfo(type(exc).__name__, transient, retry_after_seconds(exc), message)
    return ErrorInfo(type(exc).__name__, False, None, message)


def _message(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"HTTP {status}: {text}" if status else str(text)


def retry_after_seconds(exc: BaseException) -> float | None:
    """Seconds from ``Retry-After`` (delta or HTTP date) or ``retry-after-ms``, if sent."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return max(0.0, parsed.timestamp() - time.time())


def backoff_delay(
    retry: int,
    retry_after: float | None = None,
    *,
    rng: random.Random | None = None,
    base: float = BACKOFF_BASE,
    cap: float = BACKOFF_CAP,
) -> float:
    """Seconds to wait before retry number ``retry`` (1-based): the server's ``Retry-After``
    when it sent one (capped at a minute), else exponential backoff with equal jitter."""
    if retry_after is not None:
        return min(retry_after, RETRY_AFTER_CAP)
    ceiling: float = min(cap, base * 2 ** max(0, retry - 1))  # int ** int is Any to mypy
    return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)


def exhausted_error(info: ErrorInfo, detail: str) -> LLMTransientError:
    """The error raised when retries are used up (``.error_type`` = the queue category)."""
    if info.error_type == "rate_limit":
        return LLMRateLimited(detail)
    if info.error_type == "timeout":
        return LLMTimeout(detail)
    return LLMTransientError(detail)


class RequestThrottle:
    """A token bucket: ``per_minute`` requests per minute on average, bursts of ten seconds'
    worth. ``acquire`` reserves a slot and sleeps until it is due; 0 disables throttling."""

    def __init__(
        self,
        per_minute: int,
        *,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        burst: float | None = None,
    ):
        self.per_minute = per_minute
        self.rate = per_minute / 60.0
        self.capacity = burst if burst is not None else max(1.0, per_minute / 6.0)
        self._sleep = sleep
        self._monotonic = monotonic
        self._tokens = self.capacity
        self._last = monotonic()
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Take one slot; returns the seconds waited."""
        if self.per_minute <= 0:
            return 0.0
        with self._lock:
            now = self._monotonic()
            self._tokens = min(self.capacity, self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= 1.0
            wait = 0.0 if self._tokens >= 0 else -self._tokens / self.rate
        if wait > 0:
            self._sleep(wait)
        return wait
