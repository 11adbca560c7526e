"""Set-based SQL of a decay maintenance run over both memory tables (entities and facts).

One run, in ONE transaction (a failure changes nothing):

1. ``_mplan``: one row per memory with its old and new state, old and new decay score and
   whether it is purged — the rules of :mod:`workbench.decay.rules` written as SQL expressions
   (``tests/decay`` checks that SQL and Python agree on a grid of cases).
2. ``_msteps``: every lifecycle step each memory passes through (a memory may go
   ACTIVE→DORMANT→ARCHIVED→EXPIRED in one run); counted by (from, to) and written to
   ``decay_history`` (one row per step, with the memory's old and new decay score).
3. The new scores and states are written to ``entities`` and ``facts``.
4. Purge: soft-deleted memories past the recovery period are deleted with their embedding.
   Purging an *entity* also purges every fact that touches it (as source or target, whatever
   the fact's state: a fact cannot outlive its endpoint) with the fact's embedding, and the
   entity's ``mentions`` rows. Each purged memory gets a ``decay_history`` row with
   ``to_state = 'PURGED'``.
5. Counts by state and averages (soft-deleted excluded) for the gauges, and the
   ``maintenance_runs`` row.

A dry run executes exactly the same statements and then rolls the transaction back, so its
report is what a real run would do, and nothing is written (no ``maintenance_runs`` row
either). Timestamps are read back as epoch microseconds (no pytz needed).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

from workbench.decay.rules import CHAIN, PERMANENT, PURGED, SOFT_DELETED, STATES, DecayPolicy
from workbench.errors import Conflict
from workbench.store import Store, changes

US_PER_DAY = 86_400_000_000.0
MAINTENANCE_LOCK = 0x776F726B62656E02  # the advisory lock of a run on a shared store
MEMORY_TABLES = (("entity", "entities", "entity_embeddings"), ("fact", "facts", "fact_embeddings"))


class _Rollback(Exception):
    """Raised inside the transaction of a dry run to roll it back, carrying the result."""

    def __init__(self, result: dict[str, Any]):
        super().__init__("dry run")
        self.result = result


def _days(expr: str) -> str:
    """Days (fractional) from ``expr`` to the run time ``$now``, as in Python's timedelta."""
    return f"((epoch_us($now) - epoch_us({expr})) / {US_PER_DAY})"


# An entity is as fresh as its most recently accessed live fact: finding "Maria works at
# Acme" uses both ends, so neither Maria nor Acme may decay (and purge the fact) meanwhile.
_ENTITIES_WITH_FACT_ACCESS = """(
    SELECT e.*, fa.fact_access FROM entities e LEFT JOIN (
        SELECT uuid, max(accessed) AS fact_access FROM (
            SELECT source_uuid AS uuid, last_accessed_at AS accessed FROM facts
            WHERE last_accessed_at IS NOT NULL
              AND lifecycle_state NOT IN ('EXPIRED', 'SOFT_DELETED')
            UNION ALL
            SELECT target_uuid, last_accessed_at FROM facts
            WHERE last_accessed_at IS NOT NULL
              AND lifecycle_state NOT IN ('EXPIRED', 'SOFT_DELETED')) AS touched
        GROUP BY uuid) fa ON fa.uuid = e.uuid)"""


def _base_select(kind: str, table: str) -> str:
    last = "coalesce(last_accessed_at, created_at)"
    if kind == "entity":
        table = _ENTITIES_WITH_FACT_ACCESS
        last = f"greatest({last}, coalesce(fact_access, created_at))"
    return f"""
        SELECT '{kind}' AS kind, uuid, lifecycle_state AS old_state, decay_score AS old_decay,
               CAST(greatest(1, least(5, importance)) AS DOUBLE) AS imp,
               CAST(greatest(1, least(5, stability)) AS DOUBLE) AS stab,
               greatest(0.0, {_days(last)}) AS days,
               {_days("coalesce(soft_deleted_at, $now)")} AS sd_days
        FROM {table} AS src"""


