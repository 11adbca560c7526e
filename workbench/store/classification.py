"""SQL for classification: memories waiting for importance/stability, and writing results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.store import Store

# Memories to (re)classify: never classified first, then earlier failures/fallbacks.
PENDING_SQL = """
SELECT kind, uuid, text FROM (
    SELECT 'entity' AS kind, uuid, created_at, classification_status AS status,
           name || ' (' || entity_type || ')' ||
           CASE WHEN summary <> '' THEN ': ' || summary ELSE '' END AS text
    FROM entities WHERE lifecycle_state <> 'SOFT_DELETED'
    UNION ALL
    SELECT 'fact', uuid, created_at, classification_status, fact
    FROM facts WHERE lifecycle_state <> 'SOFT_DELETED'
) AS pending
WHERE status IS NULL OR (? AND status IN ('failure', 'fallback'))
ORDER BY status IS NOT NULL, created_at, kind, uuid
LIMIT ?
"""

TABLE = {"entity": "entities", "fact": "facts"}


def pending_memories(store: Store, limit: int, retry_failed: bool = True) -> list[dict[str, Any]]:
    """Up to ``limit`` memories without a classification (oldest first), as kind/uuid/text."""
    return store.fetch_dicts(PENDING_SQL, [retry_failed, limit])


def write_classifications(store: Store, rows: Sequence[tuple[str, str, int, int, str]]) -> None:
    """``rows``: (kind, uuid, importance, stability, status), written in one transaction.

    Only a ``success`` writes the scores; a ``failure``/``fallback`` records its status and
    keeps the stored values (the defaults 3/3, or what an import provided).
    """
    with store.transaction():
        for kind, table in TABLE.items():
            ok = [
                (imp, stab, uuid)
                for k, uuid, imp, stab, status in rows
                if k == kind and status == "success"
            ]
            other = [
                (status, uuid)
                for k, uuid, _, _, status in rows
                if k == kind and status != "success"
            ]
            store.executemany(
                f"UPDATE {table} SET importance = ?, stability = ?, "
                "classification_status = 'success' WHERE uuid = ?",
                ok,
            )
            store.executemany(f"UPDATE {table} SET classification_status = ? WHERE uuid = ?", other)
