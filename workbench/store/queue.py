"""SQL of the durable episode queue (table ``queue``).

States: queued → processing → done | failed. A message is claimed with a lease; a lease that
runs out (a crashed worker) returns the message to ``queued``. Within one ``group_id`` only the
oldest unfinished message may run, so a group's episodes are processed in order; groups run in
parallel. Across groups the order is priority (0 high, 1 normal, 2 low), then age.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NotRequired, TypedDict, cast

from workbench.safety import scrub
from workbench.store import Store
from workbench.store.schema import PRIORITY_NAMES


class QueueMessage(TypedDict):
    """A claimed message (what :func:`claim_heads` returns)."""

    episode_uuid: str
    group_id: str
    priority: int
    seq: int  # tells this delivery from a message added again under the same uuid
    enqueued_at: datetime
    attempts: int  # counting this delivery
    validation_failures: int
    lease_owner: NotRequired[str]  # who claimed this delivery
    # the episode row, when the claim's batch was prefetched (None: deleted meanwhile)
    episode: NotRequired[Mapping[str, Any] | None]


GROUP_LOCKS = 0x776B  # the advisory lock namespace of enqueues, one lock per group


def enqueue(store: Store, episode_uuid: str, group_id: str, priority: int, now: datetime) -> None:
    """Queue a message (inside the caller's transaction: on a shared store, enqueues of one
    group then commit in the order of their sequence numbers, which is the group's order)."""
    if store.shared:
        store.fetchone("SELECT pg_advisory_xact_lock(?, hashtext(?))", [GROUP_LOCKS, group_id])
    store.execute(
        """INSERT INTO queue (episode_uuid, group_id, priority, state, enqueued_at, available_at)
           VALUES (?, ?, ?, 'queued', ?, ?)""",
        [episode_uuid, group_id, priority, now, now],
    )


def requeue_expired_leases(store: Store, now: datetime, keep: Sequence[str] = ()) -> int:
    """Return messages whose lease ran out to the queue, except those in ``keep`` (the
    caller's live work: it renews their leases, however far the clock jumped)."""
    rows = store.fetchall(
        """UPDATE queue SET state = 'queued', lease_owner = NULL, leased_until = NULL
           WHERE state = 'processing' AND leased_until < ?
             AND NOT list_contains(?::VARCHAR[], episode_uuid) RETURNING episode_uuid""",
        [now, list(keep)],
    )
    return len(rows)


def release_all(store: Store, owner: str | None = None) -> int:
    """Return every in-flight message to the queue (start-up after a crash, graceful stop);
    with ``owner``, only those it holds (a store shared with other processes)."""
    if owner is not None:
        return _release(store, "AND lease_owner = ?", [owner])
    return _release(store, "", [])


def recover_crashed(
    store: Store,
    now: datetime,
    max_crashes: int,
    expired_only: bool = False,
    keep: Sequence[str] = (),
) -> tuple[int, list[str]]:
    """The messages in flight when their process died. Each counts a crash; one that reaches
    ``max_crashes`` is failed with the reason ``crashed`` (it would kill every process that
    takes it), the others return to the queue with their attempt uncounted. Returns
    (returned, uuids failed).

    On a file only one process uses, every message in flight at start-up is such a message.
    On a store shared by several processes (``expired_only``), only those whose lease ran
    out are: their process stopped renewing it (``keep``: this process's own, whatever the
    clock says)."""
    condition = "state = 'processing'"
    params: list[Any] = []
    if expired_only:
        condition += " AND leased_until < ? AND NOT list_contains(?::VARCHAR[], episode_uuid)"
        params = [now, list(keep)]
    with store.transaction():
        counted = store.fetchall(
            f"""UPDATE queue SET crashes = coalesce(crashes, 0) + 1
               WHERE {condition} RETURNING episode_uuid, crashes""",
            params,
        )
        doomed = [uuid for uuid, crashes in counted if crashes >= max_crashes]
        if doomed:
            message = (
                f"crashed: the service process died {max_crashes} times while "
                "processing this episode; it is not retried automatically"
            )
            store.execute(
                """UPDATE queue SET state = 'failed', finished_at = ?, leased_until = NULL,
                       lease_owner = NULL, error_type = 'crashed', error_message = ?
                   WHERE list_contains(?, episode_uuid)""",
                [now, message, doomed],
            )
            set_episode_status(store, doomed, "failed", message)
        counted_ids = [uuid for uuid, crashes in counted if crashes < max_crashes]
        returned = _release(store, "AND list_contains(?::VARCHAR[], episode_uuid)", [counted_ids])
    return returned, doomed


def release(store: Store, episode_uuid: str, owner: str) -> None:
    """Return a message this owner holds to the queue, unprocessed (its attempt uncounted)."""
    _release(store, "AND episode_uuid = ? AND lease_owner = ?", [episode_uuid, owner])


def _release(store: Store, condition: str, params: list[Any]) -> int:
    """Return the in-flight messages matching ``condition`` to the queue, their attempts
    uncounted, and their episodes say so (a claim set them to processing); how many."""
    with store.transaction():
        uuids = [
            r[0]
            for r in store.fetchall(
                f"""UPDATE queue SET state = 'queued', lease_owner = NULL, leased_until = NULL,
                    attempts = greatest(attempts - 1, 0)
                WHERE state = 'processing' {condition} RETURNING episode_uuid""",
                params,
            )
        ]
        if uuids:
            store.execute(
                """UPDATE episodes SET status = 'queued', status_detail = 'returned to the queue'
                   WHERE list_contains(?, uuid) AND status = 'processing'""",
                [uuids],
            )
    return len(uuids)


def claim_heads(
    store: Store,
    owner: str,
    now: datetime,
    lease_seconds: float,
    limit: int,
    run_size: int = 1,
    singles: Sequence[str] = (),
) -> tuple[list[QueueMessage], bool]:
    """Lease up to ``limit`` runnable messages, the heads of different groups in priority then
    age order, in one transaction whatever ``limit`` is; and whether more runnable heads were
    left unclaimed (False: a claim before something changes would find nothing).

    With ``run_size`` > 1, room the heads leave (fewer runnable groups than ``limit``) goes
    to the messages right behind each claimed head, in the group's order, up to ``run_size``
    messages per group: a *run* of consecutive messages, all queued and due (it stops at the
    first that is not); never for the groups in ``singles``, nor from a message that was in
    flight when a process died (see :func:`recover_crashed`). Messages come back grouped: each
    group's run in order."""
    limit = max(1, int(limit))
    with store.transaction():
        heads = store.fetchall(_HEADS_SQL[store.backend], [now, limit + 1])
        if not heads:
            return [], False
        chosen = [(head, group, first) for head, group, first, _ in heads[:limit]]
        if store.shared:
            # other processes claim too: keep the heads this one could lock (still queued)
            locked = set(_lock_queued(store, [head for head, _, _ in chosen], now))
            chosen = [c for c in chosen if c[0] in locked]
            if not chosen:
                return [], True
        uuids = [head for head, _, _ in chosen]
        runs = {group: [head] for head, group, _ in chosen}
        room = limit - len(chosen)
        # a message that was in flight when a process died goes alone (in a run, every
        # message of the run was in flight: alone, only the one that kills it crashes again)
        alone = set(singles) | {group for _, group, _, crashed in heads[:limit] if crashed}
        runnable = [head for head in chosen if head[1] not in alone]
        if run_size > 1 and room > 0 and runnable:
            followers = _followers(store, runnable, now, min(run_size, room + 1))
            if store.shared:
                # a run is consecutive: it ends at a follower another process holds
                locked = set(_lock_queued(store, [uuid for _, uuid in followers], now))
                cut: set[str] = set()
                kept = []
                for group, uuid in followers:
                    if group in cut or uuid not in locked:
                        cut.add(group)
                    else:
                        kept.append((group, uuid))
                followers = kept
            for group, follower in followers:
                if room > 0 and len(runs[group]) < run_size:
                    runs[group].append(follower)
                    uuids.append(follower)
                    room -= 1
        # inside the transaction (the store lock): they are still runnable, still queued;
        # the WHERE names only keys, so DuckDB finds them through the index, not a scan
        leased = store.fetch_dicts(
            """UPDATE queue SET state = 'processing', lease_owner = $1, leased_until = $2,
                   attempts = attempts + 1, started_at = $3
               WHERE episode_uuid = ANY($4)
               RETURNING episode_uuid, group_id, priority, seq, enqueued_at, attempts,
                         validation_failures, lease_owner""",
            [owner, now + timedelta(seconds=lease_seconds), now, uuids],
        )
        set_episode_status(store, [m["episode_uuid"] for m in leased], "processing", None)
        order = {group: rank for rank, (_, group, _) in enumerate(chosen)}
        leased.sort(key=lambda m: (order[m["group_id"]], m["seq"]))
        # the RETURNING columns are those QueueMessage declares
        return cast(list[QueueMessage], leased), len(heads) > limit


_HEADS_SQL = {
    "duckdb": """SELECT head, group_id, first, crashed FROM (
           -- each group's head (its oldest unfinished message), when queued and due;
           -- arg_min over a GROUP BY: 2-3x cheaper than a window, flat in depth
           SELECT arg_min(episode_uuid, seq) AS head, arg_min(state, seq) AS st,
                  arg_min(available_at, seq) AS due, arg_min(priority, seq) AS pr,
                  arg_min(coalesce(crashes, 0), seq) > 0 AS crashed,
                  bool_or(state = 'processing') AS busy,
                  min(seq) AS first, group_id
           FROM queue WHERE state IN ('queued', 'processing') GROUP BY group_id) AS h
       -- one delivery of a group at a time (a failed message queued again sits before the
       -- newer one in flight)
       WHERE st = 'queued' AND due <= $1 AND NOT busy
       ORDER BY pr, first LIMIT $2""",
    "postgres": """SELECT head, group_id, first, crashed FROM (
           SELECT DISTINCT ON (group_id) episode_uuid AS head, state AS st,
                  available_at AS due, priority AS pr, coalesce(crashes, 0) > 0 AS crashed,
                  seq AS first, group_id
           FROM queue WHERE state IN ('queued', 'processing')
           ORDER BY group_id, seq) AS h
       WHERE st = 'queued' AND due <= $1
         -- one delivery of a group at a time, whatever order the sequence numbers committed
         AND NOT EXISTS (SELECT 1 FROM queue p
                         WHERE p.group_id = h.group_id AND p.state = 'processing')
       ORDER BY pr, first LIMIT $2""",
}


def _lock_queued(store: Store, uuids: list[str], now: datetime) -> list[str]:
    """PostgreSQL: lock those of these messages that are still queued and that no other
    transaction holds (``FOR UPDATE SKIP LOCKED``); the ones locked. The lock lasts until
    the claim commits, so two processes never claim one message."""
    if not uuids:
        return []
    return [
        r[0]
        for r in store.fetchall(
            """SELECT episode_uuid FROM queue
               WHERE episode_uuid = ANY(?) AND state = 'queued' AND available_at <= ?
               FOR UPDATE SKIP LOCKED""",
            [uuids, now],
        )
    ]


def _followers(
    store: Store, heads: list[tuple[str, str, int]], now: datetime, per_group: int
) -> list[tuple[str, str]]:
    """(group, episode uuid) of the runnable messages right behind each head, in order: up
    to ``per_group - 1`` per group, stopping at the first message that is not queued and due,
    or that was in flight when a process died (it goes alone)."""
    rows = store.fetchall(
        """SELECT group_id, episode_uuid, state, available_at, crashes FROM (
               SELECT group_id, episode_uuid, state, available_at, seq,
                      coalesce(crashes, 0) AS crashes,
                      row_number() OVER (PARTITION BY group_id ORDER BY seq) AS rank
               FROM queue
               WHERE state IN ('queued', 'processing') AND list_contains($1, group_id)) AS r
           WHERE rank <= $2
           ORDER BY group_id, seq""",
        [[group for _, group, _ in heads], per_group],
    )
    head_of = {group: head for head, group, _ in heads}
    out, stopped = [], set()
    for group, uuid, state, due, crashes in rows:
        if uuid == head_of[group] or group in stopped:
            continue
        if state != "queued" or due > now or crashes:
            stopped.add(group)
            continue
        out.append((group, uuid))
    # heads in their claim order, each group's followers in sequence
    rank = {group: i for i, (_, group, _) in enumerate(heads)}
    return sorted(out, key=lambda item: rank[item[0]])


def set_episode_status(
    store: Store, episode_uuids: Sequence[str], status: str, detail: str | None
) -> None:
    """The episodes' status follows their messages', unless they are done: a redelivered or
    failed second delivery does not undo the first one's write. (The guard sits in the SET,
    not the WHERE: DuckDB looks keys up in the index only when the WHERE holds nothing else,
    and a scan grows with the history.)"""
    if episode_uuids:
        store.execute(
            """UPDATE episodes
               SET status = CASE WHEN status = 'done' THEN status ELSE $1 END,
                   status_detail = CASE WHEN status = 'done' THEN status_detail ELSE $2 END
               WHERE uuid = ANY($3)""",
            [status, scrub(detail), list(episode_uuids)],
        )


def renew_leases(
    store: Store, episode_uuids: Sequence[str], owner: str, leased_until: datetime
) -> int:
    """Extend the leases this owner still holds on these messages; returns how many."""
    rows = store.fetchall(
        """UPDATE queue SET leased_until = ?
           WHERE list_contains(?, episode_uuid) AND state = 'processing' AND lease_owner = ?
           RETURNING episode_uuid""",
        [leased_until, list(episode_uuids), owner],
    )
    return len(rows)


def mark_done_many(
    store: Store, episode_uuids: Sequence[str], now: datetime, seqs: Sequence[int] | None = None
) -> None:
    """Mark these messages done; with ``seqs``, only the rows with those sequence numbers
    (the ones that were claimed: an episode deleted meanwhile and added again under the same
    uuid has a new row, which is left to be processed)."""
    if not episode_uuids:
        return
    # the seq test sits in the SET: the WHERE names only the key (an index lookup)
    claimed = "($3::BIGINT[] IS NULL OR list_contains($3::BIGINT[], seq))"
    store.execute(
        f"""UPDATE queue SET
               state = CASE WHEN {claimed} THEN 'done' ELSE state END,
               finished_at = CASE WHEN {claimed} THEN $2 ELSE finished_at END,
               leased_until = CASE WHEN {claimed} THEN NULL ELSE leased_until END,
               error_type = CASE WHEN {claimed} THEN NULL ELSE error_type END,
               error_message = CASE WHEN {claimed} THEN NULL ELSE error_message END
           WHERE episode_uuid = ANY($1)""",
        [list(episode_uuids), now, None if seqs is None else list(seqs)],
    )


def schedule_retry(
    store: Store,
    episode_uuid: str,
    available_at: datetime,
    error_type: str,
    message: str,
    validation_failure: bool,
    seq: int | None = None,
    refund: bool = False,
    owner: str | None = None,
) -> bool:
    """Queue a failed message again, due at ``available_at``; whether it was (see
    :func:`_still_claimed`: a message done, deleted or added again meanwhile is left alone).
    ``refund``: the failed attempt does not count (the backend was known to be down)."""
    with store.transaction():
        if not _still_claimed(store, episode_uuid, seq, owner):
            return False
        store.execute(
            """UPDATE queue SET state = 'queued', available_at = ?, lease_owner = NULL,
                   leased_until = NULL, error_type = ?, error_message = ?,
                   validation_failures = validation_failures + ?,
                   attempts = greatest(attempts - ?, 0)
               WHERE episode_uuid = ?""",
            [
                available_at,
                error_type,
                scrub(message),
                1 if validation_failure else 0,
                1 if refund else 0,
                episode_uuid,
            ],
        )
    return True


def mark_failed(
    store: Store,
    episode_uuid: str,
    now: datetime,
    error_type: str,
    message: str,
    seq: int | None = None,
    owner: str | None = None,
) -> bool:
    """Mark a message failed for good; whether it was (see :func:`_still_claimed`)."""
    with store.transaction():
        if not _still_claimed(store, episode_uuid, seq, owner):
            return False
        store.execute(
            """UPDATE queue SET state = 'failed', finished_at = ?, leased_until = NULL,
                   lease_owner = NULL, error_type = ?, error_message = ?
               WHERE episode_uuid = ?""",
            [now, error_type, scrub(message), episode_uuid],
        )
    return True


def _still_claimed(
    store: Store, episode_uuid: str, seq: int | None, owner: str | None = None
) -> bool:
    """Whether the message is still the one claimed (its sequence number ``seq``; any, when
    None) and still processing. A failure that arrives after the message was written by
    another delivery, deleted, or deleted and added again under the same uuid (a new row,
    not yet tried) must not touch it, nor one whose lease another owner holds now (with
    ``owner``). (A key lookup, then an update by key: DuckDB scans when
    the WHERE holds more than the key.)"""
    row = store.fetchone(
        "SELECT seq, state, lease_owner FROM queue WHERE episode_uuid = ?", [episode_uuid]
    )
    return (
        row is not None
        and row[1] == "processing"
        and (seq is None or row[0] == seq)
        # a lease another process took over (this one stalled past it) is not ours any more
        and (owner is None or row[2] == owner)
    )


def requeue_failed(
    store: Store, now: datetime, episode_uuids: Sequence[str] | None, group_id: str | None
) -> list[str]:
    """Put failed messages back (all, by uuid, or by group); returns their uuids."""
    sql = """UPDATE queue SET state = 'queued', available_at = ?, attempts = 0,
                 validation_failures = 0, crashes = 0, finished_at = NULL
             WHERE state = 'failed'"""
    params: list[Any] = [now]
    if episode_uuids:
        sql += " AND list_contains(?, episode_uuid)"
        params.append(list(episode_uuids))
    if group_id:
        sql += " AND group_id = ?"
        params.append(group_id)
    return [r[0] for r in store.fetchall(sql + " RETURNING episode_uuid", params)]


def depth_by_priority(store: Store) -> dict[str, int]:
    counts = {name: 0 for name in PRIORITY_NAMES.values()}
    for priority, count in store.fetchall(
        "SELECT priority, count(*) FROM queue WHERE state = 'queued' GROUP BY priority"
    ):
        counts[PRIORITY_NAMES.get(priority, str(priority))] = count
    return counts


FAILED_LISTED = 20  # the newest failures a status lists


def status(store: Store, now: datetime, group_ids: Sequence[str] | None = None) -> dict[str, Any]:
    """Counts by state, depth by priority, the oldest wait, and the newest failures (of
    ``group_ids`` when given: filtered in the query, before the limit)."""
    counts = {"queued": 0, "processing": 0, "done": 0, "failed": 0}
    for state, count in store.fetchall("SELECT state, count(*) FROM queue GROUP BY state"):
        counts[state] = count
    oldest = store.one(
        "SELECT min(enqueued_at) FROM queue WHERE state IN ('queued', 'processing')"
    )[0]
    of_groups = "AND list_contains(?, q.group_id)" if group_ids else ""
    failed = store.fetch_dicts(
        f"""SELECT q.episode_uuid, q.group_id, e.name, q.attempts, q.error_type,
                  q.error_message, q.finished_at
           FROM queue q LEFT JOIN episodes e ON e.uuid = q.episode_uuid
           WHERE q.state = 'failed' {of_groups}
           ORDER BY q.finished_at DESC NULLS LAST, q.episode_uuid LIMIT {FAILED_LISTED}""",
        [list(group_ids)] if group_ids else [],
    )
    return {
        "counts": counts,
        "depth_by_priority": depth_by_priority(store),
        "oldest_waiting_seconds": (now - oldest).total_seconds() if oldest else 0.0,
        "failed": failed,
    }


def waiting(store: Store) -> int:
    """Episodes waiting in the queue (not yet claimed)."""
    count: int = store.one("SELECT count(*) FROM queue WHERE state = 'queued'")[0]
    return count


def unextracted(store: Store, group_ids: Sequence[str] | None) -> int:
    """Episodes of these groups (None or empty: every group) still waiting in the queue or
    being extracted: what a search of entities and facts cannot find yet."""
    where, params = "", list[Any]()
    if group_ids:
        where, params = " AND list_contains(?, group_id)", [list(group_ids)]
    count: int = store.one(
        f"SELECT count(*) FROM queue WHERE state IN ('queued', 'processing'){where}", params
    )[0]
    return count


def unextracted_note(
    store: Store, group_ids: Sequence[str] | None, llm_configured: bool
) -> str | None:
    """For a search of entities or facts that found nothing: why, when these groups have
    episodes not extracted yet (None when they have none)."""
    count = unextracted(store, group_ids)
    if not count:
        return None
    episodes, are, they = ("1 episode", "is", "it waits") if count == 1 else (
        f"{count} episodes", "are", "they wait")  # fmt: skip
    why = (
        f"{they} for an LLM, and none is configured (set SVC_KNOWLEDGE_COMPAT_BASE_URL and "
        "SVC_KNOWLEDGE_MODEL_NAME, then restart)"
        if not llm_configured
        else "extraction is under way or waiting for the LLM (see get_queue_status)"
    )
    return (
        f"{episodes} of the searched groups {are} not extracted into entities and facts yet: "
        f"{why}; search_memory finds their words already"
    )
