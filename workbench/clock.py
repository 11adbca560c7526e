"""Time is injected: every component takes a ``Clock`` (a callable returning an aware UTC
datetime), so tests and simulations move time without sleeping."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import overload

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to (for tests and simulations)."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, days: float = 0, seconds: float = 0) -> datetime:
        self.now = self.now + timedelta(days=days, seconds=seconds)
        return self.now


class TimeOutOfRange(ValueError):
    """A time that exists in its own offset but not in UTC (``0001-01-01T00:00:00+14:00``)."""


@overload
def as_utc(value: datetime) -> datetime: ...


@overload
def as_utc(value: datetime | str | None) -> datetime | None: ...


def as_utc(value: datetime | str | None) -> datetime | None:
    """Parse an ISO 8601 string (or take a datetime) as an aware UTC datetime. Raises
    ``ValueError`` for text that is no such time, :class:`TimeOutOfRange` (a ``ValueError``
    too) for a time outside years 1-9999 once in UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = value.strip().replace("Z", "+00:00")
        value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise TimeOutOfRange(
            f"{value.isoformat()} is outside years 1 to 9999 once in UTC"
        ) from None
