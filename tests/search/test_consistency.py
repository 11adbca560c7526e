"""The indexes follow the store: inserts, deletes and restarts (a new engine on the file)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.search.helpers import T0, add, entity, fact
from workbench.clock import ManualClock
from workbench.index import live as live_module
from workbench.index import rows as search_cache
from workbench.index import saves as saves_module
from workbench.index.vector import graph as vector_graph
from workbench.ingest.reads import CachedReads
from workbench.metrics import Metrics
from workbench.search.engine import SearchEngine
from workbench.store import Store
from workbench.store import search as sql


def open_engine(path, embedder):
    store = Store.open(path)
    return store, SearchEngine(store, embedder, Metrics(), ManualClock(T0), access_background=False)


def saved_file(graph_dir, kind, what):
    """The file of the last save of ``kind``'s graph (``graph``, ``prints`` or ``vectors``)."""
    return graph_dir / json.loads((graph_dir / f"{kind}.json").read_text())["files"][what]


def ranking(hits):
    return [
        (h["uuid"], h["score_parts"]["similarity"], h["score_parts"]["keyword"], h["score"])
        for h in hits
    ]


@pytest.fixture
def db(tmp_path):
    return str(tmp_path / "kb.duckdb")


def test_results_are_identical_after_a_restart(db, hash_embedder):
    store, engine = open_engine(db, hash_embedder)
    sam, tea = add(engine, "entity", [entity("Sam", "likes green tea"), entity("Green tea")])
    add(engine, "fact", [fact(f"Sam drinks green tea number {i}", sam, tea) for i in range(30)])
    nodes, facts = engine.search_nodes("green tea"), engine.search_facts("green tea drinks")
    engine.close()
    store.close()

    store, engine = open_engine(db, hash_embedder)
    try:
        assert ranking(engine.search_nodes("green tea")) == ranking(nodes)
        assert ranking(engine.search_facts("green tea drinks")) == ranking(facts)
        assert len(engine.indexes.vectors["fact"]) == len(engine.indexes.keywords["fact"]) == 30
    finally:
        engine.close()
        store.close()


def test_deleted_memories_are_gone_now_and_after_restart(db, hash_embedder):
    store, engine = open_engine(db, hash_embedder)
    (sam,) = add(engine, "entity", [entity("Sam")])
    keep, drop = add(
        engine,
        "fact",
        [fact("Sam plays the piano", sam, sam), fact("Sam plays the guitar", sam, sam)],
    )
    store.execute("DELETE FROM facts WHERE uuid = ?", [drop["uuid"]])
    store.execute("DELETE FROM fact_embeddings WHERE uuid = ?", [drop["uuid"]])
    engine.indexes.on_delete("fact", [drop["uuid"]])
    assert [h["uuid"] for h in engine.search_facts("plays guitar")] == [keep["uuid"]]
    engine.close()
    store.close()

    store, engine = open_engine(db, hash_embedder)
    try:
        assert [h["uuid"] for h in engine.search_facts("plays guitar")] == [keep["uuid"]]
        assert drop["uuid"] not in engine.indexes.vectors["fact"]
    finally:
        engine.close()
        store.close()


def test_refresh_states_drops_rows_purged_behind_the_engines_back(
    store, make_engine, hash_embedder
):
    engine = make_engine(hash_embedder)
    a, b = add(engine, "entity", [entity("old receipt"), entity("new receipt")])
    store.execute("DELETE FROM entities WHERE uuid = ?", [a["uuid"]])  # e.g. a purge
    engine.indexes.refresh_states()
    assert [h["uuid"] for h in engine.search_nodes("receipt")] == [b["uuid"]]
    assert a["uuid"] not in engine.indexes.vectors["entity"]
    assert a["uuid"] not in engine.indexes.keywords["entity"]
    engine.indexes.rebuild()
    assert len(engine.indexes.vectors["entity"]) == 1


