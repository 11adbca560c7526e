"""The shared store on a real (throw-away) PostgreSQL: several stores opened on one database
behave like the processes of a scaled-out deployment (each has its own connections, origin
and caches). Claims never overlap and keep each group's order, a write through one is
searchable through another, maintenance runs once, leases of a dead process are taken over,
and DuckDB reads the live tables through its postgres extension."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from tests.pg import wait_for
from tests.search.helpers import T0, add, entity, fact, insert
from workbench.clock import ManualClock
from workbench.errors import Conflict, StoreError
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics
from workbench.search.engine import SearchEngine
from workbench.store import Store
from workbench.store import changes as log_sql
from workbench.store import queue as q
from workbench.store.dialect import postgres_params, to_postgres
from workbench.store.maintenance import MAINTENANCE_LOCK, apply_maintenance

NOW = datetime(2026, 3, 1, tzinfo=UTC)


# --- the dialect (pure) ---------------------------------------------------------------------
def test_parameters_and_types_are_translated_outside_quotes():
    text, style = to_postgres("SELECT ?, '?', \"a?\" FROM t WHERE x LIKE '%a' AND y = ?")
    assert text == "SELECT %s, '?', \"a?\" FROM t WHERE x LIKE '%%a' AND y = %s"
    assert style == "seq"
    text, style = to_postgres("UPDATE t SET a = $2 WHERE b = ANY($1) OR c = $1")
    assert text == "UPDATE t SET a = %(p2)s WHERE b = ANY(%(p1)s) OR c = %(p1)s"
    assert postgres_params(style, ["x", "y"]) == {"p1": "x", "p2": "y"}
    text, style = to_postgres("SELECT $now - 1 -- a comment with ? and %")
    assert text == "SELECT %(now)s - 1 -- a comment with ? and %%"
    assert style == "named"
    text, _ = to_postgres("CREATE TABLE v (x DOUBLE, y DOUBLE PRECISION, z FLOAT[384])")
    assert text == "CREATE TABLE v (x DOUBLE PRECISION, y DOUBLE PRECISION, z REAL[])"


# --- several stores on one database ---------------------------------------------------------
@pytest.fixture
def location(pg_location):
    return pg_location


@pytest.fixture
def stores(location):
    opened: list[Store] = []

    def open_one() -> Store:
        store = Store.open(location, dim=8)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def test_replicas_starting_together_migrate_once(location):
    results: list[object] = []

    def start() -> None:
        try:
            store = Store.open(location, dim=8)
            results.append(store.meta("schema_version"))
            store.close()
        except Exception as exc:  # noqa: BLE001 - reported below
            results.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    from workbench.store.schema import SCHEMA_VERSION

    assert results == [str(SCHEMA_VERSION)] * 4


def test_an_unreachable_server_is_one_clear_error():
    with pytest.raises(
        StoreError, match="cannot connect to the database postgresql://u:\\*\\*\\*@"
    ):
        Store.open("postgresql://u:secret@127.0.0.1:1/db?connect_timeout=1", dim=8)


def _enqueue(store: Store, groups: int, per_group: int) -> list[str]:
    uuids = []
    for i in range(per_group):
        for g in range(groups):
            uuid = f"e{g}-{i}"
            q.enqueue(store, uuid, f"g{g}", 1, NOW)
            uuids.append(uuid)
    return uuids


def test_two_processes_claiming_at_once_never_share_a_message_and_keep_group_order(stores):
    a, b = stores(), stores()
    expected = set(_enqueue(a, groups=6, per_group=8))
    claimed: list[tuple[str, str]] = []  # (store name, uuid)
    out_of_order: list[str] = []
    lock = threading.Lock()

    def work(store: Store, name: str) -> None:
        idle = 0
        while idle < 20:
            messages, _ = q.claim_heads(store, name, NOW, 60, limit=4, run_size=3)
            if not messages:
                idle += 1
                time.sleep(0.01)
                continue
            idle = 0
            for m in messages:
                # every earlier message of its group is done, or claimed in this same run
                earlier = store.fetchall(
                    "SELECT episode_uuid FROM queue WHERE group_id = ? AND seq < ? "
                    "AND state <> 'done'",
                    [m["group_id"], m["seq"]],
                )
                mine = {x["episode_uuid"] for x in messages}
                if any(r[0] not in mine for r in earlier):
                    out_of_order.append(m["episode_uuid"])
            with lock:
                claimed.extend((name, m["episode_uuid"]) for m in messages)
            time.sleep(0.005)
            q.mark_done_many(store, [m["episode_uuid"] for m in messages], NOW)

    threads = [
        threading.Thread(target=work, args=(store, name))
        for store, name in ((a, "a1"), (a, "a2"), (b, "b1"), (b, "b2"))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    uuids = [u for _, u in claimed]
    assert sorted(uuids) == sorted(expected)  # each exactly once
    assert out_of_order == []
    assert q.status(a, NOW)["counts"]["done"] == len(expected)


def test_the_leases_of_a_dead_process_are_taken_over_and_counted(stores):
    a, b = stores(), stores()
    _enqueue(a, groups=2, per_group=1)
    held, _ = q.claim_heads(a, "a", NOW, 30, limit=2)
    assert len(held) == 2
    # another process's live leases are left alone
    assert q.recover_crashed(b, NOW + timedelta(seconds=10), 3, expired_only=True) == (0, [])
    # process a died: its leases run out and b returns them to the queue, each a crash
    returned, failed = q.recover_crashed(b, NOW + timedelta(seconds=31), 3, expired_only=True)
    assert (returned, failed) == (2, [])
    assert b.fetchall("SELECT DISTINCT crashes FROM queue") == [(1,)]
    again, _ = q.claim_heads(b, "b", NOW + timedelta(seconds=31), 30, limit=2)
    assert sorted(m["episode_uuid"] for m in again) == sorted(m["episode_uuid"] for m in held)
    # a's late release touches nothing it no longer holds
    assert q.release_all(a, "a") == 0


def test_maintenance_runs_in_one_process_at_a_time(stores):
    from workbench.decay.rules import DecayPolicy

    a, b = stores(), stores()
    with a.transaction():
        assert a.advisory_lock(MAINTENANCE_LOCK)
        with pytest.raises(Conflict, match="another process"):
            apply_maintenance(b, DecayPolicy(), NOW)
    assert apply_maintenance(b, DecayPolicy(), NOW)["run_id"] is not None


def test_every_write_is_logged_once_per_memory_except_maintenance(stores):
    from workbench.decay.rules import DecayPolicy

    a = stores()
    before = log_sql.latest_seq(a)
    rows = [entity("Maria"), entity("Acme")]
    insert(a, "entity", rows, np.ones((2, 8), dtype=np.float32))
    logged = log_sql.changes_since(a, before)
    assert sorted((kind, uuid) for _, kind, uuid, _ in logged) == sorted(
        [("entity", r["uuid"]) for r in rows] + [("entity_vector", r["uuid"]) for r in rows]
    )
    assert {origin for *_, origin in logged} == {a.origin}
    top = log_sql.latest_seq(a)
    apply_maintenance(a, DecayPolicy(), NOW)
    assert log_sql.latest_seq(a) == top  # the run's rewrite of every score is quiet


def _engine(store: Store, **options) -> SearchEngine:
    return SearchEngine(
        store,
        HashEmbedder(dimensions=8),
        Metrics(),
        ManualClock(T0),
        access_background=False,
        graph_dir=None,
        **options,
    )


def test_a_memory_written_through_one_replica_is_searchable_on_the_other(stores):
    a, b = stores(), stores()
    engine_a, engine_b = _engine(a), _engine(b)
    try:
        maria, acme = entity("Maria Keller"), entity("Acme")
        add(engine_a, "entity", [maria, acme])
        works = fact("Maria Keller works at Acme", maria, acme)
        add(engine_a, "fact", [works])
        engine_a.indexes.replica_sync.catch_up()  # before b reads: b's searches write accesses
        assert engine_a.indexes.replica_sync.applied == 0  # its own writes are not re-read
        started = time.monotonic()

        def found() -> bool:
            hits = engine_b.search_facts("where does Maria Keller work")
            return any(h["uuid"] == works["uuid"] for h in hits)

        assert wait_for(found, timeout=5)
        assert time.monotonic() - started < 2.0  # NOTIFY wakes the follower at once
        # a delete elsewhere is forgotten too
        from workbench.store import graph as g

        with a.transaction():
            g.delete_facts(a, [works["uuid"]])
        assert wait_for(lambda: not found(), timeout=5)
    finally:
        engine_a.close()
        engine_b.close()


def test_a_passage_written_through_one_replica_is_searchable_on_the_other(stores):
    from workbench.ingest.verbatim import PassageWriter
    from workbench.search.recall import search_memory
    from workbench.store import graph as g

    a, b = stores(), stores()
    engine_a, engine_b = _engine(a), _engine(b)
    try:
        episode = {"uuid": "3a460868-7411-4c0e-99cf-570bf7f9a77d", "group_id": "g1",
                   "name": "chat", "body": "Ana: my sister Sofia lives in Porto.\nBo: nice",
                   "source": "message", "source_description": "", "reference_time": NOW,
                   "created_at": NOW, "priority": 1}  # fmt: skip
        writer = PassageWriter(a, engine_a.searcher.embedder, engine_a.indexes.publisher)
        rows = writer.prepare(episode)
        with engine_a.indexes.publisher:
            with a.transaction():
                g.insert_episode(a, episode)
                writer.write(rows)
            writer.publish(rows)
        writer.close()  # embedded: the vector reaches the other replica too

        def found() -> bool:
            hits = search_memory(engine_b, "where does Sofia live", kinds=["passage"])
            return any(h["episode_uuid"] == episode["uuid"] for h in hits)

        assert wait_for(found, timeout=5)
        assert wait_for(lambda: engine_b.indexes.vectors["passage"].uuids() == [rows[0]["uuid"]], 5)
        with a.transaction():
            g.delete_episode(a, episode["uuid"])
        assert wait_for(lambda: not found(), timeout=5)
    finally:
        engine_a.close()
        engine_b.close()


def test_catch_up_sees_every_committed_change_even_when_numbers_commit_out_of_order(stores):
    a, b, c = stores(), stores(), stores()
    engine = _engine(c, sync=False)
    try:
        slow = a.transaction()
        slow.__enter__()
        insert(a, "entity", [entity("Slow")], np.ones((1, 8), dtype=np.float32))  # lower seq
        fast = entity("Fast")
        insert(b, "entity", [fast], np.ones((1, 8), dtype=np.float32))  # commits first
        engine.indexes.catch_up()
        assert fast["uuid"] in engine.indexes.rows["entity"]
        slow.__exit__(None, None, None)  # the lower numbers become visible only now
        engine.indexes.catch_up()
        assert {r["name"] for r in engine.indexes.rows["entity"].rows.values()} == {"Slow", "Fast"}
    finally:
        engine.close()


def test_duckdb_reads_the_live_tables_through_its_postgres_extension(stores, location):
    from service.client.live import snapshot
    from workbench.config import load_settings

    a = stores()
    con = snapshot(load_settings({"SVC_KNOWLEDGE_DATABASE_URL": location}, env_file=None))
    try:
        assert con.execute("SELECT count(*) FROM entities").fetchone() == (0,)
        insert(a, "entity", [entity("Maria")], np.ones((1, 8), dtype=np.float32))
        assert con.execute("SELECT name FROM entities").fetchall() == [("Maria",)]
        assert con.execute("SELECT len(vector) FROM entity_embeddings").fetchone() == (8,)
    finally:
        con.close()


def test_reembedding_keeps_the_change_log_of_the_replaced_tables(stores):
    from workbench.jobs.switch_model import reembed

    a = stores()
    insert(a, "entity", [entity("Maria")], np.ones((1, 8), dtype=np.float32))
    report = reembed(a, HashEmbedder(dimensions=8))
    assert report.entities == 1
    before = log_sql.latest_seq(a)
    insert(a, "entity", [entity("Tom")], np.ones((1, 8), dtype=np.float32))
    from workbench.store import graph as g

    g.insert_embeddings(a, "passage", ["p1"], np.ones((1, 8)), "m")
    kinds = {kind for _, kind, _, _ in log_sql.changes_since(a, before)}
    assert kinds == {"entity", "entity_vector", "passage_vector"}


def test_a_late_failure_of_a_lease_taken_over_leaves_the_new_holder_alone(stores):
    a, b = stores(), stores()
    _enqueue(a, groups=1, per_group=2)
    [held], _ = q.claim_heads(a, "a", NOW, 30, limit=1)
    later = NOW + timedelta(seconds=31)
    assert q.recover_crashed(b, later, 3, expired_only=True) == (1, [])
    [again], _ = q.claim_heads(b, "b", later, 30, limit=1)
    assert again["episode_uuid"] == held["episode_uuid"] and again["lease_owner"] == "b"
    # a wakes up and fails or retries its old delivery: b's lease is untouched
    assert not q.mark_failed(a, held["episode_uuid"], later, "UnknownError", "x", held["seq"], "a")
    assert not q.schedule_retry(
        a, held["episode_uuid"], later, "TimeoutError", "x", False, held["seq"], owner="a"
    )
    assert q.status(b, later)["counts"]["processing"] == 1
    assert q.claim_heads(b, "b", later, 30, limit=1)[0] == []  # the group's next waits


def test_enqueues_of_one_group_commit_in_sequence_order(stores):
    a, b = stores(), stores()
    with a.transaction():
        q.enqueue(a, "first", "g", 1, NOW)
        other = threading.Thread(target=q.enqueue, args=(b, "second", "g", 1, NOW))
        other.start()
        time.sleep(0.3)
        assert other.is_alive()  # waits for the first enqueue of its group to commit
    other.join(10)
    rows = a.fetchall("SELECT episode_uuid FROM queue ORDER BY seq")
    assert rows == [("first",), ("second",)]
    # another group does not wait
    with a.transaction():
        q.enqueue(a, "third", "g", 1, NOW)
        q.enqueue(b, "elsewhere", "h", 1, NOW)


def test_a_write_open_when_a_replica_starts_reaches_it_when_it_commits(stores):
    a, c = stores(), stores()
    pending = a.transaction()
    pending.__enter__()
    late = entity("Late")
    insert(a, "entity", [late], np.ones((1, 8), dtype=np.float32))
    engine = _engine(c, sync=False)  # reads its rows while the write is still open
    try:
        assert late["uuid"] not in engine.indexes.rows["entity"]
        pending.__exit__(None, None, None)
        engine.indexes.catch_up()
        assert late["uuid"] in engine.indexes.rows["entity"]
    finally:
        engine.close()


def test_a_purge_by_maintenance_elsewhere_reaches_a_process_that_never_searches(stores):
    from workbench.decay.rules import DecayPolicy

    a, worker = stores(), stores()
    gone = entity("Gone")
    insert(a, "entity", [gone], np.ones((1, 8), dtype=np.float32))
    a.execute(
        "UPDATE entities SET lifecycle_state = 'SOFT_DELETED', soft_deleted_at = ?",
        [NOW - timedelta(days=400)],
    )
    engine = _engine(worker, sync=False)
    try:
        assert gone["uuid"] in engine.indexes.rows["entity"]
        assert apply_maintenance(a, DecayPolicy(), NOW)["purged"] == 1
        engine.indexes.catch_up()  # what a worker does after each claim
        assert gone["uuid"] not in engine.indexes.rows["entity"]
        assert gone["uuid"] not in engine.indexes.vectors["entity"].uuids()
    finally:
        engine.close()


def test_a_process_behind_a_pruned_log_re_reads_everything(stores):
    a, c = stores(), stores()
    engine = _engine(c, sync=False)
    try:
        first = entity("First")
        insert(a, "entity", [first], np.ones((1, 8), dtype=np.float32))
        a.execute("UPDATE changes SET at = at - INTERVAL '2 hours'")
        assert log_sql.prune(a, 3600) == 2
        engine.indexes.catch_up()
        assert first["uuid"] in engine.indexes.rows["entity"]
    finally:
        engine.close()


def test_a_vector_of_another_size_is_refused_like_on_duckdb(stores):
    from workbench.errors import DimensionMismatch
    from workbench.store import graph as g

    a = stores()
    with pytest.raises(DimensionMismatch, match="every process must use the embedder"):
        g.insert_vectors(a, "entity_embeddings", ["x"], np.ones((1, 4)), "other", 4)
    assert a.fetchone("SELECT count(*) FROM entity_embeddings") == (0,)


def test_reembed_sees_the_other_processes_on_the_database(stores):
    a, b = stores(), stores()
    assert b.origin in a.other_processes()
    assert a.origin not in a.other_processes()


def test_a_database_server_s_graphs_are_saved_in_a_private_folder_only(stores):
    """Not beside the database (there is no file): in a folder of this process, gone at its
    close (the saves themselves are kept in the database: tests/store/test_saved_indexes)."""
    a = stores()
    engine = SearchEngine(a, HashEmbedder(dimensions=8), Metrics(), access_background=False)
    folder = engine.indexes.saves.folder
    try:
        assert folder is not None and folder.is_dir() and not any(folder.iterdir())
    finally:
        engine.close()
    assert not folder.exists()


def test_facts_are_looked_up_by_their_entities_through_an_index_also_after_an_upgrade(stores):
    """The duplicate check of every write joins facts on their two entities: without an
    index PostgreSQL scans the group's facts, a cost growing with the store. A database made
    before the index (its PostgreSQL-only schema one step older) gets it at the next open."""
    from workbench.store import graph as g

    def indexed(store: Store) -> bool:
        rows = store.fetchall(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'facts' "
            "AND schemaname = current_schema()"
        )
        return any("(source_uuid, target_uuid)" in str(r[0]) for r in rows)

    store = stores()
    assert indexed(store)
    assert store.meta("postgres_schema_version") == str(len(log_sql.POSTGRES_DDL))
    store.execute("DROP INDEX facts_ends")
    step = next(i for i, s in enumerate(log_sql.POSTGRES_DDL) if "facts_ends" in " ".join(s))
    store.execute("UPDATE meta SET value = ? WHERE key = 'postgres_schema_version'", [str(step)])
    assert not indexed(store)
    again = stores()
    assert indexed(again)
    assert g.existing_facts(again, [("g", "a", "b", "x")]) == set()


def test_a_timeline_reads_through_indexes_also_after_an_upgrade(stores):
    """A group's timeline reads episodes and facts by (group, time): a database made before
    those indexes gets them at the next open."""

    def indexes(store: Store) -> set[str]:
        rows = store.fetchall(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
        )
        return {r[0] for r in rows} & {
            "episodes_group_time",
            "facts_group_valid",
            "facts_group_invalid",
        }

    store = stores()
    assert len(indexes(store)) == 3
    for name in indexes(store):
        store.execute(f"DROP INDEX {name}")
    store.execute(
        "UPDATE meta SET value = ? WHERE key = 'postgres_schema_version'",
        [str(len(log_sql.POSTGRES_DDL) - 1)],
    )
    assert indexes(stores()) == {"episodes_group_time", "facts_group_valid", "facts_group_invalid"}


def test_a_database_of_schema_8_gets_its_facts_sources_at_the_next_open(stores):
    """Schema 9 (provenance) fills ``fact_sources`` from each fact's first episode."""
    store = stores()
    store.execute("DROP TABLE fact_sources")
    store.execute("DROP TABLE fact_imports")
    store.execute("UPDATE meta SET value = '8' WHERE key = 'schema_version'")
    store.execute(
        "INSERT INTO facts (uuid, group_id, source_uuid, target_uuid, fact, episode_uuid, "
        "created_at) VALUES ('f1', 'g', 's', 't', 'x', 'e1', now()), "
        "('f2', 'g', 's', 't', 'y', NULL, now())"
    )
    again = stores()
    assert again.fetchall("SELECT fact_uuid, episode_uuid FROM fact_sources") == [("f1", "e1")]
    assert again.fetchall("SELECT count(*) FROM fact_imports") == [(0,)]
