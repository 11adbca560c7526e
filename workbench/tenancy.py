"""Many people on one store: who a caller is (:class:`Caller`), scoped API tokens, the audit
trail and the groups a caller may use (:class:`Tenancy`, over ``workbench.store.tenancy``).

A token is ``wbt_`` + 32 random bytes (URL-safe base64); the store keeps only its SHA-256, so
a copy of the database gives no one a usable token. An admin token may use every group and
the whole-database tools; any other token names its groups, and may be read-only.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from workbench import errors, names
from workbench.store import Store
from workbench.store import tenancy as t

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

    def __init__(self, store: Store, clock):
        self.store = store
        self.clock = clock

    def add_token(
        self, name: str, groups: Sequence[str] = (), read_only: bool = False, admin: bool = False
    ) -> dict[str, Any]:
        """A new token (shown once: only its hash is kept)."""
        name = _token_name(name)
        groups = names.group_ids(groups) or []
        if not groups and not admin:
            raise errors.InvalidInput("a token needs --groups (or --admin for every group)")
        token = new_token()
        if not t.add_token(
            self.store, name, token_hash(token), groups, read_only, admin, self.clock()
        ):
            raise errors.Conflict(f"a token named {name!r} exists; revoke it first")
        return {"name": name, "groups": groups, "read_only": read_only, "admin": admin,
                "token": token}  # fmt: skip

    def list_tokens(self) -> dict[str, Any]:
        return {"tokens": t.list_tokens(self.store)}

    def revoke_token(self, name: str) -> dict[str, Any]:
        if not t.revoke_token(self.store, _token_name(name)):
            raise errors.NotFound(f"no token named {name!r}")
        return {"message": f"token {name} revoked", "name": name}

    def caller(self, token: str) -> Caller | None:
        """The caller a stored token stands for (None: no such token), marked as used."""
        row = t.token_by_hash(self.store, token_hash(token))
        if row is None:
            return None
        t.touch_token(self.store, row["name"], self.clock())
        return Caller.from_row(row)

    def any_tokens(self) -> bool:
        return t.any_tokens(self.store)

    def audit(
        self, who: str, tool: str, groups: Sequence[str], uuids: Sequence[str], outcome: str
    ) -> None:
        t.record_audit(self.store, self.clock(), who, tool, groups, uuids, outcome)

    def prune_audit(self, days: float) -> int:
        return t.prune_audit(self.store, self.clock() - timedelta(days=days))

    def list_groups(self, groups: Sequence[str] | None) -> dict[str, Any]:
        return {"groups": t.group_counts(self.store, groups)}

    def group_of(self, uuid: str) -> str | None:
        return t.group_of(self.store, uuid)


def _token_name(name: str) -> str:
    if not isinstance(name, str) or not names.is_group_id(name):
        raise errors.InvalidInput(f"not a valid token name: {names.GROUP_ID_RULE}")
    return name


def day_start(now: datetime) -> datetime:
    """Midnight UTC of ``now``'s day."""
    return now.replace(hour=0, minute=0, second=0, microsecond=0)
