"""The change log of a shared store: which memories changed, in commit order, for the search
caches of every process (service replicas, workers) that shares a PostgreSQL database.

On PostgreSQL the database writes the log itself: statement-level triggers on ``entities``,
``facts``, ``passages`` and their embedding tables append one ``changes`` row per memory (or vector)
written or deleted, whoever wrote it (a replica, a worker, the CLI, ``psql``), and
``NOTIFY`` the channel :data:`CHANNEL`. Each row names the kind and uuid and the writer's
``origin`` (its connections' ``application_name``), so a process skips its own writes (it
told its caches already).

A maintenance run rewrites every memory's decay score: it writes no change rows (``quiet``);
replicas notice the new ``maintenance_runs`` row and re-read their rows instead.

A re-extraction's promote replaces a group's memories whole: it writes no change row per
memory (``quiet``) but one of kind :data:`GENERATION` naming the group (``log_generation``);
a follower swaps the group's rows and vectors in at once, so no search there sees a mix of
the old and new generation.

The sequence is assigned before commit, so a row may become visible after rows with higher
numbers (a slower transaction): :func:`changes_since` also re-reads the gaps it saw recently.
A DuckDB file has one writing process and no change log.
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.store import Store

__all__ = [
    "CHANNEL",
    "GENERATION",
    "POSTGRES_DDL",
    "TRIGGERS",
    "latest_seq",
    "changes_since",
    "prune",
    "quiet",
    "log_generation",
]

CHANNEL = "workbench_changes"
GENERATION = "generation"  # a change row naming a group (its uuid column) replaced whole

# table -> the kind its change rows name (a vector's change is told apart from its row's)
_GRAPH_TABLES = (
    ("entities", "entity"),
    ("facts", "fact"),
    ("entity_embeddings", "entity_vector"),
    ("fact_embeddings", "fact_vector"),
)
_TABLES = (*_GRAPH_TABLES, ("passages", "passage"), ("passage_embeddings", "passage_vector"))


def _triggers(tables: tuple[tuple[str, str], ...] = _TABLES) -> list[str]:
    out = []
    for table, kind in tables:
        for event, transition in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
            name = f"wb_changes_{table}_{event.lower()}"
            out.append(f"DROP TRIGGER IF EXISTS {name} ON {table}")
            out.append(
                f"CREATE TRIGGER {name} AFTER {event} ON {table} "
                f"REFERENCING {transition} TABLE AS changed_rows FOR EACH STATEMENT "
                f"EXECUTE FUNCTION wb_log_changes('{kind}')"
            )
    return out


# every change-log trigger: ``tables_replaced`` creates them again after ``workbench reembed``
# swapped the embedding tables
TRIGGERS = _triggers()

# PostgreSQL only, in psycopg's own syntax (not translated); versioned by the meta key
# ``postgres_schema_version`` (see PostgresStore._after_migrations)
POSTGRES_DDL: list[list[str]] = [
    [
        """CREATE TABLE IF NOT EXISTS changes (
            seq BIGSERIAL PRIMARY KEY,
            at TIMESTAMPTZ NOT NULL DEFAULT now(),
            kind VARCHAR NOT NULL,
            uuid VARCHAR NOT NULL,
            origin VARCHAR NOT NULL DEFAULT ''
        )""",
        "CREATE INDEX IF NOT EXISTS changes_at ON changes(at)",
        f"""CREATE OR REPLACE FUNCTION wb_log_changes() RETURNS trigger
           LANGUAGE plpgsql AS $body$
           BEGIN
             IF coalesce(current_setting('workbench.quiet', true), '') = 'on' THEN
               RETURN NULL;
             END IF;
             INSERT INTO changes (kind, uuid, origin)
               SELECT TG_ARGV[0], uuid, current_setting('application_name') FROM changed_rows;
             IF FOUND THEN
               PERFORM pg_notify('{CHANNEL}', '');
             END IF;
             RETURN NULL;
           END
           $body$""",
        *_triggers(_GRAPH_TABLES),
    ],
    # passages (schema version 5): every trigger (:data:`TRIGGERS`)
    TRIGGERS,
    # a fact looked up by its two entities (the duplicate check of every write and import:
    # without it PostgreSQL scans the group's facts, a cost that grows with the store)
    ["CREATE INDEX IF NOT EXISTS facts_ends ON facts(source_uuid, target_uuid)"],
    # a group's timeline (``store.timeline``): episodes and facts read in time order within
    # a window (DuckDB prunes these scans by zone maps; an index there would make every
    # update of a fact a delete and re-insert)
    [
        "CREATE INDEX IF NOT EXISTS episodes_group_time ON episodes(group_id, reference_time)",
        "CREATE INDEX IF NOT EXISTS facts_group_valid ON facts(group_id, valid_at)",
        "CREATE INDEX IF NOT EXISTS facts_group_invalid ON facts(group_id, invalid_at)",
    ],
]


def latest_seq(store: Store) -> int:
    """The newest change's sequence number (0: none)."""
    row = store.fetchone("SELECT coalesce(max(seq), 0) FROM changes")
    return int(row[0]) if row else 0


