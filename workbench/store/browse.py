"""SQL for browsing a group page by page (the memory browser at ``/ui``, and any client that
lists rather than searches): per-group figures, a timeline of episodes, an episode with its
passages, facts current and superseded, entities and one entity's neighbourhood, and the rows
an entity's deletion removes.

Every listing is one group's, ordered, and paged by ``limit``/``offset`` with the total it
pages through; nothing here reads a whole table into Python.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, cast

from workbench import names
from workbench.errors import InvalidInput, NotFound
from workbench.results import browse as rb
from workbench.safety import scrub
from workbench.store import Store
from workbench.store.graph import EPISODE_COLUMNS, FACT_SELECT, delete_entities, delete_facts
from workbench.store.tenancy import day_start, group_costs_since

PREVIEW_CHARS = 240
FactState = Literal["current", "superseded", "all"]
# a fact is superseded once it is no longer true in the world or no longer believed
SUPERSEDED = "(f.invalid_at IS NOT NULL OR f.expired_at IS NOT NULL)"
_FACT_STATES = {"current": f"AND NOT {SUPERSEDED}", "superseded": f"AND {SUPERSEDED}", "all": ""}
QUEUE_STATES = ("queued", "processing", "done", "failed")


# --- per-group figures --------------------------------------------------------------------
def group_stats(store: Store, groups: Sequence[str] | None, now: datetime) -> list[dict[str, Any]]:
    """Per group: episodes, entities, facts (current ones too), passages, the queue by state,
    the last activity (an episode stored or processed) and the LLM cost (USD) of today (UTC).
    ``groups``: these only, even when empty; None: every group that holds anything."""
    where, params = ("WHERE group_id = ANY(?)", [list(groups)]) if groups is not None else ("", [])
    stats: dict[str, dict[str, Any]] = {g: _empty(g) for g in groups or ()}

    def row(group: str) -> dict[str, Any] | None:
        if group not in stats and groups is None:
            stats[group] = _empty(group)
        return stats.get(group)

    for table in ("entities", "passages"):
        for group, n in store.fetchall(
            f"SELECT group_id, count(*) FROM {table} {where} GROUP BY 1", params
        ):
            if (r := row(group)) is not None:
                r[table] = int(n)
    for group, n, last_stored, last_done in store.fetchall(
        f"SELECT group_id, count(*), max(created_at), max(processed_at) FROM episodes {where} "
        "GROUP BY 1",
        params,
    ):
        if (r := row(group)) is not None:
            r["episodes"] = int(n)
            r["last_activity"] = max(t for t in (last_stored, last_done) if t is not None)
    for group, n, current in store.fetchall(
        f"SELECT group_id, count(*), count(*) FILTER (WHERE NOT {SUPERSEDED}) FROM facts f "
        f"{where} GROUP BY 1",
        params,
    ):
        if (r := row(group)) is not None:
            r["facts"], r["facts_current"] = int(n), int(current)
    for group, state, n in store.fetchall(
        f"SELECT group_id, state, count(*) FROM queue {where} GROUP BY 1, 2", params
    ):
        if (r := row(group)) is not None and state in r["queue"]:
            r["queue"][state] = int(n)
    for group, cost in group_costs_since(store, day_start(now)).items():
        if group in stats:
            stats[group]["llm_cost_today_usd"] = round(cost, 6)
    return [stats[g] for g in sorted(stats)]


def _empty(group: str) -> dict[str, Any]:
    return {
        "group_id": group,
        "episodes": 0,
        "entities": 0,
        "facts": 0,
        "facts_current": 0,
        "passages": 0,
        "queue": dict.fromkeys(QUEUE_STATES, 0),
        "last_activity": None,
        "llm_cost_today_usd": 0.0,
    }


# --- episodes -----------------------------------------------------------------------------
def episode_page(store: Store, group: str, limit: int, offset: int) -> dict[str, Any]:
    """The group's episodes by when they happened, latest first, with a preview of each."""
    total = store.one("SELECT count(*) FROM episodes WHERE group_id = ?", [group])[0]
    rows = store.fetch_dicts(
        f"""SELECT uuid, group_id, name, source, source_description, reference_time,
                   created_at, status, status_detail, entity_count, fact_count,
                   left(body, {PREVIEW_CHARS}) AS preview, length(body) AS body_chars
            FROM episodes WHERE group_id = ?
            ORDER BY reference_time DESC, created_at DESC, uuid LIMIT ? OFFSET ?""",
        [group, limit, offset],
    )
    return {"group_id": group, "total": int(total), "offset": offset, "episodes": rows}


def episode_passages(store: Store, uuid: str) -> list[dict[str, Any]]:
    return store.fetch_dicts(
        """SELECT uuid, position, speaker, text, reference_time, lifecycle_state
           FROM passages WHERE episode_uuid = ? ORDER BY position""",
        [uuid],
    )


