"""The rows saved with a graph (``index.row_snapshot``): a start whose snapshot is current
loads it instead of reading every row, catches up with what was written since, and equals a
full read; a stale, damaged or missing snapshot is a full read."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import numpy as np
import pytest

from tests.pg import wait_for
from tests.search.helpers import T0, add, entity, fact, write_embeddings
from workbench.clock import ManualClock
from workbench.decay.rules import DecayPolicy
from workbench.fakes.embedder import HashEmbedder
from workbench.index import row_snapshot, saves
from workbench.index.keyword.bm25 import KeywordIndex
from workbench.index.rows import RowCache
from workbench.metrics import Metrics
from workbench.search.engine import SearchEngine
from workbench.store import Store, saved_indexes
from workbench.store import changes as log_sql
from workbench.store import search as sql
from workbench.store.maintenance import apply_maintenance

GRAPHED = ("entity", "fact")
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def _engine(store: Store) -> SearchEngine:
    return SearchEngine(store, HashEmbedder(dimensions=8), Metrics(), ManualClock(T0),
                        access_background=False, ann_threshold=50)  # fmt: skip


def every_row(cache: RowCache) -> dict[str, dict]:
    return {uuid: cache.get(uuid) for uuid in cache.uuids()}


def fresh(store: Store, kind: str) -> dict[str, dict]:
    cache = RowCache(kind)
    cache.load(store)
    return every_row(cache)


def assert_current(engine: SearchEngine, store: Store) -> None:
    """Every column of every row equals a full read of the store."""
    for kind in ("entity", "fact", "passage"):
        assert every_row(engine.indexes.rows[kind]) == fresh(store, kind), kind


@pytest.fixture
def full_reads(monkeypatch):
    """The kinds whose rows were read whole (``RowCache.load``), in order."""
    calls: list[str] = []
    load = RowCache.load

    def counted(self, store):
        calls.append(self.kind)
        return load(self, store)

    monkeypatch.setattr(RowCache, "load", counted)
    return calls


def _saved_replica(location: str) -> tuple[Store, SearchEngine, list[dict], list[dict]]:
    """Replica A with entities and facts enough for graphs, both saved into the database
    with their rows; (its store, its engine, the entities, the facts)."""
    store = Store.open(location, dim=8)
    engine = _engine(store)
    people = add(engine, "entity", [entity(f"Person {i}", f"likes tea {i}") for i in range(80)])
    facts = add(engine, "fact", [fact(f"Person {i} knows Person {i + 1}", people[i], people[i + 1])
                                 for i in range(60)])  # fmt: skip
    for kind in GRAPHED:
        assert engine.indexes.vectors[kind].wait_ready(60)
    assert wait_for(lambda: set(saved_indexes.newest(store, GRAPHED)) == set(GRAPHED), 30)
    return store, engine, people, facts


def _writes_after_the_save(engine: SearchEngine, people: list[dict], facts: list[dict]) -> str:
    """Insert, change a summary, invalidate a fact, delete: as ingestion tells its engine.
    The uuid of the deleted entity."""
    store = engine.store
    add(engine, "entity", [entity("Lava field", "basalt")])
    with store.transaction():
        store.execute("UPDATE entities SET summary = 'drinks coffee now' WHERE uuid = ?",
                      [people[3]["uuid"]])  # fmt: skip
        store.execute("UPDATE facts SET invalid_at = ? WHERE uuid = ?", [NOW, facts[5]["uuid"]])
    engine.indexes.on_upsert("entity", [{"uuid": people[3]["uuid"]}])
    engine.indexes.on_upsert("fact", [{"uuid": facts[5]["uuid"]}])
    gone = people[70]["uuid"]
    with store.transaction():
        store.execute("DELETE FROM entities WHERE uuid = ?", [gone])
    engine.indexes.on_delete("entity", [gone])
    return gone


@pytest.mark.parametrize("keywords_saved", [False, True])
def test_a_replica_starts_from_the_saved_rows_and_catches_up(
    pg_location, full_reads, monkeypatch, keywords_saved
):
    """B, a new replica, loads A's row snapshots (no full read of entities or facts), and
    what A wrote after the save (insert, summary, invalidation, delete) is there, every
    column equal to a full read, in the keyword index too (saved with the rows: taken as
    saved, then caught up from the change log, no document compared); then B follows A's
    next writes."""
    if keywords_saved:
        monkeypatch.setattr(saves, "KEYWORDS_SAVED_FROM", 10)
    a, engine_a, people, facts = _saved_replica(pg_location)
    b = Store.open(pg_location, dim=8)
    engine_b = None
    compared: list[int] = []
    open_saved = KeywordIndex.open_saved.__func__
    monkeypatch.setattr(KeywordIndex, "open_saved", classmethod(
        lambda cls, path, uuids, *rest, **options: compared.append(len(uuids))
        or open_saved(cls, path, uuids, *rest, **options)))  # fmt: skip
    numbered: list[str] = []
    seqs_of = sql.load_vector_seqs
    monkeypatch.setattr(
        sql, "load_vector_seqs", lambda store, kind: numbered.append(kind) or seqs_of(store, kind)
    )
    try:
        gone = _writes_after_the_save(engine_a, people, facts)
        moved = people[4]["uuid"]  # re-embedded after the save
        vector = np.ones((1, 8), dtype=np.float32)
        write_embeddings(a, "entity", [moved], vector)
        engine_a.indexes.on_upsert("entity", [{"uuid": moved}], vector)
        full_reads.clear()
        engine_b = _engine(b)
        assert not set(full_reads) & set(GRAPHED)  # the snapshots served
        assert not set(numbered) & set(GRAPHED)  # and the graphs, no vector number read
        index = engine_b.indexes.vectors["entity"]
        assert index.uses_ann and sorted(index.uuids()) == sorted(
            engine_b.indexes.rows["entity"].uuids()
        )
        assert index.search(vector[0], 1)[0][0] == moved
        # the keyword indexes saved with them are not compared document by document
        assert any(compared) != keywords_saved  # (passages: none, and no save)
        kept = {u for u, *_ in engine_b.indexes.keywords["entity"].search("tea", 100)}
        assert gone not in kept and people[3]["uuid"] not in kept and len(kept) == 78
        assert [u for u, *_ in engine_b.indexes.keywords["entity"].search("basalt", 5)]
        assert gone not in engine_b.indexes.rows["entity"]
        assert (
            engine_b.indexes.rows["entity"].value(people[3]["uuid"], "summary")
            == "drinks coffee now"
        )
        assert engine_b.indexes.rows["fact"].value(facts[5]["uuid"], "invalid_at") is not None
        assert_current(engine_b, b)
        assert [u for u, *_ in engine_b.indexes.keywords["entity"].search("coffee", 5)] == [
            people[3]["uuid"]
        ]
        last = add(engine_a, "entity", [entity("Koi pond", "fish")])[0]
        engine_b.indexes.replica_sync.catch_up()
        assert last["uuid"] in engine_b.indexes.rows["entity"]
        assert_current(engine_b, b)
    finally:
        for engine in (engine_b, engine_a):
            if engine is not None:
                engine.close()
        a.close()
        b.close()


def test_a_maintenance_run_after_the_save_is_reread_in_the_background(pg_location):
    """A maintenance run writes no change rows: B serves the snapshot, then re-reads the
    states (decay scores) and equals a full read."""
    a, engine_a, _, _ = _saved_replica(pg_location)
    b = Store.open(pg_location, dim=8)
    engine_b = None
    try:
        with a.transaction():
            a.execute("UPDATE entities SET last_accessed_at = ?", [T0])
        apply_maintenance(a, DecayPolicy(), NOW)
        engine_b = _engine(b)
        thread = engine_b.indexes._sync_thread
        assert thread is not None  # the states are re-read in the background
        thread.join(60)
        assert_current(engine_b, b)
        assert engine_b.indexes._rows_marker is None
    finally:
        for engine in (engine_b, engine_a):
            if engine is not None:
                engine.close()
        a.close()
        b.close()


def test_a_promote_after_the_save_is_swapped_in_from_the_snapshot(pg_location):
    """A re-extraction's promote (quiet, one ``generation`` change row) after the save: B
    started from the snapshot swaps the group in whole."""
    a, engine_a, people, _ = _saved_replica(pg_location)
    b = Store.open(pg_location, dim=8)
    engine_b = None
    try:
        with a.transaction():
            log_sql.quiet(a)
            a.execute("DELETE FROM facts WHERE group_id = 'main' AND source_uuid = ?",
                      [people[0]["uuid"]])  # fmt: skip
            a.execute("UPDATE entities SET summary = 'new generation' WHERE group_id = 'main'")
            log_sql.log_generation(a, "main")
        engine_b = _engine(b)
        assert (
            engine_b.indexes.rows["entity"].value(people[9]["uuid"], "summary") == "new generation"
        )
        assert_current(engine_b, b)
    finally:
        for engine in (engine_b, engine_a):
            if engine is not None:
                engine.close()
        a.close()
        b.close()


@pytest.mark.parametrize("damage", ["corrupt", "other format", "pruned"])
def test_a_damaged_or_stale_snapshot_is_a_full_read(pg_location, full_reads, caplog, damage):
    a, engine_a, people, facts = _saved_replica(pg_location)
    b = Store.open(pg_location, dim=8)
    engine_b = None
    try:
        _writes_after_the_save(engine_a, people, facts)
        if damage == "corrupt":
            a.execute("UPDATE saved_index_files SET data = ? WHERE name LIKE '%.rows.arrow'",
                      [b"not an arrow file"])  # fmt: skip
        elif damage == "other format":
            _replace_stamp(a, {"format": 999})
        else:  # the change log was pruned past the snapshot
            a.execute("INSERT INTO meta VALUES ('changes_pruned_through', ?)",
                      [str(log_sql.latest_seq(a))])  # fmt: skip
        full_reads.clear()
        with caplog.at_level(logging.INFO, logger="workbench.index"):
            engine_b = _engine(b)
        assert set(GRAPHED) <= set(full_reads)
        # refused by the save's checksum, or by the snapshot's own checks: read from the store
        assert "from the store" in caplog.text
        assert_current(engine_b, b)
    finally:
        for engine in (engine_b, engine_a):
            if engine is not None:
                engine.close()
        a.close()
        b.close()


def _replace_stamp(store: Store, stamp: dict) -> None:
    """Rewrite the stamp of every row snapshot stored in the database."""
    import pyarrow as pa

    for name, part, data in store.fetchall(
        "SELECT name, part, data FROM saved_index_files WHERE name LIKE '%.rows.arrow'"
    ):
        table = pa.ipc.open_file(pa.py_buffer(bytes(data))).read_all()
        meta = dict(table.schema.metadata)
        meta[b"workbench.rows"] = json.dumps(stamp).encode()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, table.schema.with_metadata(meta)) as writer:
            writer.write_table(table)
        store.execute("UPDATE saved_index_files SET data = ? WHERE name = ? AND part = ?",
                      [sink.getvalue().to_pybytes(), name, part])  # fmt: skip


def test_a_stamp_round_trips_and_the_earliest_position_keeps_the_gaps():
    stamp = row_snapshot.Stamp(3, 41, (100, {97: 7, 99: 8}))
    assert row_snapshot.Stamp.from_json(stamp.to_json()) == stamp
    assert row_snapshot.Stamp.from_json('{"format": 999}') is None
    assert row_snapshot.Stamp.from_json("not json") is None
    start = row_snapshot.earliest([(120, {110: 9, 95: 6}), (100, {97: 7, 99: 8})])
    assert start == (100, {97: 7, 99: 8, 95: 6})


def _closed_file_store(path) -> tuple[list[dict], list[dict]]:
    """A database file whose graphs and rows were saved at a clean stop."""
    store = Store.open(path, dim=8)
    engine = _engine(store)
    people = add(engine, "entity", [entity(f"Person {i}", f"likes tea {i}") for i in range(80)])
    facts = add(engine, "fact", [fact(f"Person {i} knows Person {i + 1}", people[i], people[i + 1])
                                 for i in range(60)])  # fmt: skip
    for kind in GRAPHED:
        assert engine.indexes.vectors[kind].wait_ready(60)
    engine.close()
    store.close()
    return people, facts


def test_a_database_file_reopens_with_what_the_cli_wrote_while_it_was_down(tmp_path):
    """A database file saves no row snapshot (its rows are read whole at the next open), so
    what a second process (the CLI) wrote while the service was down (insert, summary,
    invalidation, delete, a maintenance run changing decay scores) is there: every column
    equals a full read."""
    path = tmp_path / "kb.duckdb"
    people, facts = _closed_file_store(path)
    assert (tmp_path / "kb.duckdb.search" / "entity.json").is_file()
    assert not list((tmp_path / "kb.duckdb.search").glob("*.rows.arrow"))
    store = Store.open(path, dim=8)
    cli = _engine(store)
    _writes_after_the_save(cli, people, facts)
    cli.indexes.saves.folder = None  # the CLI saves no indexes
    cli.close()
    with store.transaction():
        store.execute("UPDATE entities SET last_accessed_at = ?", [T0])
    apply_maintenance(store, DecayPolicy(), NOW)
    store.close()
    store = Store.open(path, dim=8)
    try:
        engine = _engine(store)
        assert_current(engine, store)
        engine.close()
    finally:
        store.close()


def test_writes_of_another_replica_during_the_open_are_all_there(pg_location, full_reads):
    """A keeps writing (inserts, summaries) while B opens from the snapshot: once A stops and
    B has followed the log, B's rows equal a full read."""
    import threading

    a, engine_a, people, _ = _saved_replica(pg_location)
    b = Store.open(pg_location, dim=8)
    engine_b = None
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            add(engine_a, "entity", [entity(f"Visitor {i}", f"came on day {i}")])
            with a.transaction():
                a.execute("UPDATE entities SET summary = ? WHERE uuid = ?",
                          [f"changed {i}", people[i % 80]["uuid"]])  # fmt: skip
            engine_a.indexes.on_upsert("entity", [{"uuid": people[i % 80]["uuid"]}])
            i += 1

    writer = threading.Thread(target=write)
    writer.start()
    try:
        full_reads.clear()
        engine_b = _engine(b)
        assert not set(full_reads) & set(GRAPHED)
    finally:
        stop.set()
        writer.join(30)
    try:
        engine_b.indexes.replica_sync.catch_up()
        assert_current(engine_b, b)
        assert len(engine_b.indexes.rows["entity"]) > 80
    finally:
        for engine in (engine_b, engine_a):
            if engine is not None:
                engine.close()
        a.close()
        b.close()
