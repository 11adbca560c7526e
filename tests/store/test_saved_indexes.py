"""Search indexes saved in the database itself: a replica of a shared store with no local
files starts from the newest save and catches up with what was written after it."""

from __future__ import annotations

import json
import time

import pytest

from tests.pg import wait_for
from tests.search.helpers import T0, add, entity
from workbench.clock import ManualClock
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics
from workbench.search.engine import SearchEngine
from workbench.store import Store, saved_indexes


def test_a_save_goes_in_and_comes_out_whole_the_newest_replacing_the_older(tmp_path,
                                                                          monkeypatch):  # fmt: skip
    monkeypatch.setattr(saved_indexes, "PART_BYTES", 5)  # files of several parts
    store = Store.open(":memory:", dim=8)
    try:
        source = tmp_path / "source"
        source.mkdir()
        for seq, content in [(7, b"first graph"), (9, b"second, longer graph")]:
            (source / "entity.x.usearch").write_bytes(content)
            (source / "entity.x.prints.npy").write_bytes(b"")
            (source / "entity.keywords.npz").write_bytes(b"words")
            manifest = {"files": {"graph": "entity.x.usearch", "prints": "entity.x.prints.npy"},
                        "seq": seq}  # fmt: skip
            (source / "entity.json").write_text(json.dumps(manifest))
            assert saved_indexes.publish(store, source, "entity")
        assert saved_indexes.newest(store, ["entity", "fact"]) == {"entity": 9}
        target = tmp_path / "target"
        assert saved_indexes.fetch(store, target, "entity")
        assert not saved_indexes.fetch(store, target, "fact")  # none saved
        assert (target / "entity.x.usearch").read_bytes() == b"second, longer graph"
        assert (target / "entity.x.prints.npy").read_bytes() == b""
        assert (target / "entity.keywords.npz").read_bytes() == b"words"
        assert saved_indexes.save_seq(target, "entity") == 9
        # a folder without a complete save stores nothing
        (source / "entity.x.usearch").unlink()
        assert not saved_indexes.publish(store, source, "entity")
    finally:
        store.close()


def _engine(store: Store) -> SearchEngine:
    return SearchEngine(store, HashEmbedder(dimensions=8), Metrics(), ManualClock(T0),
                        access_background=False, ann_threshold=50)  # fmt: skip


def found(index, source: SearchEngine, uuid: str) -> bool:
    """Whether ``index`` finds the memory ``uuid`` by its own vector (8 dimensions: other
    memories may be as close)."""
    hits = dict(index.search(source.indexes.vectors["entity"].vector(uuid), 10))
    return hits.get(uuid, 0.0) == pytest.approx(1.0, abs=1e-3)


def test_a_new_replica_starts_from_the_saved_graph_and_catches_up(pg_location):
    """Replica A builds its graph (saved into the database at once), then writes more; B,
    with no local files, loads A's save instead of building, catches up with what A wrote
    after the save, then follows the change log for what A writes next."""
    a, b = Store.open(pg_location, dim=8), Store.open(pg_location, dim=8)
    engine_a = engine_b = None
    try:
        engine_a = _engine(a)
        notes = add(engine_a, "entity", [entity(f"Note {i}", f"tea note {i}") for i in range(120)])
        engine_a.indexes.rebuild()
        assert engine_a.indexes.vectors["entity"].wait_ready(60)
        assert wait_for(lambda: "entity" in saved_indexes.newest(a, ["entity"]), 30)
        later = add(engine_a, "entity", [entity(f"Pond {i}", f"koi pond {i}") for i in range(3)])

        engine_b = _engine(b)
        index = engine_b.indexes.vectors["entity"]
        assert index.uses_ann and index.graph._builder is None  # loaded, not rebuilt
        assert len(index) == 123
        for row in [notes[0], *later]:
            assert found(index, engine_a, row["uuid"])

        last = add(engine_a, "entity", [entity("Lava field", "basalt")])[0]
        engine_a.indexes.replica_sync.catch_up()
        engine_b.indexes.replica_sync.catch_up()
        assert found(engine_b.indexes.vectors["entity"], engine_a, last["uuid"])
        folder = engine_b.indexes.saves.folder
        assert folder is not None and folder.is_dir()
    finally:
        for engine in (engine_b, engine_a):
            if engine is not None:
                engine.close()
        a.close()
        b.close()
    assert not folder.exists()  # a private folder: the saves live in the database


@pytest.mark.parametrize("kinds", [["entity", "fact"]])
def test_a_replica_without_any_save_builds_as_before(pg_location, kinds):
    store = Store.open(pg_location, dim=8)
    try:
        assert saved_indexes.newest(store, kinds) == {}
        engine = _engine(store)
        add(engine, "entity", [entity(f"Note {i}") for i in range(5)])
        assert (
            len(engine.indexes.vectors["entity"]) == 5
            and not engine.indexes.vectors["entity"].uses_ann
        )
        engine.close()
    finally:
        store.close()


def _write_save(folder, seq: int, content: bytes, save: str = "x") -> None:
    """A save of the entity graph in ``folder``: its files and manifest."""
    folder.mkdir(exist_ok=True)
    for path in folder.glob("entity.*"):
        path.unlink()
    (folder / f"entity.{save}.usearch").write_bytes(content)
    (folder / f"entity.{save}.prints.npy").write_bytes(content[::-1])
    files = {"graph": f"entity.{save}.usearch", "prints": f"entity.{save}.prints.npy"}
    (folder / "entity.json").write_text(json.dumps({"files": files, "seq": seq}))