def test_a_maintenance_run_is_noticed_without_being_told(store, make_engine, hash_embedder):
    engine = make_engine(hash_embedder, sync_seconds=0)
    a, b = add(engine, "entity", [entity("old receipt"), entity("new receipt")])
    store.execute("UPDATE entities SET lifecycle_state = 'EXPIRED' WHERE uuid = ?", [a["uuid"]])
    store.execute(
        "INSERT INTO maintenance_runs (id, started_at, status) "
        "VALUES (nextval('maintenance_runs_seq'), now(), 'success')"
    )
    engine.search_nodes("receipt")  # notices the run; reloads the rows in the background
    engine.indexes._sync_thread.join(timeout=30)
    assert [h["uuid"] for h in engine.search_nodes("receipt")] == [b["uuid"]]


def test_on_upsert_of_a_changed_row_rereads_it(store, make_engine, hash_embedder):
    engine = make_engine(hash_embedder)
    (sam,) = add(engine, "entity", [entity("Sam")])
    (job,) = add(engine, "fact", [fact("Sam works at Acme", sam, sam)])
    store.execute(
        "UPDATE facts SET invalid_at = now(), expired_at = now() WHERE uuid = ?", [job["uuid"]]
    )
    engine.indexes.on_upsert("fact", [{"uuid": job["uuid"], "group_id": "main"}])
    assert engine.search_facts("works at Acme") == []
    assert len(engine.search_facts("works at Acme", include_invalidated=True)) == 1


def test_upsert_of_changed_text_replaces_the_old_one(store, make_engine, hash_embedder):
    engine = make_engine(hash_embedder)
    (memo,) = add(engine, "entity", [entity("Sam", "likes coffee")])
    memo = dict(memo, summary="likes matcha now")
    store.execute("UPDATE entities SET summary = ? WHERE uuid = ?", [memo["summary"], memo["uuid"]])
    vector = hash_embedder.embed(["Sam: likes matcha now"])
    engine.indexes.on_upsert("entity", [memo], vector)
    assert engine.search_nodes("matcha")[0]["score_parts"]["keyword"] > 0
    assert engine.indexes.keywords["entity"].search("coffee", 5) == []
    assert len(engine.indexes.vectors["entity"]) == 1


def test_more_vectors_than_rows_are_refused_and_the_index_is_unchanged(
    store, make_engine, hash_embedder
):
    engine = make_engine(hash_embedder)
    (sam,) = add(engine, "entity", [entity("Sam", "likes coffee")])
    before = engine.indexes.vectors["entity"].vector(sam["uuid"]).copy()
    with pytest.raises(ValueError, match="2 vectors for 1 entity rows"):
        engine.indexes.on_upsert("entity", [sam], hash_embedder.embed(["a matcha", "b tea"]))
    np.testing.assert_array_equal(engine.indexes.vectors["entity"].vector(sam["uuid"]), before)


def test_search_over_an_empty_graph_returns_nothing(make_engine, hash_embedder, metrics):
    engine = make_engine(hash_embedder)
    assert engine.search_nodes("anything") == []
    assert engine.search_facts("anything", group_ids=["never-seen"]) == []
    assert hash_embedder.calls == 0  # nothing to compare with: the query is not even embedded


def test_hnsw_graph_is_saved_and_reused_only_when_the_vectors_match(db, hash_embedder):
    store, engine = open_engine(db, hash_embedder)
    engine.indexes.ann_threshold = 50
    (sam,) = add(engine, "entity", [entity("Sam")])
    rows = add(
        engine, "fact", [fact(f"Sam note number {i} about tea", sam, sam) for i in range(120)]
    )
    engine.indexes.rebuild()  # now above the threshold: builds the graph
    assert engine.indexes.vectors["fact"].wait_ready(60) and engine.indexes.vectors["fact"].uses_ann
    before = ranking(engine.search_facts("note 7 tea"))
    engine.close()
    assert saved_file(engine.indexes.saves.folder, "fact", "graph").is_file()
    store.close()

    store = Store.open(db)
    engine = SearchEngine(
        store, hash_embedder, Metrics(), ManualClock(T0), access_background=False, ann_threshold=50
    )
    try:
        index = engine.indexes.vectors["fact"]
        assert index.uses_ann and index.graph._builder is None  # reused: no rebuild
        assert ranking(engine.search_facts("note 7 tea"))[:3] == before[:3]
        store.execute("DELETE FROM facts WHERE uuid = ?", [rows[0]["uuid"]])
    finally:
        engine.close()
        store.close()

    store = Store.open(db)
    engine = SearchEngine(
        store, hash_embedder, Metrics(), ManualClock(T0), access_background=False, ann_threshold=50
    )
    try:  # the store changed behind the saved graph: it is not trusted
        assert rows[0]["uuid"] not in engine.indexes.vectors["fact"]
        assert engine.indexes.vectors["fact"].wait_ready(60)
        assert len(engine.indexes.vectors["fact"].slots._ann) == 119
    finally:
        engine.close()
        store.close()


