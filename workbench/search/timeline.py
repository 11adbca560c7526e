"""``get_timeline``: what happened in some groups (or to one entity) within a window, in time
order, a page at a time: episodes, facts that became true, facts that stopped being true
(with the facts that superseded them, when known). The events and their order are the
store's (:mod:`workbench.store.timeline`); here the arguments are checked, the page's cursor
written and read, and the events shaped.

A cursor is the (time, kind, uuid) of a page's last event, opaque to the caller (URL-safe
base64 of JSON): the next page starts after it, whatever was added meanwhile.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from workbench.errors import InvalidInput
from workbench.search.filters import check_date
from workbench.store import Store
from workbench.store import timeline as sql

__all__ = ["MAX_ITEMS", "encode_cursor", "decode_cursor", "get_timeline"]

MAX_ITEMS = 500  # events a page may ask for
DEFAULT_ITEMS = 50


def encode_cursor(event: dict[str, Any]) -> str:
    raw = json.dumps([event["at"].isoformat(), event["event"], event["uuid"]])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str, str]:
    """The (time, kind, uuid) a cursor names; anything else is :class:`InvalidInput`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, kind, uuid = json.loads(raw)
        when = datetime.fromisoformat(at)
        if kind not in sql.EVENT_KINDS or not isinstance(uuid, str) or when.tzinfo is None:
            raise ValueError(kind)
        return when, kind, uuid
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidInput(
            "'cursor' is not one get_timeline returned: pass the 'next' of the page before, "
            "or omit it for the first page"
        ) from None


def _check_items(max_items: object) -> int:
    if isinstance(max_items, bool) or not isinstance(max_items, int):
        raise InvalidInput(f"'max_items' must be an integer from 1 to {MAX_ITEMS}")
    if not 1 <= max_items <= MAX_ITEMS:
        raise InvalidInput(f"'max_items' must be from 1 to {MAX_ITEMS}; got {max_items}")
    return max_items


def _shaped(row: dict[str, Any], superseded: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "event": row["event"],
        "at": row["at"],
        "uuid": row["uuid"],
        "group_id": row["group_id"],
    }
    if row["event"] == "episode":
        return {**out, "name": row["text"], "source": row["source"]}
    out.update(
        fact=row["text"],
        relation=row["relation"],
        source_node_uuid=row["source_uuid"],
        target_node_uuid=row["target_uuid"],
        valid_at=row["valid_at"],
        invalid_at=row["invalid_at"],
    )
    if row["event"] == "fact_invalid":
        out["superseded_by"] = superseded.get(row["uuid"], [])
    return out


def get_timeline(
    store: Store,
    group_ids: Sequence[str] | None,
    entity_uuid: str | None = None,
    after: object = None,
    before: object = None,
    max_items: object = DEFAULT_ITEMS,
    cursor: str | None = None,
) -> dict[str, Any]:
    """A page of the timeline of ``group_ids`` (None: every group; see the module
    docstring): ``events`` and ``next`` (the cursor of the page after, None at the end)."""
    start, end = check_date("after", after), check_date("before", before)
    if start is not None and end is not None and start >= end:
        raise InvalidInput(
            f"'after' ({start.isoformat()}) must be earlier than 'before' ({end.isoformat()})"
        )
    n = _check_items(max_items)
    position = decode_cursor(cursor) if cursor else None
    rows = sql.events(store, group_ids, n + 1, entity_uuid, start, end, position)
    page = rows[:n]
    ended = [r["uuid"] for r in page if r["event"] == "fact_invalid"]
    superseded = sql.superseding(store, ended)
    return {
        "events": [_shaped(r, superseded) for r in page],
        "next": encode_cursor(page[-1]) if len(rows) > n else None,
    }
