"""Validation of search arguments: every problem is an :class:`InvalidInput` saying what was
wrong and what is accepted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from workbench.clock import TimeOutOfRange, as_utc
from workbench.errors import InvalidInput
from workbench.names import group_ids
from workbench.store import Store
from workbench.store import search as sql
from workbench.store.schema import LIFECYCLE_STATES

__all__ = [
    "SearchFilters",
    "MAX_QUERY_CHARS",
    "DEFAULT_STATES",
    "check_query",
    "check_max",
    "check_states",
    "check_window",
    "check_date",
    "check_about",
    "clean_list",
    "check_group_ids",
    "check_groups_known",
]

MAX_QUERY_CHARS = 2000
DEFAULT_STATES = tuple(s for s in LIFECYCLE_STATES if s not in ("EXPIRED", "SOFT_DELETED"))


@dataclass(frozen=True)
class SearchFilters:
    """The validated row filters of one search."""

    group_ids: tuple[str, ...] | None = None
    states: tuple[str, ...] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    entity_types: tuple[str, ...] | None = None
    relation_types: tuple[str, ...] | None = None
    include_invalidated: bool = True
    now: datetime | None = None
    # the time a memory is about (not when it was stored): a passage's reference time, a
    # fact's validity interval (see :func:`check_about`); facts valid at ``as_of``
    about_after: datetime | None = None
    about_before: datetime | None = None
    as_of: datetime | None = None

    def accepts(self, kind: str, row: dict[str, Any]) -> bool:
        if self.group_ids is not None and row["group_id"] not in self.group_ids:
            return False
        if self.states is not None and row["lifecycle_state"] not in self.states:
            return False
        if self.created_after is not None and row["created_at"] < self.created_after:
            return False
        if self.created_before is not None and row["created_at"] >= self.created_before:
            return False
        about = self.about_after is not None or self.about_before is not None
        if kind == "passage":
            said = row["reference_time"] or row["created_at"]
            return not about or _overlaps(said, said, self.about_after, self.about_before)
        if kind == "entity":
            if about and not _overlaps(row["created_at"], row["created_at"], self.about_after,
                                       self.about_before):  # fmt: skip
                return False
            return not self.entity_types or row["entity_type"] in self.entity_types
        if self.relation_types and row["relation"] not in self.relation_types:
            return False
        start, end = row["valid_at"] or row["created_at"], row["invalid_at"]
        if about and not _overlaps(start, end, self.about_after, self.about_before):
            return False
        if self.as_of is not None:
            return _overlaps(start, end, self.as_of, self.as_of + timedelta(microseconds=1))
        return self.include_invalidated or about or _still_valid(row, self.now)

    def narrowing(self) -> bool:
        """True when the filters may drop many rows (worth pre-filtering every row)."""
        return bool(
            self.created_after
            or self.created_before
            or self.about_after
            or self.about_before
            or self.as_of
            or self.entity_types
            or self.relation_types
            or (self.states is not None and set(self.states) < set(DEFAULT_STATES))
        )


def _overlaps(
    start: datetime, end: datetime | None, after: datetime | None, before: datetime | None
) -> bool:
    """Whether ``[start, end)`` (``end`` None: open) overlaps ``[after, before)``; an interval
    ending where it starts is a point, inside or not (the row-by-row twin of the row cache's
    vectorised rule)."""
    if after is not None and not (end is None or end > after or (end == start and start >= after)):
        return False
    return before is None or start < before


def _still_valid(row: dict[str, Any], now: datetime | None) -> bool:
    if row["expired_at"] is not None:
        return False
    invalid = row["invalid_at"]
    return invalid is None or (now is not None and invalid > now)


def check_query(query: object) -> str:
    if not isinstance(query, str):
        raise InvalidInput("'query' must be a string")
    text = query.strip()
    if not text:
        raise InvalidInput("'query' is empty; give the words or question to search for")
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"'query' has {len(text)} characters; at most {MAX_QUERY_CHARS} are accepted "
            "(search with a shorter question)"
        )
    return text


def check_min_score(value: object) -> float | None:
    """``min_score``: None, or a finite number (a result's ``score`` is compared with it)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise InvalidInput("'min_score' must be a number, e.g. 0.3 (results score about 0 to 1)")
    if abs(value) == float("inf"):
        raise InvalidInput("'min_score' must be a finite number")
    return float(value)


def check_max(name: str, value: object, bound: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"'{name}' must be an integer from 1 to {bound}")
    if not 1 <= value <= bound:
        raise InvalidInput(f"'{name}' is {value}; it must be from 1 to {bound}")
    return value


def check_states(states: Sequence[str] | str | None) -> tuple[str, ...]:
    """The lifecycle states to include; None -> every state but EXPIRED and SOFT_DELETED."""
    if states is None:
        return DEFAULT_STATES
    listed = clean_list("states", states) or ()
    upper = tuple(dict.fromkeys(s.strip().upper() for s in listed))
    unknown = [s for s in upper if s not in LIFECYCLE_STATES]
    if unknown:
        raise InvalidInput(
            f"unknown lifecycle state(s) {', '.join(unknown)} in 'states'; "
            f"expected some of {', '.join(LIFECYCLE_STATES)}"
        )
    if not upper:
        raise InvalidInput(f"'states' is empty; name at least one of {', '.join(LIFECYCLE_STATES)}")
    return upper


def check_date(name: str, value: object) -> datetime | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str | datetime):
        raise InvalidInput(f"'{name}' must be an ISO 8601 date-time string")
    try:
        return as_utc(value)
    except TimeOutOfRange as exc:
        raise InvalidInput(f"'{name}' is out of range: {exc}") from None
    except (ValueError, TypeError):
        raise InvalidInput(
            f"'{name}' is not an ISO 8601 date-time: {str(value)[:60]!r} "
            "(e.g. 2026-01-31 or 2026-01-31T12:00:00Z)"
        ) from None


