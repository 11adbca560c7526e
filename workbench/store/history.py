"""SQL of a history import (:mod:`workbench.jobs.history`): which of a chunk's episodes exist
already, and the chunk's episodes, passages and queue messages written in bulk (Arrow
tables: a binary ``COPY`` on PostgreSQL, ``INSERT … SELECT`` on DuckDB). Also the passages
still waiting for a vector, per group (the backlog ``get_queue_status`` shows)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from workbench.store import Store

__all__ = [
    "episode_states",
    "insert_episodes",
    "insert_passages",
    "enqueue_stored",
    "passages_without_vector",
]

_TIME = pa.timestamp("us", "UTC")
EPISODE_COLUMNS = {
    "uuid": pa.string(), "group_id": pa.string(), "name": pa.string(), "body": pa.string(),
    "source": pa.string(), "source_description": pa.string(), "reference_time": _TIME,
    "created_at": _TIME, "priority": pa.int32(), "status": pa.string(),
    "status_detail": pa.string(),
}  # fmt: skip
PASSAGE_COLUMNS = {
    "uuid": pa.string(), "episode_uuid": pa.string(), "group_id": pa.string(),
    "position": pa.int32(), "speaker": pa.string(), "text": pa.string(),
    "reference_time": _TIME, "created_at": _TIME,
}  # fmt: skip


def episode_states(store: Store, uuids: Sequence[str]) -> dict[str, str]:
    """The status of each of these episodes that exists (one statement for the chunk)."""
    if not uuids:
        return {}
    rows = store.fetchall("SELECT uuid, status FROM episodes WHERE uuid = ANY(?)", [list(uuids)])
    return {uuid: status for uuid, status in rows}


def insert_episodes(store: Store, rows: Sequence[Mapping[str, Any]]) -> None:
    """New episode rows (every key of :data:`EPISODE_COLUMNS`), in one bulk write."""
    store.insert_arrow("episodes", _frame(rows, EPISODE_COLUMNS))


def insert_passages(store: Store, rows: Sequence[Mapping[str, Any]]) -> None:
    """New passage rows (every key of :data:`PASSAGE_COLUMNS`), in one bulk write."""
    store.insert_arrow("passages", _frame(rows, PASSAGE_COLUMNS))


def enqueue_stored(
    store: Store, episodes: Sequence[Mapping[str, Any]], priority: int, now: datetime
) -> None:
    """Queue these episodes for extraction in the order given (the queue's sequence is the
    group's order, so a statement that keeps it: one multi-row ``INSERT``) and mark them
    queued."""
    if not episodes:
        return
    store.executemany(
        """INSERT INTO queue (episode_uuid, group_id, priority, state, enqueued_at, available_at)
           VALUES (?, ?, ?, 'queued', ?, ?)""",
        [[e["uuid"], e["group_id"], priority, now, now] for e in episodes],
    )
    store.execute(
        """UPDATE episodes SET status = 'queued', status_detail = NULL, priority = ?
           WHERE uuid = ANY(?)""",
        [priority, [e["uuid"] for e in episodes]],
    )


def passages_without_vector(store: Store) -> dict[str, int]:
    """Passages that have no vector yet, per group."""
    rows = store.fetchall(
        """SELECT p.group_id, count(*) FROM passages p
           WHERE NOT EXISTS (SELECT 1 FROM passage_embeddings e WHERE e.uuid = p.uuid)
           GROUP BY p.group_id"""
    )
    return {group: int(count) for group, count in rows}


def _frame(rows: Sequence[Mapping[str, Any]], columns: Mapping[str, pa.DataType]) -> pa.Table:
    return pa.table(
        {name: pa.array([r.get(name) for r in rows], kind) for name, kind in columns.items()}
    )
