"""SQL for the knowledge graph: episodes, entities, facts, mentions and their embeddings."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pyarrow as pa

from workbench.store import Store, provenance
from workbench.store.passages import delete_passages, passages_of_episodes
from workbench.store.schema import VECTOR_SEQ

EPISODE_COLUMNS = (
    "uuid, group_id, name, body, source, source_description, reference_time, created_at, "
    "priority, status, status_detail, processed_at, entity_count, fact_count"
)

FACT_SELECT = """
    SELECT f.*, s.name AS source_name, t.name AS target_name
    FROM facts f
    LEFT JOIN entities s ON s.uuid = f.source_uuid
    LEFT JOIN entities t ON t.uuid = f.target_uuid
"""


# --- episodes -----------------------------------------------------------------------------
def insert_episode(store: Store, ep: dict[str, Any]) -> None:
    store.execute(
        """INSERT INTO episodes (uuid, group_id, name, body, source, source_description,
               reference_time, created_at, priority, status, status_detail)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            ep["uuid"],
            ep["group_id"],
            ep["name"],
            ep["body"],
            ep["source"],
            ep["source_description"],
            ep["reference_time"],
            ep["created_at"],
            ep["priority"],
            ep.get("status", "queued"),
            ep.get("status_detail"),
        ],
    )