def episode_entities(store: Store, uuid: str) -> list[dict[str, Any]]:
    """The entities an episode mentions."""
    return store.fetch_dicts(
        """SELECT e.uuid, e.name, e.entity_type FROM mentions m
           JOIN entities e ON e.uuid = m.entity_uuid
           WHERE m.episode_uuid = ? ORDER BY e.name_norm""",
        [uuid],
    )


# --- facts --------------------------------------------------------------------------------
_FACTS_WITH_EPISODE = FACT_SELECT.replace(
    "FROM facts f",
    f", {SUPERSEDED} AS superseded, ep.name AS episode_name, "
    "ep.reference_time AS episode_reference_time FROM facts f "
    "LEFT JOIN episodes ep ON ep.uuid = f.episode_uuid",
)


def fact_page(
    store: Store, group: str, state: FactState, limit: int, offset: int
) -> dict[str, Any]:
    """The group's facts (current, superseded or all), latest valid first, each with its
    endpoints' names and the episode it came from."""
    only = _FACT_STATES[state]
    total = store.one(f"SELECT count(*) FROM facts f WHERE f.group_id = ? {only}", [group])[0]
    rows = store.fetch_dicts(
        f"""{_FACTS_WITH_EPISODE} WHERE f.group_id = ? {only}
            ORDER BY coalesce(f.valid_at, f.created_at) DESC, f.uuid LIMIT ? OFFSET ?""",
        [group, limit, offset],
    )
    return {
        "group_id": group,
        "state": state,
        "total": int(total),
        "offset": offset,
        "facts": [_fact(r) for r in rows],
    }


def _fact(row: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "uuid", "group_id", "fact", "relation", "source_uuid", "source_name", "target_uuid",
        "target_name", "valid_at", "invalid_at", "created_at", "expired_at", "superseded",
        "episode_uuid", "episode_name", "episode_reference_time", "lifecycle_state",
        "importance", "decay_score",
    )  # fmt: skip
    return {k: row.get(k) for k in keep}


# --- entities -----------------------------------------------------------------------------
_ENTITY_COLUMNS = (
    "e.uuid, e.group_id, e.name, e.entity_type, e.summary, e.created_at, e.updated_at, "
    "e.lifecycle_state, e.importance, e.stability, e.decay_score"
)


def entity_page(
    store: Store, group: str, name_contains: str | None, limit: int, offset: int
) -> dict[str, Any]:
    """The group's entities by name (optionally those whose name contains a text), each
    with how many facts touch it."""
    where, params = "e.group_id = ?", [group]
    if name_contains:
        where += " AND strpos(e.name_norm, ?) > 0"
        params.append(name_contains.strip().lower())
    total = store.one(f"SELECT count(*) FROM entities e WHERE {where}", params)[0]
    rows = store.fetch_dicts(
        f"""SELECT {_ENTITY_COLUMNS}, coalesce(d.n, 0) AS fact_count FROM entities e
            LEFT JOIN (SELECT u, count(*) AS n FROM (
                    SELECT source_uuid AS u FROM facts WHERE group_id = ?
                    UNION ALL SELECT target_uuid FROM facts WHERE group_id = ?) AS t
                GROUP BY u) AS d ON d.u = e.uuid
            WHERE {where} ORDER BY e.name_norm, e.uuid LIMIT ? OFFSET ?""",
        [group, group, *params, limit, offset],
    )
    return {"group_id": group, "total": int(total), "offset": offset, "entities": rows}


def entity_neighbourhood(store: Store, uuid: str, max_facts: int) -> dict[str, Any] | None:
    """An entity, the facts that touch it (current first), the entities at their other
    ends and the episodes that mention it."""
    found = store.fetch_dicts(f"SELECT {_ENTITY_COLUMNS} FROM entities e WHERE e.uuid = ?", [uuid])
    if not found:
        return None
    facts = store.fetch_dicts(
        f"""{_FACTS_WITH_EPISODE} WHERE f.source_uuid = ? OR f.target_uuid = ?
            ORDER BY {SUPERSEDED}, coalesce(f.valid_at, f.created_at) DESC, f.uuid LIMIT ?""",
        [uuid, uuid, max_facts],
    )
    others = {f["target_uuid"] if f["source_uuid"] == uuid else f["source_uuid"] for f in facts}
    neighbours = store.fetch_dicts(
        f"SELECT {_ENTITY_COLUMNS} FROM entities e WHERE e.uuid = ANY(?) ORDER BY e.name_norm",
        [sorted(others - {uuid})],
    )
    episodes = store.fetch_dicts(
        """SELECT ep.uuid, ep.name, ep.reference_time FROM mentions m
           JOIN episodes ep ON ep.uuid = m.episode_uuid
           WHERE m.entity_uuid = ? ORDER BY ep.reference_time DESC LIMIT 50""",
        [uuid],
    )
    return {
        "entity": found[0],
        "facts": [_fact(f) for f in facts],
        "neighbours": neighbours,
        "episodes": episodes,
    }