def test_a_graph_built_in_the_background_is_saved_at_once_for_a_process_killed_later(
    db, hash_embedder
):
    """No clean stop: the graph saved when its build finished (with the keyword index) is what
    the next start opens and catches up, instead of building again."""
    store, engine = open_engine(db, hash_embedder)
    engine.indexes.ann_threshold = 50
    (sam,) = add(engine, "entity", [entity("Sam")])
    add(engine, "fact", [fact(f"Sam note number {i} about tea", sam, sam) for i in range(1200)])
    engine.indexes.rebuild()  # above the threshold: the graph is built in the background
    assert engine.indexes.vectors["fact"].wait_ready(60) and engine.indexes.vectors["fact"].uses_ann
    deadline = time.monotonic() + 30
    while not (engine.indexes.saves.folder / "fact.json").is_file() and time.monotonic() < deadline:
        time.sleep(0.05)  # the save runs in the builder's thread, right after the swap
    assert saved_file(engine.indexes.saves.folder, "fact", "graph").is_file()
    assert (engine.indexes.saves.folder / "fact.keywords.npz").is_file()
    later = add(engine, "fact", [fact("Sam note written after the save", sam, sam)])
    before = ranking(engine.search_facts("note 7 tea"))
    engine.indexes.tracker.close()  # what a killed process wrote is in the store; no clean stop
    engine.indexes.vectors["fact"].graph.on_built = None
    engine2 = SearchEngine(  # a new start on the same file
        store, hash_embedder, Metrics(), ManualClock(T0), access_background=False, ann_threshold=50
    )
    try:
        index = engine2.indexes.vectors["fact"]
        assert index.uses_ann and index.graph._builder is None  # opened and caught up, not rebuilt
        assert later[0]["uuid"] in index and later[0]["uuid"] in engine2.indexes.keywords["fact"]
        assert ranking(engine2.search_facts("note 7 tea"))[:3] == before[:3]
    finally:
        engine2.close()
        engine.close()
        store.close()


def test_a_saved_graph_built_with_other_hnsw_parameters_is_rebuilt(db, hash_embedder):
    store, engine = open_engine(db, hash_embedder)
    engine.indexes.ann_threshold = 50
    (sam,) = add(engine, "entity", [entity("Sam")])
    add(engine, "fact", [fact(f"Sam note number {i} about tea", sam, sam) for i in range(120)])
    engine.indexes.rebuild()
    assert engine.indexes.vectors["fact"].wait_ready(60)
    assert engine.indexes.vectors["fact"].slots._ann.connectivity != 8
    engine.close()
    store.close()

    store = Store.open(db)
    engine = SearchEngine(
        store,
        hash_embedder,
        Metrics(),
        ManualClock(T0),
        access_background=False,
        ann_threshold=50,
        index_options={"connectivity": 8},
    )
    try:  # same vectors, other parameters: not reused
        index = engine.indexes.vectors["fact"]
        assert index.wait_ready(60) and index.uses_ann
        assert index.slots._ann.connectivity == 8 and len(index.slots._ann) == 120
    finally:
        engine.close()
        store.close()