PLAN_SQL = f"""
CREATE TEMP TABLE _mplan AS
WITH base AS ({_base_select("entity", "entities")} UNION ALL {_base_select("fact", "facts")}),
scored AS (
    SELECT *,
        (imp >= $perm_imp AND stab >= $perm_stab
         AND old_state NOT IN ('{SOFT_DELETED}', '{PERMANENT}')) AS to_perm,
        -- the exponent capped: 0.5^1000 is 1e-301, and PostgreSQL raises on underflow
        1.0 - pow(0.5, least(days / ($half_life * (stab / 3) * (imp / 3)), 1000.0))
            AS raw_decay
    FROM base
)
SELECT kind, uuid, old_state, old_decay,
    CASE WHEN to_perm OR old_state = 'PERMANENT' THEN 0.0 ELSE raw_decay END AS new_decay,
    CASE
        WHEN to_perm THEN 'PERMANENT'
        WHEN old_state = 'EXPIRED' THEN 'SOFT_DELETED'
        WHEN old_state = 'ACTIVE' AND days < $dormant THEN 'ACTIVE'
        WHEN old_state IN ('ACTIVE', 'DORMANT') AND days < $archived THEN 'DORMANT'
        WHEN old_state IN ('ACTIVE', 'DORMANT', 'ARCHIVED')
             AND raw_decay >= $expire_at AND imp <= $expire_max_imp THEN 'EXPIRED'
        WHEN old_state IN ('ACTIVE', 'DORMANT', 'ARCHIVED') THEN 'ARCHIVED'
        ELSE old_state
    END AS new_state,
    (old_state = 'SOFT_DELETED' AND sd_days >= $purge_days) AS purge
FROM scored
"""

_CHAIN_ROWS = ", ".join(f"({k}, '{CHAIN[k]}', '{CHAIN[k + 1]}')" for k in range(len(CHAIN) - 1))


def _chain_rank(column: str) -> str:
    """The position of ``column``'s state in the lifecycle chain (0 first; portable SQL)."""
    return (
        f"CASE {column} " + " ".join(f"WHEN '{s}' THEN {k}" for k, s in enumerate(CHAIN)) + " END"
    )


STEPS_SQL = f"""
CREATE TEMP TABLE _msteps AS
WITH chain(k, from_state, to_state) AS (VALUES {_CHAIN_ROWS}),
moved AS (
    SELECT *, {_chain_rank("old_state")} AS r0, {_chain_rank("new_state")} AS r1
    FROM _mplan WHERE new_state <> old_state
)
SELECT m.kind, m.uuid, c.k AS step, c.from_state, c.to_state, m.old_decay, m.new_decay
FROM moved m JOIN chain c ON c.k >= m.r0 AND c.k < m.r1
WHERE m.new_state <> 'PERMANENT'
UNION ALL
SELECT kind, uuid, 0 AS step, old_state, new_state, old_decay, new_decay
FROM moved WHERE new_state = 'PERMANENT'
"""

UPDATE_SQL = """
UPDATE {table} AS t SET
    decay_score = p.new_decay,
    lifecycle_state = p.new_state,
    soft_deleted_at = CASE
        WHEN p.new_state <> 'SOFT_DELETED' THEN t.soft_deleted_at
        WHEN p.old_state = 'SOFT_DELETED' THEN coalesce(t.soft_deleted_at, $now)
        ELSE $now END
FROM _mplan p
WHERE p.kind = '{kind}' AND p.uuid = t.uuid AND NOT p.purge
"""

