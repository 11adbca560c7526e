"""In-memory rows of the memories, for the search hot path.

Why: fetching ~100 candidate rows from DuckDB by uuid costs a table scan (DuckDB 1.5 uses the
primary-key index only for single-value lookups), and twice that for the entity-name joins of
facts: alone more than a search's latency budget (figures in ``docs/performance.md``). So the
search engine keeps the columns it filters, scores and returns in memory and reads DuckDB only
when something changed:

* :meth:`RowCache.load` at open, :meth:`RowCache.refresh` for rows written by someone else
  (``SearchEngine.on_upsert`` re-reads the rows it is told about, ``refresh_states`` after
  maintenance re-reads all of them);
* access updates are applied here at once and written to DuckDB in batches
  (:mod:`workbench.search.access`).

The store stays the source of truth; this is a cache with explicit invalidation.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from workbench.store import Store
from workbench.store import search as sql

__all__ = ["RowCache"]


class RowCache:
    """uuid -> row dict of one memory kind, plus (facts) the facts touching each entity and
    (entities) the entities of each (group, normalised name)."""

    def __init__(self, kind: str):
        self.kind = kind
        self.rows: dict[str, dict[str, Any]] = {}
        self.touching: dict[str, set[str]] = {}  # entity uuid -> fact uuids (facts only)
        # group + NUL + name_norm -> the entity uuid, or the set of them when several share it
        # (a flat string key and a bare uuid keep this at ~130 bytes an entity)
        self.named: dict[str, str | set[str]] = {}

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self.rows

    def get(self, uuid: str) -> dict[str, Any] | None:
        return self.rows.get(uuid)

    def load(self, store: Store) -> None:
        self.rows, self.touching, self.named = {}, {}, {}
        self.put(sql.load_rows(store, self.kind))

    def refresh(self, store: Store, uuids: Sequence[str]) -> tuple[list[dict], list[str]]:
        """Re-read these rows; return (rows now present, uuids no longer in the store)."""
        rows = sql.load_rows(store, self.kind, list(uuids))
        found = {r["uuid"] for r in rows}
        gone = [u for u in uuids if u not in found]
        self.remove(gone)
        self.put(rows)
        return rows, gone

    def put(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            old = self.rows.get(row["uuid"])
            if old is not None:
                self._unlink(old)
            self.rows[row["uuid"]] = row
            self._link(row)

    def remove(self, uuids: Iterable[str]) -> None:
        for uuid in uuids:
            row = self.rows.pop(uuid, None)
            if row is not None:
                self._unlink(row)

    def _link(self, row: dict[str, Any]) -> None:
        if self.kind == "fact":
            for end in (row["source_uuid"], row["target_uuid"]):
                self.touching.setdefault(end, set()).add(row["uuid"])
        else:
            key, uuid = _name_key(row), row["uuid"]
            same = self.named.get(key)
            if same is None:
                self.named[key] = uuid
            elif isinstance(same, set):
                same.add(uuid)
            elif same != uuid:
                self.named[key] = {same, uuid}

    def _unlink(self, row: dict[str, Any]) -> None:
        if self.kind == "entity":
            key, uuid = _name_key(row), row["uuid"]
            same = self.named.get(key)
            if same == uuid:
                del self.named[key]
            elif isinstance(same, set):
                same.discard(uuid)
                if len(same) == 1:
                    self.named[key] = next(iter(same))
            return
        if self.kind == "fact":
            for end in (row["source_uuid"], row["target_uuid"]):
                facts = self.touching.get(end)
                if facts is not None:
                    facts.discard(row["uuid"])
                    if not facts:
                        del self.touching[end]

    def named_uuids(self, group_id: str, name_norm: str) -> list[str]:
        """The entities of ``group_id`` whose normalised name is ``name_norm``."""
        same = self.named.get(name_key(group_id, name_norm))
        if same is None:
            return []
        return [same] if isinstance(same, str) else list(same)

    def neighbourhood(self, entity_uuid: str, limit: int = 1000) -> tuple[list[str], set[str]]:
        """Facts touching the entity (newest first, at most ``limit``) and its neighbours."""
        facts = [self.rows[u] for u in self.touching.get(entity_uuid, ())]
        facts.sort(key=lambda r: r["created_at"], reverse=True)
        facts = facts[:limit]
        ends = {e for r in facts for e in (r["source_uuid"], r["target_uuid"])}
        ends.discard(entity_uuid)
        return [r["uuid"] for r in facts], ends


def name_key(group_id: str, name_norm: str) -> str:
    return f"{group_id}\x00{name_norm}"


def _name_key(row: dict[str, Any]) -> str:
    return name_key(row["group_id"], row.get("name_norm") or "")
