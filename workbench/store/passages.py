"""SQL of passages: what was said, split from each episode when it is accepted (see
:mod:`workbench.ingest.passages`). A passage lives as long as its episode: deleting an
episode or clearing a group deletes its passages and their vectors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.store import Store

__all__ = [
    "insert_passages",
    "passages_of_episodes",
    "delete_passages",
    "existing_passages",
    "unembedded_passages",
]

_COLUMNS = (
    "uuid",
    "episode_uuid",
    "group_id",
    "position",
    "speaker",
    "text",
    "reference_time",
    "created_at",
)


def insert_passages(store: Store, rows: Sequence[dict[str, Any]]) -> None:
    """Insert passage rows (dicts with every column of ``_COLUMNS``)."""
    if not rows:
        return
    marks = ", ".join("?" for _ in _COLUMNS)
    store.executemany(
        f"INSERT INTO passages ({', '.join(_COLUMNS)}) VALUES ({marks})",
        [[row[c] for c in _COLUMNS] for row in rows],
    )


def passages_of_episodes(store: Store, episode_uuids: Sequence[str]) -> list[str]:
    """The uuids of the passages of these episodes."""
    if not episode_uuids:
        return []
    rows = store.fetchall(
        "SELECT uuid FROM passages WHERE list_contains(?, episode_uuid)", [list(episode_uuids)]
    )
    return [r[0] for r in rows]


def delete_passages(store: Store, uuids: Sequence[str]) -> None:
    """Delete these passages and their vectors."""
    if uuids:
        store.execute("DELETE FROM passage_embeddings WHERE uuid = ANY(?)", [list(uuids)])
        store.execute("DELETE FROM passages WHERE uuid = ANY(?)", [list(uuids)])


def existing_passages(store: Store, uuids: Sequence[str]) -> set[str]:
    """Which of these passages exist."""
    if not uuids:
        return set()
    rows = store.fetchall("SELECT uuid FROM passages WHERE uuid = ANY(?)", [list(uuids)])
    return {r[0] for r in rows}


def unembedded_passages(store: Store) -> list[dict[str, Any]]:
    """The passages without a vector (uuid, group_id, text), oldest first."""
    return store.fetch_dicts(
        """SELECT p.uuid, p.group_id, p.text FROM passages p
           WHERE NOT EXISTS (SELECT 1 FROM passage_embeddings e WHERE e.uuid = p.uuid)
           ORDER BY p.created_at, p.episode_uuid, p.position"""
    )