def delete_entity(store: Store, uuid: str) -> dict[str, list[str]]:
    """Remove an entity, its mentions and every fact that touches it (an edge needs both
    ends); the uuids removed per kind. Runs inside the caller's transaction when there is one."""
    facts = [
        r[0]
        for r in store.fetchall(
            "SELECT uuid FROM facts WHERE source_uuid = ? OR target_uuid = ?", [uuid, uuid]
        )
    ]
    delete_facts(store, facts)
    delete_entities(store, [uuid])
    return {"entity": [uuid], "fact": facts}


# --- the tools ----------------------------------------------------------------------------
MAX_PAGE = 1000


class GroupPages:
    """The browsing tools over one store (the facade holds one as ``pages``; the tool table
    names its methods ``pages.<name>``): arguments checked, answers JSON-ready."""

    def __init__(self, store: Store, clock: Callable[[], datetime]):
        self.store = store
        self.clock = clock

    def get_group_stats(self, group_ids: Sequence[str] | None = None) -> rb.GroupStatsResult:
        groups = names.group_ids(group_ids) or None
        return cast(
            rb.GroupStatsResult, _plain({"groups": group_stats(self.store, groups, self.clock())})
        )

    def list_episodes(self, group_id: str, limit: int = 50, offset: int = 0) -> rb.EpisodePage:
        page = episode_page(self.store, names.group_id(group_id), *_page(limit, offset))
        return cast(rb.EpisodePage, _plain(page))

    def get_episode(self, uuid: str) -> rb.EpisodeWhole:
        rows = self.store.fetch_dicts(
            f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE uuid = ?", [uuid]
        )
        if not rows:
            raise NotFound(f"no episode with uuid {uuid}")
        episode = {**rows[0], "status_detail": scrub(rows[0]["status_detail"])}
        whole = {
            "episode": episode,
            "passages": episode_passages(self.store, uuid),
            "entities": episode_entities(self.store, uuid),
        }
        return cast(rb.EpisodeWhole, _plain(whole))

    def list_facts(
        self, group_id: str, state: str = "all", limit: int = 50, offset: int = 0
    ) -> rb.FactPage:
        if state not in _FACT_STATES:
            raise InvalidInput("'state' must be current, superseded or all")
        group = names.group_id(group_id)
        page = fact_page(self.store, group, cast(FactState, state), *_page(limit, offset))
        return cast(rb.FactPage, _plain(page))

    def list_entities(
        self, group_id: str, name_contains: str | None = None, limit: int = 50, offset: int = 0
    ) -> rb.EntityPage:
        group = names.group_id(group_id)
        page = entity_page(self.store, group, name_contains, *_page(limit, offset))
        return cast(rb.EntityPage, _plain(page))

    def get_entity(self, uuid: str, max_facts: int = 50) -> rb.EntityNeighbourhood:
        found = entity_neighbourhood(self.store, uuid, _page(max_facts, 0)[0])
        if found is None:
            raise NotFound(f"no entity with uuid {uuid}")
        return cast(rb.EntityNeighbourhood, _plain(found))

    def delete_entity(self, uuid: str) -> tuple[dict[str, list[str]], str, rb.DeleteEntityResult]:
        """Delete an entity and its facts in one transaction: the uuids removed per kind (for
        the search indexes), its group and the tool's answer."""
        with self.store.transaction():
            found = self.store.fetch_dicts(
                "SELECT name, group_id FROM entities WHERE uuid = ?", [uuid]
            )
            if not found:
                raise NotFound(f"no entity with uuid {uuid}")
            removed = delete_entity(self.store, uuid)
        answer: rb.DeleteEntityResult = {
            "message": f"Entity {found[0]['name']!r} ({uuid}) deleted",
            "facts_removed": len(removed["fact"]),
        }
        return removed, found[0]["group_id"], answer


def _page(limit: int, offset: int) -> tuple[int, int]:
    """A listing's (limit, offset), checked."""
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidInput(f"'limit' must be an integer from 1 to {MAX_PAGE}")
    if not isinstance(offset, int) or offset < 0:
        raise InvalidInput("'offset' must be an integer of 0 or more")
    return limit, offset


def _plain(value: Any) -> Any:
    """Datetimes as ISO 8601 strings, recursively (the answers travel as JSON)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value.isoformat() if isinstance(value, datetime) else value