PURGE_LIST_SQL = """
CREATE TEMP TABLE _mpurge AS
WITH own AS (SELECT kind, uuid, old_state AS state, new_decay AS decay FROM _mplan WHERE purge),
gone AS (SELECT uuid FROM own WHERE kind = 'entity'),
cascade AS (
    SELECT 'fact' AS kind, f.uuid, f.lifecycle_state AS state, f.decay_score AS decay
    FROM facts f
    WHERE (f.source_uuid IN (SELECT uuid FROM gone) OR f.target_uuid IN (SELECT uuid FROM gone))
      AND f.uuid NOT IN (SELECT uuid FROM own WHERE kind = 'fact')
)
SELECT *, FALSE AS cascaded FROM own UNION ALL SELECT *, TRUE AS cascaded FROM cascade
"""

STATS_SQL = """
SELECT lifecycle_state, count(*), sum(decay_score), sum(importance), sum(stability)
FROM (SELECT lifecycle_state, decay_score, importance, stability FROM entities
      UNION ALL SELECT lifecycle_state, decay_score, importance, stability FROM facts) AS m
GROUP BY lifecycle_state
"""


def policy_params(policy: DecayPolicy, now: datetime) -> dict[str, Any]:
    return {
        "now": now,
        "half_life": float(policy.half_life_days),
        "dormant": float(policy.dormant_days),
        "archived": float(policy.archived_days),
        "expire_at": float(policy.expire_threshold),
        "expire_max_imp": int(policy.expire_max_importance),
        "purge_days": float(policy.purge_days),
        "perm_imp": int(policy.permanent_min_importance),
        "perm_stab": int(policy.permanent_min_stability),
    }


def _used(sql: str, params: dict[str, Any]) -> dict[str, Any]:
    """Only the named parameters the statement uses (DuckDB rejects unused ones)."""
    return {k: v for k, v in params.items() if f"${k}" in sql}


def _run(store: Store, sql: str, params: dict[str, Any]) -> None:
    store.execute(sql, _used(sql, params))


def _drop_temp(store: Store) -> None:
    for name in ("_mplan", "_msteps", "_mpurge"):
        store.execute(f"DROP TABLE IF EXISTS {name}")


def build_plan(store: Store, policy: DecayPolicy, now: datetime) -> None:
    """Create the ``_mplan`` and ``_msteps`` temp tables for a run at ``now``."""
    params = policy_params(policy, now)
    _drop_temp(store)
    _run(store, PLAN_SQL, params)
    store.execute(STEPS_SQL)


def plan_rows(store: Store, policy: DecayPolicy, now: datetime) -> list[dict[str, Any]]:
    """The plan of a run at ``now`` without changing anything (for tests and notebooks)."""
    with store.transaction():
        build_plan(store, policy, now)
        rows = store.fetch_dicts("SELECT * FROM _mplan ORDER BY kind, uuid")
        steps = store.fetch_dicts(
            "SELECT kind, uuid, from_state, to_state FROM _msteps ORDER BY kind, uuid, step"
        )
        _drop_temp(store)
    by_key: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for s in steps:
        by_key.setdefault((s["kind"], s["uuid"]), []).append((s["from_state"], s["to_state"]))
    for row in rows:
        row["steps"] = tuple(by_key.get((row["kind"], row["uuid"]), ()))
    return rows


def _transitions(store: Store) -> dict[tuple[str, str], int]:
    rows = store.fetchall(
        "SELECT from_state, to_state, count(*) FROM _msteps GROUP BY 1, 2 ORDER BY 1, 2"
    )
    return {(a, b): int(n) for a, b, n in rows}


def _write_history(store: Store, run_id: int) -> None:
    store.execute(
        """INSERT INTO decay_history (run_id, memory_kind, memory_uuid, from_state, to_state,
                                      old_decay, new_decay)
           SELECT ?, kind, uuid, from_state, to_state, old_decay, new_decay
           FROM _msteps ORDER BY kind, uuid, step""",
        [run_id],
    )


def _apply_updates(store: Store, now: datetime) -> int:
    for kind, table, _ in MEMORY_TABLES:
        store.execute(UPDATE_SQL.format(table=table, kind=kind), {"now": now})
    row = store.one("SELECT count(*) FROM _mplan WHERE NOT purge")
    return int(row[0])


