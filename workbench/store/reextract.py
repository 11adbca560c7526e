"""SQL of re-extraction (``workbench reextract``): the runs (table ``reextract_runs``), the
stored episodes a run extracts again, the calls it made, and the swap of a group's graph.

Run states: ``running`` (its shadow graph is being built), ``built`` (every episode done),
``promoted`` (its graph replaced the group's), ``discarded``. A group has at most one run that
is running or built (the one a new ``reextract`` resumes).

The graph a run replaces is what extraction made of the group's episodes: the facts an
episode stated and the entities episodes mention. Imported memories (no episode) stay, and
so does an entity a kept fact names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from workbench.store import Store
from workbench.store import graph as g

Row = dict[str, Any]  # a row of a graph table, by column

OPEN_STATES = ("running", "built")
RUN_ID = re.compile(r"rx-[0-9a-f]{12}")  # a run's id: its shadow's file name derives from it
RUN_COLUMNS = (
    "run_id, group_id, state, model, shadow_path, episodes, predicted_calls, calls_copied, "
    "created_at, finished_at"
)
# the columns of a memory that carry over to the row that replaces it (same name and type)
CARRIED = (
    "importance",
    "stability",
    "decay_score",
    "lifecycle_state",
    "last_accessed_at",
    "access_count",
    "soft_deleted_at",
    "created_at",
)


def insert_run(store: Store, run: dict[str, Any]) -> None:
    store.execute(
        """INSERT INTO reextract_runs (run_id, group_id, state, model, shadow_path, episodes,
               predicted_calls, calls_copied, created_at)
           VALUES (?, ?, 'running', ?, ?, ?, ?, 0, ?)""",
        [
            run["run_id"],
            run["group_id"],
            run["model"],
            run["shadow_path"],
            run["episodes"],
            run["predicted_calls"],
            run["created_at"],
        ],
    )


def get_run(store: Store, run_id: str) -> dict[str, Any] | None:
    rows = store.fetch_dicts(f"SELECT {RUN_COLUMNS} FROM reextract_runs WHERE run_id = ?", [run_id])
    return rows[0] if rows else None


def open_run(store: Store, group_id: str) -> dict[str, Any] | None:
    """The group's run that is running or built, if any."""
    rows = store.fetch_dicts(
        f"SELECT {RUN_COLUMNS} FROM reextract_runs WHERE group_id = ? "
        "AND list_contains(?, state) ORDER BY created_at DESC",
        [group_id, list(OPEN_STATES)],
    )
    return rows[0] if rows else None


def list_runs(store: Store, group_id: str | None = None) -> list[dict[str, Any]]:
    where, params = ("WHERE group_id = ?", [group_id]) if group_id else ("", [])
    return store.fetch_dicts(
        f"SELECT {RUN_COLUMNS} FROM reextract_runs {where} ORDER BY created_at", params
    )


def set_state(
    store: Store, run_id: str, state: str, now: datetime | None, episodes: int | None = None
) -> None:
    """Move an open run to ``state`` (a run promoted or discarded stays so: a run still
    building when a ``clear_graph`` discarded it does not come back as built)."""
    store.execute(
        """UPDATE reextract_runs SET state = ?, finished_at = ?,
               episodes = coalesce(?, episodes)
           WHERE run_id = ? AND list_contains(?, state)""",
        [state, now, episodes, run_id, list(OPEN_STATES)],
    )


def group_episode_uuids(store: Store, group_id: str) -> set[str]:
    """The uuids of the group's episodes (whatever their status)."""
    rows = store.fetchall("SELECT uuid FROM episodes WHERE group_id = ?", [group_id])
    return {u for (u,) in rows}


def discard_open_runs(store: Store) -> int:
    """Mark every open run discarded (a restore: a backup brings no shadow); how many."""
    count = int(
        store.one(
            "SELECT count(*) FROM reextract_runs WHERE list_contains(?, state)",
            [list(OPEN_STATES)],
        )[0]
    )
    store.execute(
        "UPDATE reextract_runs SET state = 'discarded', finished_at = now() "
        "WHERE list_contains(?, state)",
        [list(OPEN_STATES)],
    )
    return count


def done_episodes(store: Store, group_id: str) -> list[dict[str, Any]]:
    """The group's processed episodes, in the order they were queued (their original order)."""
    columns = ", ".join(f"e.{c.strip()}" for c in g.EPISODE_COLUMNS.split(","))
    return store.fetch_dicts(
        f"""SELECT {columns} FROM episodes e LEFT JOIN queue q ON q.episode_uuid = e.uuid
            WHERE e.group_id = ? AND e.status = 'done'
            ORDER BY q.seq NULLS LAST, e.created_at, e.uuid""",
        [group_id],
    )


def call_history(store: Store, episode_uuids: Sequence[str]) -> list[tuple[str, int, int, int]]:
    """Per episode with calls on record (the extraction that made the live graph, not a
    re-extraction): (episode uuid, calls, prompt tokens, completion tokens)."""
    rows = store.fetchall(
        """SELECT episode_uuid, count(*), sum(prompt_tokens), sum(completion_tokens)
           FROM llm_calls WHERE run_id IS NULL
             AND episode_uuid IN (SELECT unnest(?::VARCHAR[]))
           GROUP BY episode_uuid""",
        [list(episode_uuids)],
    )
    return [(str(u), int(c), int(p or 0), int(o or 0)) for u, c, p, o in rows]


