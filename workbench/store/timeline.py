"""SQL of a timeline (``get_timeline``): what happened in some groups, in time order.

Three kinds of events, one statement for a page of them:

- ``episode``: an episode, at its ``reference_time``;
- ``fact_valid``: a fact became true, at its ``valid_at`` (a fact extracted with no date of
  its own: its first episode's reference time, else when it was stored);
- ``fact_invalid``: a fact stopped being true, at its ``invalid_at``.

Events are ordered by (time, kind, uuid), and a page starts after the (time, kind, uuid) of
the last event of the one before (keyset paging: a page never repeats or skips an event when
memories are added meanwhile). Soft-deleted facts are left out. PostgreSQL reads each branch
through an index on (group_id, time) (:data:`workbench.store.changes.POSTGRES_DDL`); DuckDB
scans the group's rows, pruned by zone maps.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from workbench.store import Store

__all__ = ["EVENT_KINDS", "events", "superseding"]

EVENT_KINDS = ("episode", "fact_invalid", "fact_valid")  # their order at one time

_IN_GROUPS = "{a}.group_id IN (SELECT unnest($groups::VARCHAR[]))"
_FACT_COLUMNS = (
    "f.uuid, f.group_id, f.fact AS text, CAST(NULL AS VARCHAR) AS source, f.relation, "
    "f.source_uuid, f.target_uuid, f.valid_at, f.invalid_at"
)
_LIVE_FACT = "f.lifecycle_state <> 'SOFT_DELETED'"


def _branches(entity: bool, groups: bool) -> str:
    def in_groups(alias: str) -> str:
        return _IN_GROUPS.format(a=alias) if groups else "TRUE"

    mentions = (
        " AND EXISTS (SELECT 1 FROM mentions m WHERE m.episode_uuid = e.uuid "
        "AND m.entity_uuid = $entity)"
        if entity
        else ""
    )
    touches = " AND (f.source_uuid = $entity OR f.target_uuid = $entity)" if entity else ""
    return f"""
        SELECT 'episode' AS event, e.reference_time AS at, e.uuid, e.group_id, e.name AS text,
               e.source, CAST(NULL AS VARCHAR) AS relation, CAST(NULL AS VARCHAR) AS source_uuid,
               CAST(NULL AS VARCHAR) AS target_uuid, CAST(NULL AS TIMESTAMPTZ) AS valid_at,
               CAST(NULL AS TIMESTAMPTZ) AS invalid_at
        FROM episodes e WHERE {in_groups("e")}{mentions}
        UNION ALL
        SELECT 'fact_valid', coalesce(f.valid_at, ep.reference_time, f.created_at),
               {_FACT_COLUMNS}
        FROM facts f LEFT JOIN episodes ep ON ep.uuid = f.episode_uuid
        WHERE {in_groups("f")} AND {_LIVE_FACT}{touches}
        UNION ALL
        SELECT 'fact_invalid', f.invalid_at, {_FACT_COLUMNS}
        FROM facts f
        WHERE {in_groups("f")} AND f.invalid_at IS NOT NULL AND {_LIVE_FACT}{touches}
    """


def events(
    store: Store,
    group_ids: Sequence[str] | None,
    limit: int,
    entity_uuid: str | None = None,
    after: datetime | None = None,
    before: datetime | None = None,
    start: tuple[datetime, str, str] | None = None,
) -> list[dict[str, Any]]:
    """At most ``limit`` events of the groups (None: every group; of one entity: the
    episodes that mention it and its facts) at or after ``after`` and before ``before``,
    following the event ``start`` (time, kind, uuid), in order."""
    params: dict[str, Any] = {"limit": limit}
    if group_ids is not None:
        params["groups"] = list(group_ids)
    where = ["TRUE"]
    if entity_uuid is not None:
        params["entity"] = entity_uuid
    if after is not None:
        where.append("t.at >= $after")
        params["after"] = after
    if before is not None:
        where.append("t.at < $before")
        params["before"] = before
    if start is not None:
        where.append(
            "(t.at > $at OR (t.at = $at AND (t.event > $event "
            "OR (t.event = $event AND t.uuid > $uuid))))"
        )
        params.update(at=start[0], event=start[1], uuid=start[2])
    return store.fetch_dicts(
        f"""SELECT * FROM ({_branches(entity_uuid is not None, group_ids is not None)}) AS t
            WHERE {" AND ".join(where)}
            ORDER BY t.at, t.event, t.uuid LIMIT $limit""",
        params,
    )


def superseding(store: Store, fact_uuids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """fact uuid -> the facts that superseded it, when known: facts of its group sharing one
    of its entities that became true when it stopped (extraction dates an invalidation by
    the facts that invalidate it, else by their episode). One statement for a page."""
    if not fact_uuids:
        return {}
    rows = store.fetch_dicts(
        """SELECT o.uuid AS old, n.uuid, n.fact FROM facts o
           JOIN facts n ON n.group_id = o.group_id AND n.uuid <> o.uuid
             AND (n.source_uuid = o.source_uuid OR n.source_uuid = o.target_uuid
                  OR n.target_uuid = o.source_uuid OR n.target_uuid = o.target_uuid)
           LEFT JOIN episodes ep ON ep.uuid = n.episode_uuid
           WHERE o.uuid IN (SELECT unnest($1::VARCHAR[]))
             AND coalesce(n.valid_at, ep.reference_time) = o.invalid_at
             AND n.created_at >= o.created_at
           ORDER BY o.uuid, n.created_at, n.uuid""",
        [list(fact_uuids)],
    )
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["old"], []).append({"uuid": row["uuid"], "fact": row["fact"]})
    return out