def _purge(store: Store, run_id: int | None) -> dict[str, int]:
    """Delete soft-deleted memories past recovery (and an entity's facts and mentions)."""
    store.execute(PURGE_LIST_SQL)
    if run_id is not None:
        store.execute(
            f"""INSERT INTO decay_history (run_id, memory_kind, memory_uuid, from_state,
                                          to_state, old_decay, new_decay)
                SELECT ?, kind, uuid, state, '{PURGED}', decay, NULL FROM _mpurge
                ORDER BY kind, uuid""",
            [run_id],
        )
    for kind, table, embeddings in MEMORY_TABLES:
        chosen = f"SELECT uuid FROM _mpurge WHERE kind = '{kind}'"
        store.execute(f"DELETE FROM {embeddings} WHERE uuid IN ({chosen})")
        store.execute(f"DELETE FROM {table} WHERE uuid IN ({chosen})")
    store.execute(
        "DELETE FROM mentions WHERE entity_uuid IN (SELECT uuid FROM _mpurge WHERE kind = 'entity')"
    )
    for table in ("fact_sources", "fact_imports"):  # a purged fact's provenance
        store.execute(
            f"DELETE FROM {table} WHERE fact_uuid IN (SELECT uuid FROM _mpurge WHERE kind = 'fact')"
        )
    rows = store.fetchall("SELECT kind, cascaded, count(*) FROM _mpurge GROUP BY 1, 2")
    counts = {"entities": 0, "facts": 0, "cascaded_facts": 0}
    for kind, cascaded, n in rows:
        key = "cascaded_facts" if cascaded else ("entities" if kind == "entity" else "facts")
        counts[key] += int(n)
    return counts


def memory_stats(store: Store) -> dict[str, Any]:
    """Counts by state (every state, zeros included) and averages without soft-deleted."""
    by_state = {state: 0 for state in STATES}
    n = decay = imp = stab = 0.0
    for state, count, s_decay, s_imp, s_stab in store.fetchall(STATS_SQL):
        by_state[state] = by_state.get(state, 0) + int(count)
        if state != SOFT_DELETED:
            n += count
            decay += s_decay or 0.0
            imp += s_imp or 0.0
            stab += s_stab or 0.0
    return {
        "by_state": by_state,
        "total": int(n),
        "decay_avg": decay / n if n else 0.0,
        "importance_avg": imp / n if n else 0.0,
        "stability_avg": stab / n if n else 0.0,
    }


def _insert_run(store: Store, run_id: int, now: datetime, result: dict[str, Any]) -> None:
    store.execute(
        """INSERT INTO maintenance_runs (id, started_at, finished_at, status, dry_run,
               duration_seconds, scores_updated, transitions, purged)
           VALUES (?, ?, ?, 'success', FALSE, ?, ?, ?, ?)""",
        [
            run_id,
            now,
            now + timedelta(seconds=result["duration"]),
            result["duration"],
            result["scores_updated"],
            sum(result["transitions"].values()),
            result["purged"],
        ],
    )


def _execute_run(
    store: Store, policy: DecayPolicy, now: datetime, dry_run: bool, started: float
) -> dict[str, Any]:
    run_id = None if dry_run else int(store.one("SELECT nextval('maintenance_runs_seq')")[0])
    build_plan(store, policy, now)
    transitions = _transitions(store)
    if run_id is not None:
        _write_history(store, run_id)
    scores_updated = _apply_updates(store, now)
    purged = _purge(store, run_id)
    result = {
        "run_id": run_id,
        "scores_updated": scores_updated - purged["cascaded_facts"],
        "transitions": transitions,
        "purged": sum(purged.values()),
        "purged_detail": purged,
        **memory_stats(store),
    }
    _drop_temp(store)
    result["duration"] = time.perf_counter() - started
    if run_id is not None:
        _insert_run(store, run_id, now, result)
    return result