def _during_rank(engine, monkeypatch, action):
    """Run ``action`` once, after the search has ranked its rows (without the engine's lock)
    and before it writes their access into the row cache."""
    rank = engine.searcher._rank
    done = []

    def ranked_then_act(*args, **kwargs):
        result = rank(*args, **kwargs)
        if not done:
            done.append(True)
            action()
        return result

    monkeypatch.setattr(engine.searcher, "_rank", ranked_then_act)


def test_a_search_does_not_resurrect_a_memory_deleted_while_it_ranked(
    store, make_engine, hash_embedder, monkeypatch
):
    engine = make_engine(hash_embedder)
    gone, kept = add(engine, "entity", [entity("Harbour crane"), entity("Harbour master")])

    def delete():
        store.execute("DELETE FROM entities WHERE uuid = ?", [gone["uuid"]])
        engine.indexes.on_delete("entity", [gone["uuid"]])

    _during_rank(engine, monkeypatch, delete)
    hits = engine.search_nodes("harbour crane")
    assert gone["uuid"] in [h["uuid"] for h in hits]  # ranked before the delete
    assert gone["uuid"] not in engine.indexes.rows["entity"]
    reads = CachedReads(engine.indexes.cached_rows)
    assert reads.entities_by_norm("main", ["harbour crane"]) == {}
    assert reads.entities_by_uuid([gone["uuid"]]) == {}
    assert [h["uuid"] for h in engine.search_nodes("harbour")] == [kept["uuid"]]
    assert engine.indexes.rows["entity"].get(kept["uuid"])["access_count"] == 2


def test_a_search_keeps_a_change_made_while_it_ranked_and_adds_its_access(
    store, make_engine, hash_embedder, monkeypatch
):
    engine = make_engine(hash_embedder)
    (crane,) = add(engine, "entity", [entity("Harbour crane", "old summary")])

    def update():
        store.execute("UPDATE entities SET summary = 'new summary' WHERE uuid = ?", [crane["uuid"]])
        engine.indexes.on_upsert("entity", [{"uuid": crane["uuid"], "group_id": "main"}])

    _during_rank(engine, monkeypatch, update)
    engine.search_nodes("harbour crane")
    row = engine.indexes.rows["entity"].get(crane["uuid"])
    assert row["summary"] == "new summary"
    assert row["access_count"] == 1
    engine.indexes.flush()
    assert store.fetchone(
        "SELECT summary, access_count FROM entities WHERE uuid = ?", [crane["uuid"]]
    ) == ("new summary", 1)


def test_a_delete_told_while_refresh_states_loads_is_not_undone(
    store, make_engine, hash_embedder, monkeypatch
):
    """refresh_states loads every row from a snapshot that still holds the entity; the
    delete told meanwhile must apply to the rows it swaps in, not to the ones it drops."""
    engine = make_engine(hash_embedder)
    gone, kept = add(engine, "entity", [entity("Harbour crane"), entity("Harbour master")])
    load = search_cache.RowCache.load
    deleter: list[threading.Thread] = []

    def delete():
        store.execute("DELETE FROM entities WHERE uuid = ?", [gone["uuid"]])
        engine.indexes.on_delete("entity", [gone["uuid"]])

    def load_then_delete(cache, source):
        load(cache, source)
        if cache.kind == "entity" and not deleter:
            deleter.append(threading.Thread(target=delete))
            deleter[0].start()
            deleter[0].join(timeout=0.5)  # blocked until the swap (or done, were it not)

    monkeypatch.setattr(search_cache.RowCache, "load", load_then_delete)
    engine.indexes.refresh_states()
    deleter[0].join(timeout=10)
    assert not deleter[0].is_alive()
    assert gone["uuid"] not in engine.indexes.rows["entity"]
    assert gone["uuid"] not in engine.indexes.vectors["entity"]
    assert [h["uuid"] for h in engine.search_nodes("harbour crane")] == [kept["uuid"]]


