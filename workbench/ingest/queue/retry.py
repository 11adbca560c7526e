"""The queue's retry policy, pure: which coarse category a failure falls in (the spec's
``error_type``) and what to do after a failed attempt.

Rate limit, timeout and connection errors retry with exponential backoff and jitter up to
``max_attempts``; a validation error is retried at most once; anything else fails at once.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import pydantic

from workbench import errors

TRANSIENT = {"ConnectionError", "TimeoutError", "RateLimitError"}


def categorize(exc: BaseException) -> str:
    """The spec's coarse ``error_type`` for a failure."""
    if isinstance(exc, errors.LLMRateLimited):
        return "RateLimitError"
    if isinstance(exc, (errors.LLMTimeout, TimeoutError)):
        return "TimeoutError"
    if isinstance(
        exc,
        (
            errors.LLMTransientError,
            errors.EmbedderError,
            ConnectionError,
            duckdb.IOException,
            errors.StoreError,
        ),
    ):
        return "ConnectionError"
    if isinstance(
        exc,
        (errors.StructuredOutputError, errors.InvalidInput, ValueError, pydantic.ValidationError),
    ):
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
    action: str  # "retry" or "fail"
    delay: float = 0.0


def decide(
    category: str,
    attempts: int,
    validation_failures: int,
    max_attempts: int,
    base_delay: float = 2.0,
    max_delay: float = 300.0,
    rand: Callable[[], float] = random.random,
) -> Decision:
    """What to do after a failed attempt (``attempts`` counts the one that just failed)."""
    if category in TRANSIENT and attempts < max_attempts:
        delay = min(max_delay, base_delay * 2 ** (attempts - 1))
        return Decision("retry", delay * (0.5 + rand()))
    if category == "ValidationError" and validation_failures < 1:
        return Decision("retry", 0.0)
    return Decision("fail")
