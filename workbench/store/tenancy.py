"""Many people on one store: who a caller is (:class:`Caller`), scoped API tokens, the audit
trail, which group an item belongs to, per-group counts and per-group LLM cost of a day
(:class:`Tenancy` holds them for the facade; the functions are its SQL).

A token is ``wbt_`` + 32 random bytes (URL-safe base64); the store keeps only its SHA-256
(``api_tokens.token_hash``), so a copy of the database gives no one a usable token. An admin
token may use every group and the whole-database tools; any other token names its groups, and
may be read-only. ``groups`` and ``uuids`` columns are comma-joined (no group name holds a
comma).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import uuid as uuidlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from workbench import errors, names
from workbench import results as r
from workbench.store import Store

__all__ = [
    "ADMIN",
    "Caller",
    "Tenancy",
    "new_token",
    "token_hash",
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
    "group_names",
    "hold_group",
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


def list_tokens(store: Store) -> list[r.TokenInfo]:
    rows = store.fetchall(f"SELECT {_TOKEN_COLUMNS} FROM api_tokens ORDER BY name")
    return [_token_info(_row(row)) for row in rows]


def _token_info(row: dict[str, Any]) -> r.TokenInfo:
    """A token's row as the ``list_tokens`` tool shows it (times in ISO 8601)."""
    used = row["last_used_at"]
    return {"name": row["name"], "groups": row["groups"], "read_only": row["read_only"],
            "admin": row["admin"], "created_at": _iso(row["created_at"]),
            "last_used_at": None if used is None else _iso(used)}  # fmt: skip


def _iso(value: datetime | str) -> str:
    return value if isinstance(value, str) else value.isoformat()


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
        (count,) = store.one("SELECT count(*) FROM audit_log WHERE ts < ?", [before])
        if count:
            store.execute("DELETE FROM audit_log WHERE ts < ?", [before])
    return int(count)


def group_of(store: Store, uuid: str) -> str | None:
    """The group of the episode, entity, fact or passage with this uuid (None: no such
    item)."""
    row = store.fetchone(
        "SELECT group_id FROM episodes WHERE uuid = $1 UNION ALL "
        "SELECT group_id FROM entities WHERE uuid = $1 UNION ALL "
        "SELECT group_id FROM facts WHERE uuid = $1 UNION ALL "
        "SELECT group_id FROM passages WHERE uuid = $1 LIMIT 1",
        [uuid],
    )
    return row[0] if row else None


def group_counts(store: Store, groups: Sequence[str] | None) -> list[r.GroupCounts]:
    """Episodes, entities and facts per group (``groups``: these only, even when empty;
    None: every group that holds anything)."""
    counts: dict[str, r.GroupCounts] = {}
    if groups is not None:
        counts = {g: _no_counts(g) for g in groups}
    for table in _COUNTED:
        for group, n in store.fetchall(f"SELECT group_id, count(*) FROM {table} GROUP BY 1"):
            if groups is None:
                counts.setdefault(group, _no_counts(group))
            if group in counts:
                counts[group][table] = int(n)
    return [counts[g] for g in sorted(counts)]


_COUNTED: tuple[Literal["episodes"], Literal["entities"], Literal["facts"]] = (
    "episodes",
    "entities",
    "facts",
)


def _no_counts(group: str) -> r.GroupCounts:
    return {"group_id": group, "episodes": 0, "entities": 0, "facts": 0}


def hold_group(store: Store, group: str, until: datetime, detail: str) -> int:
    """Keep ``group``'s queued episodes waiting until ``until``, saying why; how many."""
    with store.transaction():
        rows = store.fetchall(
            "SELECT episode_uuid FROM queue WHERE group_id = ? AND state = 'queued' "
            "AND available_at < ?",
            [group, until],
        )
        uuids = [r[0] for r in rows]
        if uuids:
            store.execute(
                "UPDATE queue SET available_at = ? WHERE episode_uuid = ANY(?)", [until, uuids]
            )
            store.execute(
                "UPDATE episodes SET status_detail = ? WHERE uuid = ANY(?)", [detail, uuids]
            )
    return len(uuids)


def group_names(store: Store) -> list[str]:
    """Every group that holds an episode, entity or fact."""
    rows = store.fetchall(
        "SELECT group_id FROM episodes UNION SELECT group_id FROM entities "
        "UNION SELECT group_id FROM facts"
    )
    return sorted(r[0] for r in rows)


def group_costs_since(store: Store, since: datetime) -> dict[str, float]:
    """LLM cost (USD) per group of the calls made for its episodes since ``since``."""
    rows = store.fetchall(
        "SELECT e.group_id, sum(c.total_cost) FROM llm_calls c "
        "JOIN episodes e ON e.uuid = c.episode_uuid WHERE c.ts >= ? GROUP BY 1",
        [since],
    )
    return {group: float(cost or 0.0) for group, cost in rows}