def get_episode(store: Store, uuid: str) -> dict[str, Any] | None:
    rows = store.fetch_dicts(f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE uuid = ?", [uuid])
    return rows[0] if rows else None


def list_episodes(
    store: Store, group_ids: Sequence[str] | None, limit: int
) -> list[dict[str, Any]]:
    where, params = _group_filter(group_ids)
    return store.fetch_dicts(
        f"SELECT {EPISODE_COLUMNS} FROM episodes {where} "
        "ORDER BY reference_time DESC, created_at DESC LIMIT ?",
        [*params, limit],
    )


def episodes_by_uuid(store: Store, uuids: Sequence[str]) -> dict[str, dict[str, Any]]:
    if not uuids:
        return {}
    rows = store.fetch_dicts(
        f"SELECT {EPISODE_COLUMNS} FROM episodes WHERE uuid = ANY(?)", [list(uuids)]
    )
    return {row["uuid"]: row for row in rows}


def latest_episodes(
    store: Store, group_ids: Sequence[str], limit: int
) -> dict[str, list[dict[str, Any]]]:
    """Per group its latest processed episodes, up to ``limit``, in :func:`recent_episodes`'s
    order (what :class:`workbench.ingest.recent.RecentEpisodes` keeps): one query for all groups."""
    out: dict[str, list[dict[str, Any]]] = {gid: [] for gid in group_ids}
    if not group_ids or limit <= 0:
        return out
    # a window over a group's whole history sorts all of it (0.6 s for a million episodes):
    # first each group's limit-th latest time (an aggregate), then rank only the rows since
    rows = store.fetch_dicts(_LATEST_SQL[store.backend], [list(group_ids), limit])
    for row in rows:
        out[row.pop("group_id")].append(row)
    return out


_LATEST_SQL = {
    "duckdb": """WITH since AS (
               SELECT group_id, list_min(max(reference_time, $2)) AS t FROM episodes
               WHERE group_id = ANY($1) AND status = 'done' GROUP BY group_id)
           SELECT e.group_id, e.uuid, e.name, e.body, e.reference_time
           FROM episodes e JOIN since s ON e.group_id = s.group_id AND e.reference_time >= s.t
           WHERE e.status = 'done'
           QUALIFY row_number() OVER (PARTITION BY e.group_id
                                      ORDER BY e.reference_time DESC, e.uuid) <= $2
           ORDER BY e.group_id, e.reference_time DESC, e.uuid""",
    "postgres": """SELECT group_id, uuid, name, body, reference_time FROM (
               SELECT group_id, uuid, name, body, reference_time, row_number() OVER (
                   PARTITION BY group_id ORDER BY reference_time DESC, uuid) AS rank
               FROM episodes WHERE group_id = ANY($1) AND status = 'done') AS r
           WHERE rank <= $2
           ORDER BY group_id, reference_time DESC, uuid""",
}


def recent_episodes(
    store: Store, group_id: str, before: datetime, exclude: str, limit: int
) -> list[dict[str, Any]]:
    """The group's latest processed episodes before ``before`` (context for extraction)."""
    return store.fetch_dicts(
        """SELECT uuid, name, body, reference_time FROM episodes
           WHERE group_id = ? AND uuid <> ? AND status = 'done' AND reference_time <= ?
           ORDER BY reference_time DESC, uuid LIMIT ?""",
        [group_id, exclude, before, limit],
    )


def unprocessed_episodes(store: Store, uuids: Sequence[str]) -> dict[str, datetime]:
    """Which of these episodes exist and are not done yet: uuid → created_at."""
    if not uuids:
        return {}
    sql = "SELECT uuid, status, created_at FROM episodes WHERE uuid = ANY(?)"
    if store.shared:
        # two processes writing one episode (a lease taken over): the second waits for the
        # first's commit here, then finds it done
        sql += " FOR UPDATE"
    rows = store.fetchall(sql, [list(uuids)])  # the key alone in the WHERE: an index lookup
    return {uuid: created for uuid, status, created in rows if status != "done"}


def mark_episodes_done(store: Store, counts: Sequence[tuple[str, int, int]], now: datetime) -> None:
    """Mark episodes processed: ``counts`` holds (uuid, entity_count, fact_count) rows."""
    if not counts:
        return
    store.execute(
        """UPDATE episodes SET status = 'done', status_detail = NULL, processed_at = $1,
               entity_count = v.entity_count, fact_count = v.fact_count
           FROM (SELECT unnest($2::VARCHAR[]) AS uuid, unnest($3::INTEGER[]) AS entity_count,
                        unnest($4::INTEGER[]) AS fact_count) AS v
           WHERE episodes.uuid = v.uuid""",
        [now, [c[0] for c in counts], [c[1] for c in counts], [c[2] for c in counts]],
    )


def delete_episode(store: Store, uuid: str) -> dict[str, list[str]]:
    """Remove an episode, its passages, the facts only it stated (a fact another episode
    stated again stays, that episode its first now) and the entities only it mentioned.

    Returns the uuids removed per kind (the caller updates the search indexes).
    Runs inside the caller's transaction when there is one.
    """
    kept = provenance.restated_elsewhere(store, uuid)
    provenance.move_first_episode(store, kept)
    facts = [r[0] for r in store.fetchall("SELECT uuid FROM facts WHERE episode_uuid = ?", [uuid])]
    provenance.delete_of_episode(store, uuid)
    orphans = [
        r[0]
        for r in store.fetchall(
            """SELECT m.entity_uuid FROM mentions m
               WHERE m.episode_uuid = ?
                 AND NOT EXISTS (SELECT 1 FROM mentions o
                                 WHERE o.entity_uuid = m.entity_uuid AND o.episode_uuid <> ?)""",
            [uuid, uuid],
        )
    ]
    if orphans:
        # facts touching an orphan entity go too (an edge needs both ends)
        facts += [
            r[0]
            for r in store.fetchall(
                "SELECT uuid FROM facts WHERE (list_contains(?, source_uuid) "
                "OR list_contains(?, target_uuid)) AND NOT list_contains(?, uuid)",
                [orphans, orphans, facts],
            )
        ]
    delete_facts(store, facts)
    delete_entities(store, orphans)
    passages = passages_of_episodes(store, [uuid])
    delete_passages(store, passages)
    store.execute("DELETE FROM mentions WHERE episode_uuid = ?", [uuid])
    store.execute("DELETE FROM queue WHERE episode_uuid = ?", [uuid])
    store.execute("DELETE FROM episodes WHERE uuid = ?", [uuid])
    return {"entity": orphans, "fact": facts, "passage": passages}


CLEAR_STEP = 1000  # facts or entities deleted a transaction by clear_groups


def clear_groups(
    store: Store, group_ids: Sequence[str], step: int = CLEAR_STEP
) -> Iterator[dict[str, Any]]:
    """Delete everything of the groups, in transactions of at most ``step`` facts or entities
    (the store is not held for seconds while a large group goes: other requests run between
    the steps). Yields what each committed step removed: ``passage`` uuids, ``episodes`` (a
    count), then ``fact`` and ``entity`` uuids. Stopped half-way, the rest is still there to
    clear again."""
    groups = [list(group_ids)]
    in_groups = "group_id IN (SELECT unnest(?::VARCHAR[]))"  # a join: no per-row scan of a list
    passages = [
        r[0] for r in store.fetchall(f"SELECT uuid FROM passages WHERE {in_groups}", groups)
    ]
    for start in range(0, len(passages), step):  # before their episodes
        with store.transaction():
            delete_passages(store, passages[start : start + step])
        yield {"passage": passages[start : start + step]}
    with store.transaction():
        episodes = store.one(f"SELECT count(*) FROM episodes WHERE {in_groups}", groups)[0]
        for table in ("mentions", "fact_sources"):
            store.execute(
                f"DELETE FROM {table} WHERE episode_uuid IN "
                f"(SELECT uuid FROM episodes WHERE {in_groups})",
                groups,
            )
        store.execute(f"DELETE FROM queue WHERE {in_groups}", groups)
        store.execute(f"DELETE FROM episodes WHERE {in_groups}", groups)
    yield {"episodes": episodes}
    for kind, table, delete in (
        ("fact", "facts", delete_facts),
        ("entity", "entities", delete_entities),
    ):
        uuids = [
            r[0] for r in store.fetchall(f"SELECT uuid FROM {table} WHERE {in_groups}", groups)
        ]
        for start in range(0, len(uuids), step):
            with store.transaction():
                delete(store, uuids[start : start + step])
            yield {kind: uuids[start : start + step]}


# --- entities -----------------------------------------------------------------------------
def entities_by_norm(
    store: Store, group_id: str, names_norm: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """Existing (non-purged) entities of a group keyed by normalised name."""
    if not names_norm:
        return {}
    rows = store.fetch_dicts(
        """SELECT uuid, name, name_norm, entity_type, summary, lifecycle_state
           FROM entities WHERE group_id = ? AND list_contains(?, name_norm)
           ORDER BY created_at""",
        [group_id, list(names_norm)],
    )
    found: dict[str, dict[str, Any]] = {}
    for row in rows:
        found.setdefault(row["name_norm"], row)
    return found


def entities_by_key(
    store: Store, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], dict[str, Any]]:
    """Existing (non-purged) entities by (group_id, normalised name), the oldest of a key:
    one query whatever the groups (a writer's check, inside its transaction, that no one
    made them since it looked)."""
    wanted = sorted(set(keys))
    if not wanted:
        return {}
    rows = store.fetch_dicts(
        """SELECT e.uuid, e.group_id, e.name, e.name_norm FROM entities e
           JOIN (SELECT unnest($1::VARCHAR[]) AS g, unnest($2::VARCHAR[]) AS n) AS k
             ON e.group_id = k.g AND e.name_norm = k.n
           ORDER BY e.created_at, e.uuid""",
        [[k[0] for k in wanted], [k[1] for k in wanted]],
    )
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        found.setdefault((row["group_id"], row["name_norm"]), row)
    return found


def entities_by_uuid(store: Store, uuids: Sequence[str]) -> dict[str, dict[str, Any]]:
    if not uuids:
        return {}
    rows = store.fetch_dicts("SELECT * FROM entities WHERE uuid = ANY(?)", [list(uuids)])
    return {row["uuid"]: row for row in rows}


def insert_entities(store: Store, rows: Sequence[dict[str, Any]]) -> None:
    store.executemany(
        """INSERT INTO entities (uuid, group_id, name, name_norm, entity_type, summary,
               created_at, updated_at, importance, stability, classification_status,
               lifecycle_state)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            [
                r["uuid"],
                r["group_id"],
                r["name"],
                r["name_norm"],
                r["entity_type"],
                r["summary"],
                r["created_at"],
                r["created_at"],
                r["importance"],
                r["stability"],
                r["classification_status"],
                r["lifecycle_state"],
            ]
            for r in rows
        ],
    )


def update_entity_summaries(
    store: Store, summaries: Sequence[tuple[str, str]], now: datetime
) -> None:
    """Set the summary of several entities (uuid, summary) in one statement."""
    if summaries:
        store.execute(
            """UPDATE entities SET summary = v.summary, updated_at = $1
               FROM (SELECT unnest($2::VARCHAR[]) AS uuid, unnest($3::VARCHAR[]) AS summary) AS v
               WHERE entities.uuid = v.uuid""",
            [now, [u for u, _ in summaries], [t for _, t in summaries]],
        )


def delete_entities(store: Store, uuids: Sequence[str]) -> None:
    if uuids:
        # a join with the list: DuckDB compares ``uuid = ANY(?)`` row by row (30x slower)
        for table, column in (
            ("entity_embeddings", "uuid"),
            ("mentions", "entity_uuid"),
            ("entities", "uuid"),
        ):
            store.execute(
                f"DELETE FROM {table} WHERE {column} IN (SELECT unnest(?::VARCHAR[]))",
                [list(uuids)],
            )


def insert_mention_rows(store: Store, rows: Sequence[tuple[str, str]]) -> None:
    """New (episode_uuid, entity_uuid) rows; repeats among them are written once. A row that
    is already stored is an error: ON CONFLICT DO NOTHING would hide it, but it costs a scan
    of the table (30 ms a batch with a million mentions stored)."""
    store.executemany(
        "INSERT INTO mentions VALUES (?, ?)", [list(row) for row in dict.fromkeys(rows)]
    )


# --- facts --------------------------------------------------------------------------------
def facts_between(
    store: Store, entity_uuids: Sequence[str], limit: int = 50
) -> list[dict[str, Any]]:
    """Current (not invalidated, not expired) facts touching any of the entities: uuid,
    relation, fact text and both ends (what extraction shows the LLM; few columns keep it
    cheap: DuckDB's conversion of timestamps to Python is slow)."""
    if not entity_uuids:
        return []
    ids = list(entity_uuids)
    return store.fetch_dicts(
        """SELECT f.uuid, f.relation, f.fact, f.source_uuid, f.target_uuid,
                  s.name AS source_name, t.name AS target_name
           FROM facts f
           LEFT JOIN entities s ON s.uuid = f.source_uuid
           LEFT JOIN entities t ON t.uuid = f.target_uuid
           WHERE (list_contains($1, f.source_uuid) OR list_contains($1, f.target_uuid))
             AND f.invalid_at IS NULL AND f.expired_at IS NULL
             AND f.lifecycle_state NOT IN ('EXPIRED', 'SOFT_DELETED')
           ORDER BY f.created_at DESC LIMIT $2""",
        [ids, limit],
    )


def existing_fact_keys(
    store: Store, group_id: str, keys: Sequence[tuple[str, str, str]]
) -> set[tuple[str, str, str]]:
    """Which (source_uuid, target_uuid, lower-cased fact) keys already exist, unexpired, in
    the group: one query for all of an episode's candidate facts."""
    found = existing_facts(store, [(group_id, *k) for k in keys])
    return {k[1:] for k in found}


def existing_facts(
    store: Store, keys: Sequence[tuple[str, str, str, str]], ignore: Sequence[str] = ()
) -> set[tuple[str, str, str, str]]:
    """Which (group_id, source_uuid, target_uuid, fact) keys already exist, unexpired (the
    fact compared trimmed and lower-cased): one query whatever the groups. Facts whose uuid
    is in ``ignore`` do not count (those the same write invalidates)."""
    if not keys:
        return set()
    # the text is part of the join: only the duplicates come back, not every fact of a pair
    # of entities (a pair can have thousands)
    wanted = sorted({(k[0], k[1], k[2], k[3].strip().lower()) for k in keys})
    columns = [[w[i] for w in wanted] for i in range(4)]
    rows = store.fetchall(
        """SELECT f.group_id, f.source_uuid, f.target_uuid, lower(trim(f.fact)) FROM facts f
           JOIN (SELECT unnest($1::VARCHAR[]) AS g, unnest($2::VARCHAR[]) AS s,
                        unnest($3::VARCHAR[]) AS t, unnest($4::VARCHAR[]) AS x) AS p
             ON f.group_id = p.g AND f.source_uuid = p.s AND f.target_uuid = p.t
                AND lower(trim(f.fact)) = p.x
           WHERE f.expired_at IS NULL AND NOT list_contains($5::VARCHAR[], f.uuid)""",
        [*columns, list(ignore)],
    )
    found = {tuple(r) for r in rows}
    return {k for k in keys if (k[0], k[1], k[2], k[3].strip().lower()) in found}


def insert_facts(store: Store, rows: Sequence[dict[str, Any]]) -> None:
    store.executemany(
        """INSERT INTO facts (uuid, group_id, source_uuid, target_uuid, relation, fact,
               episode_uuid, created_at, valid_at, invalid_at, importance, stability,
               classification_status, lifecycle_state)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            [
                r["uuid"],
                r["group_id"],
                r["source_uuid"],
                r["target_uuid"],
                r["relation"],
                r["fact"],
                r.get("episode_uuid"),
                r["created_at"],
                r.get("valid_at"),
                r.get("invalid_at"),
                r["importance"],
                r["stability"],
                r["classification_status"],
                r["lifecycle_state"],
            ]
            for r in rows
        ],
    )


def invalidate_facts_from(
    store: Store, invalid_from: Sequence[tuple[str, datetime]], expired_at: datetime
) -> None:
    """Bi-temporal invalidation: each (uuid, invalid_at) fact stays, marked no longer true
    from ``invalid_at`` (kept when already set) and no longer believed from ``expired_at``."""
    if invalid_from:
        store.execute(
            """UPDATE facts SET invalid_at = coalesce(facts.invalid_at, v.invalid_at),
                   expired_at = $1
               FROM (SELECT unnest($2::VARCHAR[]) AS uuid,
                            unnest($3::TIMESTAMPTZ[]) AS invalid_at) AS v
               WHERE facts.uuid = v.uuid AND facts.expired_at IS NULL""",
            [expired_at, [u for u, _ in invalid_from], [t for _, t in invalid_from]],
        )


def get_fact(store: Store, uuid: str) -> dict[str, Any] | None:
    rows = store.fetch_dicts(FACT_SELECT + " WHERE f.uuid = ?", [uuid])
    return rows[0] if rows else None


def delete_facts(store: Store, uuids: Sequence[str]) -> None:
    if uuids:
        provenance.delete_of_facts(store, uuids)
        for table in ("fact_embeddings", "facts"):
            store.execute(
                f"DELETE FROM {table} WHERE uuid IN (SELECT unnest(?::VARCHAR[]))",
                [list(uuids)],
            )


# --- embeddings ---------------------------------------------------------------------------
def insert_embeddings(
    store: Store, kind: str, uuids: Sequence[str], vectors: np.ndarray, model: str
) -> None:
    """Upsert vectors for ``kind`` ('entity' or 'fact') through an Arrow table (fast path)."""
    insert_vectors(store, f"{kind}_embeddings", uuids, vectors, model, store.dim)


def vector_frame(uuids: Sequence[str], vectors: np.ndarray, model: str) -> pa.Table:
    """The (uuid, model, vector) rows of an embeddings table as an Arrow table: the vectors
    (one a row) as a fixed-size list of float32."""
    matrix = np.asarray(vectors, dtype=np.float32)
    return pa.table(
        {
            "uuid": pa.array(list(uuids), pa.string()),
            "model": pa.array([model] * len(uuids), pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(matrix.reshape(-1), pa.float32()), matrix.shape[1]
            ),
        }
    )


def insert_vectors(
    store: Store,
    table: str,
    uuids: Sequence[str],
    vectors: np.ndarray,
    model: str,
    dim: int | None = None,
) -> None:
    """Upsert (uuid, model, vector) rows into an embeddings table of ``dim`` (default: the
    vectors' own size) dimensions."""
    if not len(uuids):
        return
    vectors = np.asarray(vectors, dtype=np.float32)
    dim = dim or vectors.shape[1]
    frame = vector_frame(uuids, vectors, model)
    name = f"_incoming_{table}"
    with store.transaction():
        store.register(name, frame)
        try:
            store.execute(
                f"INSERT INTO {table} (uuid, model, vector) "
                f"SELECT uuid, model, vector::FLOAT[{dim}] FROM {name} "
                "ON CONFLICT (uuid) DO UPDATE SET model = excluded.model, "
                f"vector = excluded.vector, seq = nextval('{VECTOR_SEQ}')"
            )
        finally:
            store.unregister(name)


# --- counts -------------------------------------------------------------------------------
def graph_counts(store: Store, group_ids: Sequence[str] | None = None) -> dict[str, int]:
    where, params = _group_filter(group_ids)
    return {
        "episodes": store.one(f"SELECT count(*) FROM episodes {where}", params)[0],
        "entities": store.one(f"SELECT count(*) FROM entities {where}", params)[0],
        "facts": store.one(f"SELECT count(*) FROM facts {where}", params)[0],
        "passages": store.one(f"SELECT count(*) FROM passages {where}", params)[0],
        "groups": store.one(
            "SELECT count(DISTINCT group_id) FROM ("
            "SELECT group_id FROM episodes UNION ALL SELECT group_id FROM entities) AS g"
        )[0],
    }


def _group_filter(group_ids: Sequence[str] | None) -> tuple[str, list[Any]]:
    if not group_ids:
        return "", []
    return "WHERE list_contains(?, group_id)", [list(group_ids)]