def apply_maintenance(
    store: Store, policy: DecayPolicy, now: datetime, dry_run: bool = False
) -> dict[str, Any]:
    """One maintenance run at ``now`` in one transaction; a dry run is rolled back.

    Returns ``run_id`` (None for a dry run), ``scores_updated``, ``transitions``
    ({(from, to): n}), ``purged`` (+ ``purged_detail``), ``by_state``, ``total``,
    ``decay_avg``, ``importance_avg``, ``stability_avg`` and ``duration`` (seconds).
    """
    started = time.perf_counter()
    try:
        with store.transaction():
            # a store shared by several processes: one run at a time across all of them, and
            # its rewrite of every score logs no changes (replicas re-read after the run)
            if not store.advisory_lock(MAINTENANCE_LOCK):
                raise Conflict(
                    "a decay maintenance run is already in progress in another process; "
                    "wait for it to finish and try again"
                )
            changes.quiet(store)
            result = _execute_run(store, policy, now, dry_run, started)
            if dry_run:
                raise _Rollback(result)
    except _Rollback as rollback:
        result = rollback.result
    return result


def record_failed_run(
    store: Store, now: datetime, duration: float, error: str, dry_run: bool = False
) -> int:
    """A ``maintenance_runs`` row for a run that failed (and changed nothing else)."""
    run_id = int(store.one("SELECT nextval('maintenance_runs_seq')")[0])
    store.execute(
        """INSERT INTO maintenance_runs (id, started_at, finished_at, status, dry_run,
               duration_seconds, error) VALUES (?, ?, ?, 'failure', ?, ?, ?)""",
        [run_id, now, now, dry_run, duration, error[:2000]],
    )
    return run_id


def _from_us(value: int | None) -> datetime | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value / 1_000_000, tz=UTC)


RUN_COLUMNS = """id, epoch_us(started_at) AS started_us, epoch_us(finished_at) AS finished_us,
    status, dry_run, duration_seconds, scores_updated, transitions, purged, error"""


def _run_row(row: dict[str, Any]) -> dict[str, Any]:
    row["started_at"] = _from_us(row.pop("started_us"))
    row["finished_at"] = _from_us(row.pop("finished_us"))
    return row


def last_run(store: Store, status: str | None = None) -> dict[str, Any] | None:
    """The latest real (not dry) maintenance run, optionally only with ``status``."""
    where = "WHERE NOT dry_run" + (" AND status = ?" if status else "")
    rows = store.fetch_dicts(
        f"SELECT {RUN_COLUMNS} FROM maintenance_runs {where} ORDER BY started_at DESC, id DESC "
        "LIMIT 1",
        [status] if status else None,
    )
    return _run_row(rows[0]) if rows else None


def find_memory(store: Store, uuid: str) -> tuple[str, str] | None:
    """(kind, lifecycle_state) of the entity or fact ``uuid``, or None."""
    for kind, table, _ in MEMORY_TABLES:
        row = store.fetchone(f"SELECT lifecycle_state FROM {table} WHERE uuid = ?", [uuid])
        if row:
            return kind, row[0]
    return None


def recover_memory(store: Store, kind: str, uuid: str, now: datetime) -> None:
    """SOFT_DELETED → ARCHIVED; clears ``soft_deleted_at`` and restarts the decay clock
    (``last_accessed_at = now``, score 0) so the next run does not expire it again."""
    table = dict((k, t) for k, t, _ in MEMORY_TABLES)[kind]
    store.execute(
        f"""UPDATE {table} SET lifecycle_state = 'ARCHIVED', soft_deleted_at = NULL,
                last_accessed_at = ?, decay_score = 0.0
            WHERE uuid = ? AND lifecycle_state = 'SOFT_DELETED'""",
        [now, uuid],
    )


def awaiting_purge(store: Store) -> int:
    row = store.one(
        "SELECT (SELECT count(*) FROM entities WHERE lifecycle_state = 'SOFT_DELETED') + "
        "(SELECT count(*) FROM facts WHERE lifecycle_state = 'SOFT_DELETED')"
    )
    return int(row[0])