SCOPE_SECRET = "scope_secret"  # the meta key of the secret scoped uuids derive from


def scope_secret(store: Store) -> bytes:
    """This database's random secret for :meth:`Tenancy.scoped_uuid` (made on first use; two
    processes making it at once keep the first one stored)."""
    value = store.meta(SCOPE_SECRET)
    if value is None:
        store.execute(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO NOTHING",
            [SCOPE_SECRET, secrets.token_hex(32)],
        )
        value = store.meta(SCOPE_SECRET)
    return bytes.fromhex(str(value))


TOKEN_PREFIX = "wbt_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Caller:
    """Who sends a request: a token's name and scope (``groups`` None: every group)."""

    name: str
    groups: frozenset[str] | None = None
    read_only: bool = False
    admin: bool = False

    def may_use(self, group: str) -> bool:
        return self.admin or self.groups is None or group in self.groups

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Caller:
        groups = None if row["admin"] else frozenset(row["groups"])
        return cls(row["name"], groups, row["read_only"], row["admin"])


ADMIN = Caller("admin", None, False, True)  # SVC_KNOWLEDGE_API_TOKEN


class Tenancy:
    """Tokens, the audit trail and group counts of one store."""

    # how long the list of every group is reused (a search of every group names them)
    GROUP_NAMES_SECONDS = 5.0

    def __init__(
        self,
        store: Store,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ):
        self.store = store
        self.clock = clock
        self._monotonic = monotonic
        self._names: tuple[float, list[str]] = (-1e18, [])

    def add_token(
        self, name: str, groups: Sequence[str] = (), read_only: bool = False, admin: bool = False
    ) -> r.NewToken:
        """A new token (shown once: only its hash is kept)."""
        name = _token_name(name)
        groups = names.group_ids(groups) or []
        if not groups and not admin:
            raise errors.InvalidInput("a token needs --groups (or --admin for every group)")
        token = new_token()
        if not add_token(
            self.store, name, token_hash(token), groups, read_only, admin, self.clock()
        ):
            raise errors.Conflict(f"a token named {name!r} exists; revoke it first")
        return {"name": name, "groups": groups, "read_only": read_only, "admin": admin,
                "token": token}  # fmt: skip

    def list_tokens(self) -> r.TokensResult:
        return {"tokens": list_tokens(self.store)}

    def revoke_token(self, name: str) -> r.RevokeResult:
        if not revoke_token(self.store, _token_name(name)):
            raise errors.NotFound(f"no token named {name!r}")
        return {"message": f"token {name} revoked", "name": name}

    def caller(self, token: str) -> Caller | None:
        """The caller a stored token stands for (None: no such token), marked as used."""
        row = token_by_hash(self.store, token_hash(token))
        if row is None:
            return None
        touch_token(self.store, row["name"], self.clock())
        return Caller.from_row(row)

    def any_tokens(self) -> bool:
        return any_tokens(self.store)

    def audit(
        self, who: str, tool: str, groups: Sequence[str], uuids: Sequence[str], outcome: str
    ) -> None:
        record_audit(self.store, self.clock(), who, tool, groups, uuids, outcome)

    def prune_audit(self, days: float) -> int:
        return prune_audit(self.store, self.clock() - timedelta(days=days))

    def list_groups(self, groups: Sequence[str] | None) -> r.GroupsResult:
        return {"groups": group_counts(self.store, groups)}

    def group_names(self) -> list[str]:
        """Every group in the store (at most ``GROUP_NAMES_SECONDS`` old)."""
        expiry, names_ = self._names
        if self._monotonic() >= expiry:
            names_ = group_names(self.store)
            self._names = (self._monotonic() + self.GROUP_NAMES_SECONDS, names_)
        return names_

    def group_of(self, uuid: str) -> str | None:
        return group_of(self.store, uuid)

    def scoped_uuid(self, *parts: str) -> str:
        """A uuid derived from ``parts`` (a caller, a group, a key) under this database's
        secret: the same for the same parts, and unguessable to anyone without the secret,
        so one caller's key or uuid cannot be claimed first by another (issue 55)."""
        digest = hmac.new(scope_secret(self.store), "\x00".join(parts).encode(), "sha256")
        return str(uuidlib.UUID(bytes=digest.digest()[:16], version=4))


def _token_name(name: str) -> str:
    if not isinstance(name, str) or not names.is_group_id(name):
        raise errors.InvalidInput(f"not a valid token name: {names.GROUP_ID_RULE}")
    return name


def day_start(now: datetime) -> datetime:
    """Midnight UTC of ``now``'s day."""
    return now.replace(hour=0, minute=0, second=0, microsecond=0)