def check_window(after: object, before: object) -> tuple[datetime | None, datetime | None]:
    start, end = check_date("created_after", after), check_date("created_before", before)
    if start is not None and end is not None and start >= end:
        raise InvalidInput(
            f"'created_after' ({start.isoformat()}) must be earlier than "
            f"'created_before' ({end.isoformat()})"
        )
    return start, end


def check_about(after: object, before: object) -> tuple[datetime | None, datetime | None]:
    """``after`` / ``before``: the window of the time memories are about."""
    start, end = check_date("after", after), check_date("before", before)
    if start is not None and end is not None and start >= end:
        raise InvalidInput(
            f"'after' ({start.isoformat()}) must be earlier than 'before' ({end.isoformat()})"
        )
    return start, end


def clean_list(name: str, values: Sequence[str] | str | None) -> tuple[str, ...] | None:
    """A list of non-empty strings (a single string is one item); None or [] -> None."""
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    if not isinstance(values, list | tuple | set | frozenset):
        raise InvalidInput(f"'{name}' must be a list of strings")
    out = []
    for value in values:
        if not isinstance(value, str) or not value.strip():
            raise InvalidInput(f"'{name}' must hold non-empty strings; got {value!r}")
        out.append(value.strip())
    return tuple(dict.fromkeys(out)) or None


def check_group_ids(values: Sequence[str] | None) -> tuple[str, ...] | None:
    """The groups to search, each checked by the one group-name rule (``workbench.names``);
    None or [] -> every group; a single name is a list of one."""
    groups = group_ids([values] if isinstance(values, str) else values)
    return tuple(groups) if groups else None


def check_groups_known(store: Store, group_ids: Sequence[str], indexed: set[str]) -> None:
    """Raise when a requested group holds no episode, entity or fact at all."""
    unknown = [g for g in group_ids if g not in indexed]
    if not unknown:
        return
    missing = [g for g in unknown if g not in sql.known_groups(store, unknown)]
    if missing:
        raise InvalidInput(
            f"unknown group_id(s): {', '.join(missing)} (no episodes or memories in them); "
            "check the spelling, or omit group_ids to search every group"
        )