def position(store: Store, window: int = 10_000) -> tuple[int, dict[int, int]]:
    """Where a process that reads everything now starts following: the newest sequence
    number, and the numbers below it (within ``window``) not visible yet, each with the
    snapshot's ``xmax``: a transaction still running may commit them later."""
    _, xmax, _ = horizon(store)
    top = latest_seq(store)
    missing = store.fetchall(
        """SELECT s FROM generate_series(?::BIGINT, ?::BIGINT) AS s
           WHERE NOT EXISTS (SELECT 1 FROM changes c WHERE c.seq = s)""",
        [max(1, top - window + 1), top],
    )
    return top, {int(r[0]): xmax for r in missing}


def horizon(store: Store) -> tuple[int, int, int]:
    """(xmin, xmax) of a snapshot now: every transaction older than xmin has ended, and
    every one that started before now is older than xmax; and the newest pruned number."""
    row = store.one(
        """SELECT pg_snapshot_xmin(pg_current_snapshot())::text::BIGINT,
                  pg_snapshot_xmax(pg_current_snapshot())::text::BIGINT,
                  coalesce((SELECT value FROM meta WHERE key = 'changes_pruned_through'), '0')"""
    )
    return int(row[0]), int(row[1]), int(row[2])


def changes_since(
    store: Store, after: int, gaps: Sequence[int] = (), limit: int = 50_000
) -> list[tuple[int, str, str, str]]:
    """(seq, kind, uuid, origin) of the changes after ``after`` and of the numbers in ``gaps``
    (missing when last read: still uncommitted then, or rolled back), in sequence order."""
    return [
        (int(seq), kind, uuid, origin)
        for seq, kind, uuid, origin in store.fetchall(
            """SELECT seq, kind, uuid, origin FROM changes
               WHERE seq > ? OR seq = ANY(?::BIGINT[]) ORDER BY seq LIMIT ?""",
            [after, list(gaps), limit],
        )
    ]


def prune(store: Store, older_than_seconds: float) -> int:
    """Delete change rows older than that; the newest number deleted is kept in ``meta``
    (``changes_pruned_through``): a process further behind re-reads everything."""
    with store.transaction():
        rows = store.fetchall(
            "DELETE FROM changes WHERE at < now() - make_interval(secs => ?) RETURNING seq",
            [float(older_than_seconds)],
        )
        if rows:
            store.execute(
                """INSERT INTO meta VALUES ('changes_pruned_through', ?)
                   ON CONFLICT (key) DO UPDATE SET value = greatest(
                       meta.value::BIGINT, excluded.value::BIGINT)::VARCHAR""",
                [str(max(r[0] for r in rows))],
            )
    return len(rows)


def quiet(store: Store) -> None:
    """Inside a transaction: its writes from now on log no changes (a maintenance run, see
    above); until it ends."""
    if store.shared:  # the change log: a shared store's
        store.execute("SELECT set_config('workbench.quiet', 'on', true)")


def log_generation(store: Store, group_id: str) -> None:
    """Inside a promote's transaction (made ``quiet``): the one change row that tells the
    other processes the group's memories were replaced whole (see above)."""
    if store.shared:
        store.execute(
            "INSERT INTO changes (kind, uuid, origin) "
            "VALUES (?, ?, current_setting('application_name'))",
            [GENERATION, group_id],
        )
        store.execute("SELECT pg_notify(?, '')", [CHANNEL])