def test_a_refresh_does_not_drop_a_memory_told_after_another_refresh_swapped_its_rows(
    store, make_engine, hash_embedder, monkeypatch
):
    """Two refreshes overlap (the background sync a search starts after a maintenance run,
    and the run's own after_run): the first must not take a memory written and told after
    the second swapped its rows in for one purged (it is in no snapshot of the first)."""
    engine = make_engine(hash_embedder)
    add(engine, "entity", [entity("Harbour master")])
    index = engine.indexes.vectors["entity"]
    uuids = index.uuids
    first: list[threading.Thread] = []
    stalled, resume = threading.Event(), threading.Event()

    def stall_the_first(*args, **kwargs):
        if first and threading.current_thread() is first[0] and not stalled.is_set():
            stalled.set()
            resume.wait(10)
        return uuids(*args, **kwargs)

    monkeypatch.setattr(index, "uuids", stall_the_first)
    first.append(threading.Thread(target=engine.indexes.refresh_states))
    first[0].start()
    assert stalled.wait(10)  # it swapped its entity rows, then looks for purged ones
    crane: list[dict] = []

    def refresh_then_write():
        engine.indexes.refresh_states()
        crane.extend(add(engine, "entity", [entity("Harbour crane")]))

    second = threading.Thread(target=refresh_then_write)
    second.start()
    second.join(timeout=0.5)  # done (or waiting for the first, were it holding its lock)
    resume.set()
    first[0].join(timeout=10)
    second.join(timeout=10)
    assert not first[0].is_alive() and not second.is_alive()
    uuid = crane[0]["uuid"]
    assert uuid in engine.indexes.rows["entity"] and uuid in engine.indexes.vectors["entity"]
    assert CachedReads(engine.indexes.cached_rows).entities_by_norm("main", ["harbour crane"])
    assert uuid in [h["uuid"] for h in engine.search_nodes("harbour crane")]


def test_an_access_recorded_while_rebuild_loads_is_kept_in_its_rows(
    store, make_engine, hash_embedder, monkeypatch
):
    """rebuild applies the queued accesses to the rows it loaded: one recorded after that
    (a search while the other kind's index loads) must still be in the rows it swaps in."""
    engine = make_engine(hash_embedder)
    (crane,) = add(engine, "entity", [entity("Harbour crane")])
    load = live_module.load_index
    searcher: list[threading.Thread] = []

    def search_while_loading(store_, kind, *args, **kwargs):
        if kind == "fact" and not searcher:
            searcher.append(threading.Thread(target=engine.search_nodes, args=("harbour crane",)))
            searcher[0].start()
            deadline = time.monotonic() + 10
            while engine.indexes.tracker.pending == 0 and time.monotonic() < deadline:
                time.sleep(0.01)  # recorded (its write waits for rebuild's consistent_read)
        return load(store_, kind, *args, **kwargs)

    monkeypatch.setattr(live_module, "load_index", search_while_loading)
    engine.indexes.rebuild()
    searcher[0].join(timeout=10)
    assert not searcher[0].is_alive()
    assert engine.indexes.rows["entity"].get(crane["uuid"])["access_count"] == 1
    assert store.fetchone("SELECT access_count FROM entities WHERE uuid = ?", [crane["uuid"]]) == (
        1,
    )


def saved_graph_of_notes(db, embedder):
    """120 entities, their graph built and saved at a clean stop; the store stays open."""
    store, engine = open_engine(db, embedder)
    engine.indexes.ann_threshold = 50
    notes = add(engine, "entity", [entity(f"Note {i}", f"tea note {i}") for i in range(120)])
    engine.indexes.rebuild()
    assert engine.indexes.vectors["entity"].wait_ready(60)
    engine.close()
    return store, notes


def reopen_with_graphs(db, embedder):
    store = Store.open(db)
    return store, SearchEngine(
        store, embedder, Metrics(), ManualClock(T0), access_background=False, ann_threshold=50
    )