def test_a_save_replaced_during_a_fetch_still_comes_out_whole(tmp_path, monkeypatch):
    """The parts are read one at a time; a newer save stored meanwhile (the older one's parts
    deleted) makes the fetch start again from it: the folder holds one whole save, the newer,
    and nothing of the older."""
    monkeypatch.setattr(saved_indexes, "PART_BYTES", 4)
    store = Store.open(":memory:", dim=8)
    try:
        old, new = b"old graph, several parts long", b"new graph, longer than the old one"
        _write_save(tmp_path / "a", 7, old, "a")
        _write_save(tmp_path / "b", 9, new, "b")
        assert saved_indexes.publish(store, tmp_path / "a", "entity")
        real, reads = saved_indexes._part, []

        def part(store_, save_id, name, number):
            reads.append(name)
            if len(reads) == 2:  # the older save is replaced after its first part was read
                assert saved_indexes.publish(store, tmp_path / "b", "entity")
            return real(store_, save_id, name, number)

        monkeypatch.setattr(saved_indexes, "_part", part)
        target = tmp_path / "target"
        assert saved_indexes.fetch(store, target, "entity")
        assert sorted(p.name for p in target.iterdir()) == [
            "entity.b.prints.npy", "entity.b.usearch", "entity.json"]  # fmt: skip
        assert (target / "entity.b.usearch").read_bytes() == new
        assert (target / "entity.b.prints.npy").read_bytes() == new[::-1]
        assert saved_indexes.save_seq(target, "entity") == 9
        assert len(reads) > 2 * len(new) // 4  # part by part, started again
    finally:
        store.close()


def test_a_save_holding_older_vectors_does_not_replace_a_newer_one(tmp_path):
    store = Store.open(":memory:", dim=8)
    try:
        _write_save(tmp_path / "new", 9, b"newer")
        _write_save(tmp_path / "old", 7, b"older")
        assert saved_indexes.publish(store, tmp_path / "new", "entity")
        assert not saved_indexes.publish(store, tmp_path / "old", "entity")
        assert saved_indexes.newest(store, ["entity"]) == {"entity": 9}
        assert saved_indexes.publish(store, tmp_path / "new", "entity")  # the same: stored
    finally:
        store.close()


def test_a_replica_stopping_with_nothing_new_stores_nothing(pg_location, monkeypatch):
    """A's graph build is stored; A's stop, and the stop of B started from that save, store
    nothing more (nothing changed since); C, which wrote, stores its save at its stop."""
    published: list[int | None] = []
    real = saved_indexes.publish

    def publish(store, folder, kind):
        published.append(saved_indexes.save_seq(folder, kind))
        return real(store, folder, kind)

    monkeypatch.setattr(saved_indexes, "publish", publish)
    stores = [Store.open(pg_location, dim=8) for _ in range(3)]
    try:
        engine = _engine(stores[0])
        add(engine, "entity", [entity(f"Note {i}", f"tea note {i}") for i in range(120)])
        engine.indexes.rebuild()
        assert engine.indexes.vectors["entity"].wait_ready(60)
        assert wait_for(lambda: bool(published), 30)
        time.sleep(0.5)
        built = len(published)  # (a build at the threshold, then the rebuild's)
        engine.close()
        assert len(published) == built
        engine = _engine(stores[1])
        assert engine.indexes.vectors["entity"].uses_ann  # from the save
        engine.close()
        assert len(published) == built
        engine = _engine(stores[2])
        add(engine, "entity", [entity("Pond", "koi")])
        engine.close()
        assert len(published) == built + 1 and published[-1] > published[-2]
        assert saved_indexes.newest(stores[0], ["entity"]) == {"entity": published[-1]}
    finally:
        for store in stores:
            store.close()


def test_a_periodic_save_of_vectors_another_replica_stored_stores_nothing(pg_location,
                                                                          monkeypatch):  # fmt: skip
    """B learns of A's writes through the change log; the database already holds A's save of
    those vectors: B's periodic save stores nothing, and stores once B's own write moved on."""
    published: list[str] = []
    real = saved_indexes.publish

    def publish(store, folder, kind):
        published.append(kind)
        return real(store, folder, kind)

    monkeypatch.setattr(saved_indexes, "publish", publish)
    a, b = Store.open(pg_location, dim=8), Store.open(pg_location, dim=8)
    engine_a = engine_b = None
    try:
        engine_a = _engine(a)
        add(engine_a, "entity", [entity(f"Note {i}", f"tea note {i}") for i in range(120)])
        engine_a.indexes.rebuild()
        assert engine_a.indexes.vectors["entity"].wait_ready(60)
        engine_b = _engine(b)
        assert engine_b.indexes.vectors["entity"].wait_ready(60)
        with engine_a.indexes.publisher:
            add(engine_a, "entity", [entity("Pond", "koi")])
        engine_a.indexes.save("entity", periodic=True)
        stored = len(published)
        assert published[-1] == "entity"
        engine_b.indexes.replica_sync.catch_up()
        assert len(engine_b.indexes.vectors["entity"]) == 121
        engine_b.indexes.save("entity", periodic=True)
        assert len(published) == stored  # A's save holds these vectors
        with engine_b.indexes.publisher:
            add(engine_b, "entity", [entity("Lava", "basalt")])
        engine_b.indexes.save("entity", periodic=True)
        assert len(published) == stored + 1
    finally:
        for engine in (engine_b, engine_a):
            if engine is not None:
                engine.close()
        a.close()
        b.close()
