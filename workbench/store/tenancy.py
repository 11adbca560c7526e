"""SQL of many people on one store: scoped API tokens, the audit trail, which group an item
belongs to, per-group counts and per-group LLM cost of a day.

Tokens are stored as a digest only (``token_hash``); ``groups``, ``uuids`` are comma-joined.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from workbench.store import Store

__all__ = [
    "add_token",
    "list_tokens",
    "revoke_token",
    "token_by_hash",
    "any_tokens",
    "touch_token",
    "record_audit",
    "prune_audit",
    "group_of",
    "group_counts",
    "group_costs_since",
]

_TOKEN_COLUMNS = "name, groups, read_only, admin, created_at, last_used_at"


def _row(row: Sequence[Any]) -> dict[str, Any]:
    name, groups, read_only, admin, created, used = row
    return {
        "name": name,
        "groups": [g for g in groups.split(",") if g],
        "read_only": bool(read_only),
        "admin": bool(admin),
        "created_at": created,
        "last_used_at": used,
    }


def add_token(
    store: Store,
    name: str,
    token_hash: str,
    groups: Sequence[str],
    read_only: bool,
    admin: bool,
    now: datetime,
) -> bool:
    """Store a new token; False when the name is taken."""
    with store.transaction():
        if store.fetchone("SELECT 1 FROM api_tokens WHERE name = ?", [name]):
            return False
        store.execute(
            "INSERT INTO api_tokens (name, token_hash, groups, read_only, admin, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [name, token_hash, ",".join(groups), read_only, admin, now],
        )
    return True


def list_tokens(store: Store) -> list[dict[str, Any]]:
    rows = store.fetchall(f"SELECT {_TOKEN_COLUMNS} FROM api_tokens ORDER BY name")
    return [_row(r) for r in rows]


def revoke_token(store: Store, name: str) -> bool:
    with store.transaction():
        if not store.fetchone("SELECT 1 FROM api_tokens WHERE name = ?", [name]):
            return False
        store.execute("DELETE FROM api_tokens WHERE name = ?", [name])
    return True


def token_by_hash(store: Store, token_hash: str) -> dict[str, Any] | None:
    row = store.fetchone(
        f"SELECT {_TOKEN_COLUMNS} FROM api_tokens WHERE token_hash = ?", [token_hash]
    )
    return _row(row) if row else None


def any_tokens(store: Store) -> bool:
    return store.fetchone("SELECT 1 FROM api_tokens LIMIT 1") is not None


def touch_token(store: Store, name: str, now: datetime) -> None:
    store.execute("UPDATE api_tokens SET last_used_at = ? WHERE name = ?", [now, name])


def record_audit(
    store: Store,
    now: datetime,
    token_name: str,
    tool: str,
    groups: Sequence[str],
    uuids: Sequence[str],
    outcome: str,
) -> None:
    store.execute(
        "INSERT INTO audit_log (ts, token_name, tool, groups, uuids, outcome) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [now, token_name, tool, ",".join(groups), ",".join(uuids), outcome],
    )


def prune_audit(store: Store, before: datetime) -> int:
    with store.transaction():
        (count,) = store.fetchone("SELECT count(*) FROM audit_log WHERE ts < ?", [before])
        if count:
            store.execute("DELETE FROM audit_log WHERE ts < ?", [before])
    return int(count)


def group_of(store: Store, uuid: str) -> str | None:
    """The group of the episode, entity or fact with this uuid (None: no such item)."""
    row = store.fetchone(
        "SELECT group_id FROM episodes WHERE uuid = $1 UNION ALL "
        "SELECT group_id FROM entities WHERE uuid = $1 UNION ALL "
        "SELECT group_id FROM facts WHERE uuid = $1 LIMIT 1",
        [uuid],
    )
    return row[0] if row else None


def group_counts(store: Store, groups: Sequence[str] | None) -> list[dict[str, Any]]:
    """Episodes, entities and facts per group (``groups``: these only, even when empty;
    None: every group that holds anything)."""
    counts: dict[str, dict[str, Any]] = {}
    if groups is not None:
        counts = {g: {"group_id": g, "episodes": 0, "entities": 0, "facts": 0} for g in groups}
    for table in ("episodes", "entities", "facts"):
        for group, n in store.fetchall(f"SELECT group_id, count(*) FROM {table} GROUP BY 1"):
            if groups is None:
                counts.setdefault(
                    group, {"group_id": group, "episodes": 0, "entities": 0, "facts": 0}
                )
            if group in counts:
                counts[group][table] = int(n)
    return [counts[g] for g in sorted(counts)]


def group_costs_since(store: Store, since: datetime) -> dict[str, float]:
    """LLM cost (USD) per group of the calls made for its episodes since ``since``."""
    rows = store.fetchall(
        "SELECT e.group_id, sum(c.total_cost) FROM llm_calls c "
        "JOIN episodes e ON e.uuid = c.episode_uuid WHERE c.ts >= ? GROUP BY 1",
        [since],
    )
    return {group: float(cost or 0.0) for group, cost in rows}