def test_a_saved_graph_catches_up_with_what_the_store_changed_after_it(db, hash_embedder):
    """The graph was saved at a clean stop; then another process (or one that crashed before
    saving) added, deleted and re-embedded memories. The next start opens the saved graph
    and catches it up instead of rebuilding it: nothing lost, nothing deleted comes back."""
    store, notes = saved_graph_of_notes(db, hash_embedder)
    store.close()

    store = Store.open(db)  # behind the saved graph: no graph loaded, none saved
    engine = SearchEngine(store, hash_embedder, Metrics(), ManualClock(T0),
                          access_background=False, graph_dir=False)  # fmt: skip
    new = add(engine, "entity", [entity(f"Pond {i}", f"koi carp pond {i}") for i in range(3)])
    gone = [notes[0]["uuid"], notes[1]["uuid"]]
    changed = notes[2]["uuid"]
    for uuid in gone:
        store.execute("DELETE FROM entity_embeddings WHERE uuid = ?", [uuid])
        store.execute("DELETE FROM entities WHERE uuid = ?", [uuid])
    moved = hash_embedder.embed(["volcano lava basalt"])[0]
    store.execute(  # numbered, as every vector write is
        f"UPDATE entity_embeddings SET vector = ?::FLOAT[{store.dim}], "
        "seq = nextval('vector_seq') WHERE uuid = ?",
        [moved.tolist(), changed],
    )
    engine.close()
    store.close()

    store, engine = reopen_with_graphs(db, hash_embedder)
    try:
        index = engine.indexes.vectors["entity"]
        assert index.uses_ann and index.graph._builder is None  # caught up, not rebuilt
        assert len(index.slots._ann) == len(index) == 121 and index.graph._ann_tombstones == 3
        for row in new:
            assert index.search(index.vector(row["uuid"]), 1)[0][0] == row["uuid"]
        assert index.search(moved, 1)[0] == (changed, pytest.approx(1.0, abs=1e-3))
        assert not set(gone) & set(index.uuids())
        old = hash_embedder.embed(["Note 0: tea note 0"])[0]
        assert not set(gone) & {u for u, _ in index.search(old, 20)}
    finally:
        engine.close()
        store.close()


def test_a_save_records_the_newest_vector_write_only_between_writes(db, hash_embedder, monkeypatch):
    """A save records the number of the newest vector write, read while no writer is
    between its commit and telling the engine: every write up to it is in the save, so the
    next open reads only later ones. While a writer holds the gate, the save records none
    (the next open reads every vector)."""
    store, _ = saved_graph_of_notes(db, hash_embedder)
    manifest = Path(f"{db}.search") / "entity.json"
    newest = sql.latest_vector_seq(store)
    assert newest > 0 and json.loads(manifest.read_text())["seq"] == newest
    store.close()

    store, engine = reopen_with_graphs(db, hash_embedder)
    add(engine, "entity", [entity("Late note", "coffee")])
    monkeypatch.setattr(saves_module, "SAVE_GATE_SECONDS", 0.05)
    taken, release = threading.Event(), threading.Event()

    def writer():
        with engine.indexes.publisher:
            taken.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    taken.wait(10)
    try:
        engine.indexes.save("entity")
        assert "seq" not in json.loads(manifest.read_text())
    finally:
        release.set()
        thread.join()
    engine.close()  # no writer now: numbered again, the late write included
    assert json.loads(manifest.read_text())["seq"] == sql.latest_vector_seq(store) > newest
    store.close()


def test_a_saved_graph_far_behind_the_store_is_rebuilt(db, hash_embedder, monkeypatch):
    monkeypatch.setattr(vector_graph, "TOMBSTONE_LIMIT", 10)
    store, _ = saved_graph_of_notes(db, hash_embedder)
    store.execute("DELETE FROM entity_embeddings WHERE uuid IN "
                  "(SELECT uuid FROM entities ORDER BY name LIMIT 60)")  # fmt: skip
    store.close()
    store, engine = reopen_with_graphs(db, hash_embedder)
    try:
        index = engine.indexes.vectors["entity"]
        assert len(index) == 60
        assert index.wait_ready(60) and index.uses_ann and index.graph._ann_tombstones == 0
        assert len(index.slots._ann) == 60
    finally:
        engine.close()
        store.close()
