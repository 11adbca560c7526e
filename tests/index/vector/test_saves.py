"""The vectors saved beside a graph: served memory-mapped after a restart, caught up with the
store, never written back, and a save cut short leaves the previous one whole."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.search.helpers import entity, insert, write_embeddings
from workbench.index.vector import graph as vector_graph
from workbench.index.vector import saves as vector_saves
from workbench.index.vector.index import load_index
from workbench.store import search as search_sql
from workbench.store.search import latest_vector_seq

N = 300


def clustered(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((n, 12)) @ rng.standard_normal((12, dim))
    rows += 0.3 * rng.standard_normal((n, dim))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def open_index(store, folder):
    return load_index(store, "entity", ann_threshold=100, graph_dir=folder, background_build=False)


def manifest(folder) -> dict:
    return json.loads((folder / "entity.json").read_text())


@pytest.fixture(params=["numbered", "unnumbered"])
def saved(store, tmp_path, request):
    """N entities with vectors in the store; their index's graph and vectors saved, with the
    number of the newest vector write it holds (as the engine saves) or without (older saves,
    or a save that could not read it: caught up from every vector)."""
    rows = [entity(f"e{i}") for i in range(N)]
    vectors = clustered(N, store.dim)
    insert(store, "entity", rows, vectors)
    index = open_index(store, tmp_path)
    seq = latest_vector_seq(store) if request.param == "numbered" else None
    assert index.uses_ann and index.saves.save_graph(tmp_path, "entity", seq)
    assert manifest(tmp_path).get("seq") == seq
    return rows, vectors, index, tmp_path


def reads_of(monkeypatch) -> list[list[str]]:
    """The uuids each read of some vectors asked for; a read of every vector fails."""
    asked: list[list[str]] = []
    real = search_sql.vectors_of

    def vectors_of(store, kind, uuids):
        asked.append(list(uuids))
        return real(store, kind, uuids)

    def load_vectors(store, kind):
        raise AssertionError("every vector was read")

    monkeypatch.setattr(search_sql, "vectors_of", vectors_of)
    monkeypatch.setattr(search_sql, "load_vectors", load_vectors)
    return asked


def test_a_numbered_save_reads_only_the_vectors_written_after_it(store, tmp_path, monkeypatch):
    rows = [entity(f"e{i}") for i in range(N)]
    vectors = clustered(N, store.dim)
    insert(store, "entity", rows, vectors)
    first = open_index(store, tmp_path)
    queries = clustered(20, store.dim, seed=1)
    before = [first.search(q, 10) for q in queries]
    assert first.saves.save_graph(tmp_path, "entity", latest_vector_seq(store))

    monkeypatch.setattr(vector_saves, "SPOT_CHECKS", 5)
    asked = reads_of(monkeypatch)
    again = open_index(store, tmp_path)
    # nothing written since: only the five saved vectors checked against the store's
    assert [len(a) for a in asked] == [5] and isinstance(again.slots._mat, np.memmap)
    assert [again.search(q, 10) for q in queries] == before

    moved = clustered(1, store.dim, seed=7)[0]
    write_embeddings(store, "entity", [rows[5]["uuid"]], moved[None, :])
    late = entity("late")
    insert(store, "entity", [late], clustered(1, store.dim, seed=8))
    store.execute("DELETE FROM entities WHERE uuid = ?", [rows[9]["uuid"]])
    asked.clear()
    index = open_index(store, tmp_path)
    assert len(asked) == 1 and len(asked[0]) == 2 + 5
    assert asked[0][:2] in ([rows[5]["uuid"], late["uuid"]], [late["uuid"], rows[5]["uuid"]])
    assert (
        index.uses_ann and index.graph._builder is None and isinstance(index.slots._mat, np.memmap)
    )
    assert index.search(moved, 1)[0] == (rows[5]["uuid"], pytest.approx(1.0, abs=2e-3))
    assert index.search(clustered(1, store.dim, seed=8)[0], 1)[0][0] == late["uuid"]
    assert rows[9]["uuid"] not in index and len(index) == N
    assert index.graph._ann_tombstones == 2  # the moved vector's and the deleted one's entries
    np.testing.assert_allclose(index.vector(rows[6]["uuid"]), vectors[6], atol=1e-3)


def test_a_numbered_save_far_behind_the_store_reads_every_vector(store, tmp_path, monkeypatch):
    monkeypatch.setattr(vector_graph, "TOMBSTONE_LIMIT", 10)
    rows = [entity(f"e{i}") for i in range(N)]
    insert(store, "entity", rows, clustered(N, store.dim))
    assert open_index(store, tmp_path).saves.save_graph(
        tmp_path, "entity", latest_vector_seq(store)
    )
    moved = clustered(N, store.dim, seed=3)  # every vector written again
    write_embeddings(store, "entity", [r["uuid"] for r in rows], moved)
    index = open_index(store, tmp_path)
    assert index.uses_ann and not isinstance(index.slots._mat, np.memmap)  # a new graph
    assert index.search(moved[77], 1)[0][0] == rows[77]["uuid"]


def test_the_saved_vectors_are_served_mapped_with_the_same_results(store, saved):
    rows, vectors, first, folder = saved
    queries = clustered(20, store.dim, seed=1)
    before = [first.search(q, 10) for q in queries]
    assert isinstance(first.slots._mat, np.memmap)  # the save is served at once, too
    files = manifest(folder)["files"]
    on_disk = np.load(folder / files["vectors"])
    assert on_disk.dtype == np.float16 and on_disk.shape[0] >= N + 1024  # spare rows

    index = open_index(store, folder)
    assert index.uses_ann and index.graph._builder is None
    assert isinstance(index.slots._mat, np.memmap)
    assert [index.search(q, 10) for q in queries] == before
    for i in (0, 123, N - 1):
        np.testing.assert_allclose(index.vector(rows[i]["uuid"]), vectors[i], atol=1e-3)


def test_vectors_changed_after_the_save_come_from_the_store_and_the_file_is_untouched(store, saved):
    rows, vectors, _, folder = saved
    files = manifest(folder)["files"]
    file_before = np.load(folder / files["vectors"]).copy()
    moved = clustered(1, store.dim, seed=7)[0]
    write_embeddings(store, "entity", [rows[5]["uuid"]], moved[None, :])
    new = entity("late")
    insert(store, "entity", [new], clustered(1, store.dim, seed=8))
    store.execute("DELETE FROM entities WHERE uuid = ?", [rows[9]["uuid"]])

    index = open_index(store, folder)
    assert isinstance(index.slots._mat, np.memmap)
    assert index.search(moved, 1)[0] == (rows[5]["uuid"], pytest.approx(1.0, abs=2e-3))
    assert new["uuid"] in index and rows[9]["uuid"] not in index
    assert index.search(clustered(1, store.dim, seed=8)[0], 1)[0][0] == new["uuid"]
    more = [entity(f"more{i}") for i in range(50)]
    index.add([r["uuid"] for r in more], clustered(50, store.dim, seed=9), ["g"] * 50)
    assert isinstance(index.slots._mat, np.memmap)  # the spare rows took them
    assert index.search(clustered(50, store.dim, seed=9)[17], 1)[0][0] == more[17]["uuid"]
    np.testing.assert_array_equal(np.load(folder / files["vectors"]), file_before)


def test_a_save_cut_short_before_its_manifest_leaves_the_previous_one_whole(
    store, saved, monkeypatch
):
    rows, vectors, first, folder = saved
    before = manifest(folder)
    moved = clustered(1, store.dim, seed=11)[0]
    write_embeddings(store, "entity", [rows[3]["uuid"]], moved[None, :])
    first.add([rows[3]["uuid"]], moved[None, :], ["main"])

    def crash(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(vector_saves.json, "dumps", crash)
    with pytest.raises(OSError):
        first.saves.save_graph(folder, "entity")
    monkeypatch.undo()
    assert manifest(folder) == before
    assert all((folder / name).is_file() for name in before["files"].values())

    index = open_index(store, folder)  # the previous save, caught up with the store
    assert index.uses_ann and isinstance(index.slots._mat, np.memmap)
    assert index.search(moved, 1)[0] == (rows[3]["uuid"], pytest.approx(1.0, abs=2e-3))
    np.testing.assert_allclose(index.vector(rows[4]["uuid"]), vectors[4], atol=1e-3)


def test_a_damaged_vectors_file_is_not_used(store, saved):
    rows, vectors, _, folder = saved
    path = folder / manifest(folder)["files"]["vectors"]
    np.save(path, np.zeros((10, store.dim), dtype=np.float16))  # too few rows
    index = open_index(store, folder)
    assert index.uses_ann and not isinstance(index.slots._mat, np.memmap)
    np.testing.assert_allclose(index.vector(rows[200]["uuid"]), vectors[200], atol=1e-3)
    path.write_bytes(b"not an array")
    index = open_index(store, folder)
    assert index.uses_ann and not isinstance(index.slots._mat, np.memmap)
    assert index.search(vectors[42], 1)[0][0] == rows[42]["uuid"]


def test_a_save_in_the_older_layout_still_opens(store, saved):
    rows, vectors, _, folder = saved
    old = manifest(folder)
    files = old.pop("files")
    (folder / files["graph"]).rename(folder / "entity.usearch")
    (folder / files["prints"]).rename(folder / "entity.prints.npy")
    (folder / "entity.json").write_text(json.dumps(old))
    index = open_index(store, folder)
    assert index.uses_ann and index.graph._builder is None  # the graph reused
    assert not isinstance(index.slots._mat, np.memmap)  # that save had no vectors
    assert index.search(vectors[7], 1)[0][0] == rows[7]["uuid"]
    assert index.saves.save_graph(folder, "entity")  # the next save takes the new layout
    assert not (folder / "entity.usearch").exists()
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        ["entity.json", *manifest(folder)["files"].values()]
    )


@pytest.mark.parametrize("how", ["unnumbered", "went back"])
def test_a_numbered_save_that_does_not_match_its_store_is_not_trusted(store, tmp_path, how):
    """Vectors changed without a number (by hand, against the rule), or a database older than
    the save (restored from a copy): the open reads every vector, not the saved ones."""
    rows = [entity(f"e{i}") for i in range(N)]
    insert(store, "entity", rows, clustered(N, store.dim))
    seq = latest_vector_seq(store)
    if how == "went back":
        seq += 1000
    assert open_index(store, tmp_path).saves.save_graph(tmp_path, "entity", seq)
    moved = clustered(N, store.dim, seed=5)
    if how == "unnumbered":
        for row, vector in zip(rows[:40], moved[:40]):
            store.execute(
                f"UPDATE entity_embeddings SET vector = ?::FLOAT[{store.dim}] WHERE uuid = ?",
                [vector.tolist(), row["uuid"]],
            )
    else:
        write_embeddings(store, "entity", [r["uuid"] for r in rows[:40]], moved[:40])
    index = open_index(store, tmp_path)
    for i in (0, 17, 39):
        assert index.search(moved[i], 1)[0] == (rows[i]["uuid"], pytest.approx(1.0, abs=2e-3))


def mapped_kb(path) -> int:
    """Resident kB of this process's mappings of ``path`` (Linux's /proc/self/smaps)."""
    total, inside = 0, False
    for line in open("/proc/self/smaps"):
        head = line.split()
        if head and "-" in head[0] and not head[0].endswith(":"):
            inside = len(head) >= 6 and head[-1] == str(path)
        elif inside and line.startswith("Rss:"):
            total += int(head[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux's smaps")
def test_searches_read_the_saved_vectors_without_mapping_their_pages(store, tmp_path):
    """Read through the mapping, each candidate's row mapped the cached pages around it too,
    and after a few hundred searches most of a warm file was resident in the process."""
    n = 3000
    rows = [entity(f"e{i}") for i in range(n)]
    vectors = clustered(n, store.dim)
    insert(store, "entity", rows, vectors)
    assert open_index(store, tmp_path).saves.save_graph(
        tmp_path, "entity", latest_vector_seq(store)
    )
    index = open_index(store, tmp_path)
    path = (tmp_path / manifest(tmp_path)["files"]["vectors"]).resolve()
    path.read_bytes()  # a warm page cache, as after the save
    assert isinstance(index.slots._mat, np.memmap)
    queries = clustered(200, store.dim, seed=4)
    for q in queries:
        index.search(q, 10)
    for i in range(0, n, 97):
        np.testing.assert_allclose(index.vector(rows[i]["uuid"]), vectors[i], atol=1e-3)
    where = {r["uuid"]: i for i, r in enumerate(rows)}
    order = [where[u] for u in index.slots._uuids[:n]]
    every = index.slots._rows(np.arange(n))  # as a graph build or a save reads them: in blocks
    np.testing.assert_allclose(every, vectors[order], atol=1e-3)
    assert mapped_kb(path) == 0
    index.add([rows[1]["uuid"]], queries[:1], ["main"])  # written: a private page, read there
    assert index.search(queries[0], 1)[0] == (rows[1]["uuid"], pytest.approx(1.0, abs=2e-3))
    assert 0 < mapped_kb(path) <= 8
    np.testing.assert_allclose(
        index.slots._rows(np.arange(n))[order.index(1)], queries[0], atol=1e-3
    )
    assert index.saves.save_graph(tmp_path, "entity", latest_vector_seq(store))  # the new row saved
    again = load_index(store, "entity", ann_threshold=100, graph_dir=tmp_path)
    np.testing.assert_allclose(again.vector(rows[2]["uuid"]), vectors[2], atol=1e-3)
    np.testing.assert_allclose(index.vector(rows[1]["uuid"]), queries[0], atol=1e-3)


# --- a save is checked before it is opened (issue 55, item 12) ------------------------------
def rejected(metrics, part: str) -> float:
    return (
        metrics.registry.get_sample_value(
            "knowledge_search_saves_rejected_total", {"kind": "entity", "part": part}
        )
        or 0.0
    )


@pytest.mark.parametrize("part", ["graph", "prints", "vectors", "manifest"])
def test_a_tampered_save_is_counted_removed_and_rebuilt_not_served(store, tmp_path, part):
    from workbench.index.saves import IndexSaves
    from workbench.metrics import Metrics

    rows = [entity(f"e{i}") for i in range(N)]
    vectors = clustered(N, store.dim)
    insert(store, "entity", rows, vectors)
    first = open_index(store, tmp_path)
    assert first.saves.save_graph(tmp_path, "entity", latest_vector_seq(store))
    metrics = Metrics()
    saves = IndexSaves(store, tmp_path, metrics=metrics)
    assert saves.verify("entity") and rejected(metrics, part) == 0  # as saved: used
    files = manifest(tmp_path)["files"]
    if part == "manifest":  # a save without checksums (edited, or from before them)
        edited = {k: v for k, v in manifest(tmp_path).items() if k != "sha256"}
        (tmp_path / "entity.json").write_text(json.dumps(edited))
    else:
        target = tmp_path / files[part]
        data = bytearray(target.read_bytes())
        data[-8:] = bytes(8) if data[-8:] != bytes(8) else b"\xff" * 8
        target.write_bytes(bytes(data))
    assert not saves.verify("entity")
    assert rejected(metrics, part) == 1
    assert not (tmp_path / "entity.json").exists()  # removed: the next open builds anew
    assert not list(tmp_path.glob("entity.*.usearch"))
    again = open_index(store, tmp_path)
    query = clustered(1, store.dim, seed=3)[0]
    assert again.search(query, 5) == first.search(query, 5)


def test_a_tampered_keyword_save_is_counted_and_removed(store, tmp_path):
    from workbench.index.keyword.bm25 import KeywordIndex
    from workbench.index.saves import IndexSaves
    from workbench.metrics import Metrics

    index = KeywordIndex()
    index.add(["u1", "u2"], ["alpha beta", "gamma delta"], ["g", "g"])
    path = tmp_path / "entity.keywords.npz"
    index.save(path)
    metrics = Metrics()
    saves = IndexSaves(store, tmp_path, metrics=metrics)
    assert saves.verify("entity")
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    assert not saves.verify("entity") and rejected(metrics, "keywords") == 1
    assert not path.exists()
