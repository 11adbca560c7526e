"""Saves of the search indexes while the process runs: a save never holds a write up (its
files are written outside the index's lock, the writes made meanwhile served after it), an
index unchanged since its last save is not saved again, and the periodic saves of
``SVC_KNOWLEDGE_SEARCH_SAVE_SECONDS`` save what changed."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.index.vector.test_saves import clustered, open_index
from tests.search.helpers import add, entity, write_embeddings
from workbench.config import Settings
from workbench.fakes.embedder import HashEmbedder
from workbench.index.vector import saves as vector_saves
from workbench.index.vector.saves import GraphSaves
from workbench.store import Store

N = 300


def _slow_writes(monkeypatch) -> tuple[threading.Event, threading.Event]:
    """The vectors file of a save written, the save waits (``written`` set) until
    ``release`` is set: a write made then is not in the file."""
    written, release = threading.Event(), threading.Event()
    real = vector_saves.write_synced

    def write_synced(path, read, count, capacity=None):
        real(path, read, count, capacity)
        if path.name.endswith(".vectors.npy"):
            written.set()
            assert release.wait(30)

    monkeypatch.setattr(vector_saves, "write_synced", write_synced)
    return written, release


def test_a_write_during_a_save_is_not_held_up_and_is_served_after_it(store, tmp_path,
                                                                    monkeypatch):  # fmt: skip
    rows = [entity(f"e{i}") for i in range(N)]
    vectors = clustered(N, store.dim)
    from tests.search.helpers import insert

    insert(store, "entity", rows, vectors)
    index = open_index(store, tmp_path)
    assert index.uses_ann
    written, release = _slow_writes(monkeypatch)
    saving = threading.Thread(target=index.saves.save_graph, args=(tmp_path, "entity", None))
    saving.start()
    try:
        assert written.wait(30)
        # meanwhile: a vector replaced, a new memory, a deleted one, and a search
        changed, new = clustered(2, store.dim, seed=7)
        done = threading.Event()

        def write() -> None:
            index.add([rows[5]["uuid"], "new"], np.stack([changed, new]), ["main", "main"])
            index.remove([rows[9]["uuid"]])
            index.search(changed, 5)
            done.set()

        writer = threading.Thread(target=write)
        writer.start()
        assert done.wait(5), "a write waited for the save"
        assert saving.is_alive()  # still saving: the write did not wait for it
    finally:
        release.set()
        saving.join(30)
    assert index.slots._file is not None  # served from the saved file now
    for uuid, vector in [(rows[5]["uuid"], changed), ("new", new), (rows[6]["uuid"], vectors[6])]:
        assert np.allclose(index.vector(uuid), vector, atol=2e-3)
        assert index.search(vector, 1)[0][0] == uuid
    assert index.vector(rows[9]["uuid"]) is None
    # and the next open from that save (the store changed the same way) serves the same
    write_embeddings(store, "entity", [rows[5]["uuid"]], changed[None, :])
    reopened = open_index(store, tmp_path)
    assert np.allclose(reopened.vector(rows[5]["uuid"]), changed, atol=2e-3)
    assert reopened.search(changed, 1)[0][0] == rows[5]["uuid"]


def _saves(monkeypatch) -> list[str]:
    """The kinds whose graph is saved, one entry a save."""
    saved: list[str] = []
    real = GraphSaves.save_graph

    def save_graph(self, graph_dir, kind, seq=None, extra_files=None):
        saved.append(kind)
        return real(self, graph_dir, kind, seq, extra_files)

    monkeypatch.setattr(GraphSaves, "save_graph", save_graph)
    return saved


def _open(location, **options):
    from tests.search.helpers import T0
    from workbench.clock import ManualClock
    from workbench.metrics import Metrics
    from workbench.search.engine import SearchEngine

    store = Store.open(location, dim=8)
    engine = SearchEngine(store, HashEmbedder(dimensions=8), Metrics(), ManualClock(T0),
                          access_background=False, ann_threshold=50,
                          index_options={"background_build": False}, **options)  # fmt: skip
    return store, engine


def test_an_index_unchanged_since_its_save_is_not_saved_again(tmp_path, monkeypatch):
    saved = _saves(monkeypatch)
    location = str(tmp_path / "kb.duckdb")
    store, engine = _open(location)
    add(engine, "entity", [entity(f"Note {i}", f"tea note {i}") for i in range(80)])
    engine.close()
    store.close()
    assert saved == ["entity"]  # the only kind with a graph
    store, engine = _open(location)  # opened from that save, nothing written since
    engine.close()
    store.close()
    assert saved == ["entity"]
    store, engine = _open(location)
    add(engine, "entity", [entity("Pond", "koi")])
    engine.close()
    store.close()
    assert saved == ["entity", "entity"]
    store, engine = _open(location)  # a change without a new vector saves too
    engine.indexes.on_upsert("entity", [{"uuid": engine.indexes.rows["entity"].uuids()[0]}])
    engine.close()
    store.close()
    assert saved == ["entity"] * 3


def _write(engine, rows: list[dict]) -> None:
    """Write and tell the engine under the publish gate, as ingestion does (a save reads the
    newest vector write between two such writes)."""
    with engine.indexes.publisher:
        add(engine, "entity", rows)


def test_periodic_saves_save_what_changed_and_only_that(tmp_path, monkeypatch):
    saved = _saves(monkeypatch)
    location = str(tmp_path / "kb.duckdb")
    settings = Settings(search_save_seconds=0.2)
    store, engine = _open(location, settings=settings)
    try:
        _write(engine, [entity(f"Note {i}", f"tea note {i}") for i in range(80)])
        manifest = engine.indexes.saves.folder / "entity.json"
        deadline = time.monotonic() + 10
        while not manifest.is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert manifest.is_file() and saved == ["entity"]  # saved while running
        time.sleep(0.6)
        assert saved == ["entity"]  # unchanged since: not again
        _write(engine, [entity("Pond", "koi")])
        deadline = time.monotonic() + 10
        while len(saved) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.6)
        assert saved == ["entity", "entity"]
    finally:
        engine.close()
        store.close()
    assert saved == ["entity", "entity"]  # the stop found nothing new to save


@pytest.mark.parametrize("seconds", [-1.0])
def test_a_negative_save_interval_is_refused(seconds):
    with pytest.raises(ValueError):
        Settings(search_save_seconds=seconds)