def run_calls(store: Store, run_id: str) -> dict[str, Any]:
    row = store.one(
        """SELECT count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(completion_tokens), 0),
               coalesce(sum(total_cost), 0) FROM llm_calls WHERE run_id = ?""",
        [run_id],
    )
    return dict(zip(("calls", "prompt_tokens", "completion_tokens", "usd"), row))


# --- the graph of a group ------------------------------------------------------------------
def extracted_graph(store: Store, group_id: str) -> tuple[list[Row], list[Row]]:
    """The (entities, facts) extraction made of the group's episodes (see the module doc)."""
    facts = store.fetch_dicts(
        "SELECT * FROM facts WHERE group_id = ? AND episode_uuid IS NOT NULL", [group_id]
    )
    entities = store.fetch_dicts(
        """SELECT * FROM entities e WHERE group_id = ?
             AND EXISTS (SELECT 1 FROM mentions m WHERE m.entity_uuid = e.uuid)
             AND NOT EXISTS (SELECT 1 FROM facts f WHERE f.episode_uuid IS NULL
                             AND (f.source_uuid = e.uuid OR f.target_uuid = e.uuid))""",
        [group_id],
    )
    return entities, facts


def kept_entities(store: Store, group_id: str, removed: Sequence[str]) -> list[Row]:
    """The group's entities a swap keeps (imported ones, and those kept facts name)."""
    return store.fetch_dicts(
        "SELECT * FROM entities WHERE group_id = ? AND uuid NOT IN (SELECT unnest(?::VARCHAR[]))",
        [group_id, list(removed)],
    )


def vectors_of(store: Store, kind: str, uuids: Sequence[str]) -> dict[str, Any]:
    rows = store.fetchall(
        f"SELECT uuid, vector FROM {kind}_embeddings WHERE uuid IN (SELECT unnest(?::VARCHAR[]))",
        [list(uuids)],
    )
    return dict(rows)


def replace_graph(
    store: Store, episodes: Sequence[str], old: dict[str, list[str]], new: dict[str, list[Row]]
) -> None:
    """Inside the caller's transaction: delete the ``old`` entity and fact uuids (with their
    vectors, mentions and provenance) and the mentions ``episodes`` made (of kept entities
    too), and insert the ``new`` rows: ``entity``, ``fact``, ``mention`` and ``fact_source``
    (dicts of their tables' columns)."""
    g.delete_facts(store, old["fact"])
    g.delete_entities(store, old["entity"])
    store.execute(
        "DELETE FROM mentions WHERE episode_uuid IN (SELECT unnest(?::VARCHAR[]))",
        [list(episodes)],
    )
    for table, rows in (
        ("entities", new["entity"]),
        ("facts", new["fact"]),
        ("mentions", new["mention"]),
        ("fact_sources", new.get("fact_source", [])),
    ):
        _insert_rows(store, table, rows)


def set_episode_counts(store: Store, counts: Sequence[tuple[str, int, int]]) -> None:
    """(episode uuid, entities, facts) of each episode, as the new graph counts them."""
    if counts:
        store.executemany(
            "UPDATE episodes SET entity_count = ?, fact_count = ? WHERE uuid = ?",
            [[ents, facts, uuid] for uuid, ents, facts in counts],
        )


def _insert_rows(store: Store, table: str, rows: list[Row]) -> None:
    if rows:
        columns = list(rows[0])
        store.executemany(
            f"INSERT INTO {table} ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' for _ in columns)})",
            [[r[c] for c in columns] for r in rows],
        )


# --- reads of a graph (live or shadow) ------------------------------------------------------
READABLE = (
    "episodes",
    "entities",
    "facts",
    "mentions",
    "llm_calls",
    "fact_sources",
)  # see table_rows


def table_rows(store: Store, table: str) -> list[dict[str, Any]]:
    """Every row of one of a graph's tables (a shadow's: it holds one group)."""
    if table not in READABLE:
        raise ValueError(f"not a graph table: {table!r}")
    return store.fetch_dicts(f"SELECT * FROM {table}")


def group_graph(store: Store, group_id: str) -> tuple[list[Row], list[Row]]:
    """Every entity and fact of the group (imported ones too)."""
    return (
        store.fetch_dicts("SELECT * FROM entities WHERE group_id = ?", [group_id]),
        store.fetch_dicts("SELECT * FROM facts WHERE group_id = ?", [group_id]),
    )


def mentions_of(store: Store, episode_uuids: Sequence[str]) -> list[dict[str, Any]]:
    return store.fetch_dicts(
        "SELECT * FROM mentions WHERE episode_uuid IN (SELECT unnest(?::VARCHAR[]))",
        [list(episode_uuids)],
    )


def episode_uuids(store: Store, status: str | None = None) -> set[str]:
    """The uuids of the store's episodes (of this status)."""
    where, params = ("WHERE status = ?", [status]) if status else ("", [])
    return {u for (u,) in store.fetchall(f"SELECT uuid FROM episodes {where}", params)}


def pending(store: Store) -> int:
    """Queue messages not done yet (a shadow's: episodes left to extract)."""
    return int(store.one("SELECT count(*) FROM queue WHERE state <> 'done'")[0])
