"""VectorIndex on synthetic vectors: exact correctness, filters, upserts, deletes, ANN recall."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tests.search.helpers import write_embeddings
from workbench.errors import DimensionMismatch
from workbench.index.vector import graph as vector_graph
from workbench.index.vector import slots as vector_slots
from workbench.index.vector.index import VectorIndex, load_index

DIM = 32


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def clustered(n: int, dim: int, seed: int = 0) -> np.ndarray:
    """Vectors on a low-rank manifold plus noise: neighbourhoods like sentence embeddings."""
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((16, dim))
    return unit(rng.standard_normal((n, 16)) @ basis + 0.3 * rng.standard_normal((n, dim)))


def brute(vectors, uuids, query, k, keep=None):
    scores = unit(vectors) @ (query / np.linalg.norm(query))
    order = [i for i in np.argsort(-scores) if keep is None or keep(i)]
    return [(uuids[i], float(scores[i])) for i in order[:k]]


def same(got, want) -> bool:
    return [u for u, _ in got] == [u for u, _ in want] and np.allclose(
        [s for _, s in got], [s for _, s in want], atol=1e-5
    )


@pytest.fixture
def data():
    vectors = clustered(500, DIM)
    uuids = [f"u{i}" for i in range(len(vectors))]
    groups = ["a" if i % 5 else "b" for i in range(len(vectors))]  # b: 20%
    return vectors, uuids, groups


def test_exact_search_matches_brute_force(data):
    vectors, uuids, groups = data
    index = VectorIndex(DIM)
    index.add(uuids, vectors, groups)
    query = clustered(1, DIM, seed=9)[0]
    assert same(index.search(query, 10), brute(vectors, uuids, query, 10))
    assert len(index) == 500 and not index.uses_ann


def test_group_filter_applies_before_top_k(data):
    vectors, uuids, groups = data
    index = VectorIndex(DIM)
    index.add(uuids, vectors, groups)
    query = vectors[1]  # a member of group "a"
    got = index.search(query, 10, group_ids=["b"])
    assert len(got) == 10
    assert all(groups[int(u[1:])] == "b" for u, _ in got)
    assert same(got, brute(vectors, uuids, query, 10, keep=lambda i: groups[i] == "b"))
    assert index.search(query, 5, group_ids=["nope"]) == []


def test_allowed_set_and_predicate(data):
    vectors, uuids, groups = data
    index = VectorIndex(DIM)
    index.add(uuids, vectors, groups)
    allowed = {"u3", "u77", "u400", "missing"}
    got = index.search(vectors[0], 10, allowed=allowed)
    assert {u for u, _ in got} == {"u3", "u77", "u400"}
    odd = index.search(vectors[0], 10, allowed=lambda u: int(u[1:]) % 2 == 1)
    assert len(odd) == 10 and all(int(u[1:]) % 2 for u, _ in odd)


def test_upsert_replaces_vector_and_group(data):
    vectors, uuids, groups = data
    index = VectorIndex(DIM)
    index.add(uuids, vectors, groups)
    index.add(["u7"], vectors[42:43], ["c"])
    assert len(index) == 500
    hits = index.search(vectors[42], 2)
    assert {u for u, _ in hits} == {"u7", "u42"}
    assert same(index.search(vectors[42], 5, group_ids=["c"]), [("u7", 1.0)])


def test_remove_forgets_and_reuses_slots(data):
    vectors, uuids, groups = data
    index = VectorIndex(DIM)
    index.add(uuids, vectors, groups)
    index.remove(["u0", "u1", "unknown"])
    assert len(index) == 498 and "u0" not in index
    assert all(u not in ("u0", "u1") for u, _ in index.search(vectors[0], 20))
    index.add(["new"], vectors[0:1], ["a"])
    assert index.search(vectors[0], 1)[0][0] == "new"
    sims = index.similarity(vectors[0], ["new", "u0"])
    assert sims[0] == pytest.approx(1.0) and np.isnan(sims[1])


def test_dimension_mismatch_is_reported():
    index = VectorIndex(DIM)
    with pytest.raises(DimensionMismatch, match="32-dimensional"):
        index.add(["x"], np.ones((1, 8), dtype=np.float32), ["g"])


def test_empty_index_returns_nothing():
    index = VectorIndex(DIM)
    assert index.search(np.ones(DIM), 5) == []
    assert len(index) == 0


def recall(index, vectors, uuids, queries, k=10, groups=None, keep=None):
    total = 0.0
    for q in queries:
        want = {u for u, _ in brute(vectors, uuids, q, k, keep)}
        got = {u for u, _ in index.search(q, k, group_ids=groups)}
        total += len(want & got) / k
    return total / len(queries)


def test_ann_recall_against_exact_is_at_least_095():
    n = 6000
    vectors = clustered(n, 64, seed=1)
    uuids = [f"u{i}" for i in range(n)]
    groups = ["a" if i % 10 else "b" for i in range(n)]  # b: 10%
    index = VectorIndex(64, ann_threshold=1000, exact_subset_limit=100)
    index.add(uuids, vectors, groups)
    assert index.wait_ready(60) and index.uses_ann
    queries = clustered(40, 64, seed=2)
    assert recall(index, vectors, uuids, queries) >= 0.95
    keep_b = lambda i: groups[i] == "b"  # noqa: E731 - filtered ANN (oversampling)
    assert recall(index, vectors, uuids, queries[:20], groups=["b"], keep=keep_b) >= 0.95
    hits = index.search(queries[0], 10)
    exact = dict(brute(vectors, uuids, queries[0], n))
    for uuid, score in hits:  # the cosine of the float16 vectors, not the int8 graph's
        assert score == pytest.approx(exact[uuid], abs=1e-3)
    assert index.slots._mat.dtype == np.float16  # under the graph: half the memory


def test_the_search_breadth_grows_with_the_square_root_of_the_size():
    """A fixed ef lost recall as the graph grew (0.991 at 100k, 0.908 at 1M with ef 200)."""
    index = VectorIndex(8, ef_search=200, ef_reference_size=100_000)
    assert [index.searches.ef_for(n) for n in (0, 50_000, 100_000, 400_000, 1_000_000)] == [
        200,
        200,
        200,
        400,
        633,
    ]
    n = 6000
    vectors = clustered(n, 64, seed=3)
    small = VectorIndex(64, ann_threshold=1000, ef_search=50, ef_reference_size=375)
    small.add([f"u{i}" for i in range(n)], vectors, ["g"] * n)
    assert small.wait_ready(60) and small.uses_ann
    small.search(vectors[0], 10)  # asks the graph for 100 candidates
    assert small.slots._ann.expansion_search == 200  # 50 x sqrt(6000 / 375), not 100


def test_ann_stays_consistent_after_deletes_and_upserts():
    n = 3000
    vectors = clustered(n, DIM, seed=3)
    uuids = [f"u{i}" for i in range(n)]
    index = VectorIndex(DIM, ann_threshold=1000)
    index.add(uuids, vectors, ["g"] * n)  # starts a background build ...
    gone = [f"u{i}" for i in range(0, n, 3)]
    index.remove(gone)  # ... these changes land during (or after) it and are replayed
    index.add(["u1"], vectors[2:3], ["g"])
    assert index.wait_ready(60) and index.uses_ann and len(index) == n - len(gone)
    assert len(index.slots._ann) == len(index)
    seen = {u for q in vectors[:50] for u, _ in index.search(q, 10)}
    assert not seen & set(gone)
    assert index.search(vectors[2], 2)[0][1] == pytest.approx(1.0, abs=1e-3)  # float16
    index.remove([u for u in uuids if u not in gone][:1600])  # small again: back to exact
    assert not index.uses_ann and index.slots._mat.dtype == np.float32  # for BLAS, exact search


def test_a_build_reads_its_vectors_as_it_goes_and_replays_what_changed_meanwhile(monkeypatch):
    """The build reads each chunk's vectors when it adds them (no copy of them all first):
    memories removed, moved or added after it began are right in the graph it ends with."""
    monkeypatch.setattr(vector_graph, "BUILD_CHUNK", 256)
    n = 3000
    vectors = clustered(n, DIM, seed=12)
    uuids = [f"u{i}" for i in range(n)]
    index = VectorIndex(DIM, ann_threshold=1000)
    gone = uuids[::3]
    moved = clustered(1, DIM, seed=13)
    changed = []
    real_rows = index.slots._rows

    def rows(slots):  # the builder's first read: change the index first (the lock is held)
        if threading.current_thread().name == "workbench-ann-build" and not changed:
            changed.append(True)
            index.remove(gone)
            index.add(["u1", "new"], np.vstack([moved, vectors[:1]]), ["g", "g"])
        return real_rows(slots)

    monkeypatch.setattr(index.slots, "_rows", rows)
    index.add(uuids, vectors, ["g"] * n)
    assert index.wait_ready(60) and index.uses_ann and changed
    assert len(index.slots._ann) == len(index) == n - len(gone) + 1
    seen = {u for q in vectors[:60] for u, _ in index.search(q, 10)}
    assert seen and not seen & set(gone)
    assert index.search(moved[0], 1)[0] == ("u1", pytest.approx(1.0, abs=1e-3))
    assert index.search(vectors[0], 1)[0] == ("new", pytest.approx(1.0, abs=1e-3))  # u0 gone


def test_a_bulk_add_grows_the_matrix_once(monkeypatch):
    """Grown by doubling, a load of a million vectors copied the matrix ten times and held
    the last two copies at once."""
    grown = []
    real_grow = vector_slots.grow

    def grow(array, capacity, fill=0):
        if array.ndim == 2:
            grown.append(capacity)
        return real_grow(array, capacity, fill)

    monkeypatch.setattr(vector_slots, "grow", grow)
    index = VectorIndex(DIM, ann_threshold=100_000)
    vectors = clustered(9000, DIM, seed=14)
    index.add([f"u{i}" for i in range(9000)], vectors, ["g"] * 9000)
    assert grown == [9000 + 9000 // 8]
    index.remove(["u5", "u6"])
    index.add(["a", "b", "c"], vectors[:3], ["g"] * 3)  # two freed slots and the spare room
    assert grown == [9000 + 9000 // 8] and len(index) == 9001
    assert index.search(vectors[7], 1)[0] == ("u7", pytest.approx(1.0, abs=1e-5))


def test_exact_search_serves_while_the_graph_is_built():
    vectors = clustered(1500, DIM, seed=5)
    uuids = [f"u{i}" for i in range(1500)]
    index = VectorIndex(DIM, ann_threshold=1000)
    index.add(uuids, vectors, ["g"] * 1500)
    assert same(index.search(vectors[7], 5), brute(vectors, uuids, vectors[7], 5))
    index.wait_ready(60)
    assert index.search(vectors[7], 1)[0][0] == "u7"


def test_closing_calls_off_a_graph_build_and_keeps_exact_search(monkeypatch):
    """A build left running in native code when the process exits aborts it ("terminate
    called without an active exception"): close() stops it at its next chunk."""
    monkeypatch.setattr(vector_graph, "BUILD_CHUNK", 64)
    vectors = clustered(6000, DIM, seed=6)
    uuids = [f"u{i}" for i in range(6000)]
    index = VectorIndex(DIM, ann_threshold=1000)
    index.add(uuids, vectors, ["g"] * 6000)
    builder = index.graph._builder
    assert builder is not None and builder.is_alive()
    index.close()
    assert not builder.is_alive() and index.graph._builder is None and not index.uses_ann
    assert index.search(vectors[9], 1)[0][0] == "u9"  # exact search still answers
    index.close()  # nothing to call off: a no-op


def test_a_bulk_load_builds_the_graph_once_after_it():
    vectors = clustered(1500, DIM, seed=8)
    uuids = [f"u{i}" for i in range(1500)]
    index = VectorIndex(DIM, ann_threshold=1000)
    with index.defer_graph():
        for start in range(0, 1500, 100):  # past the threshold: no build while it loads
            end = start + 100
            index.add(uuids[start:end], vectors[start:end], ["g"] * 100)
            assert index.graph._builder is None and not index.uses_ann
        assert index.search(vectors[1200], 1)[0][0] == "u1200"  # exact meanwhile
    assert index.graph._builder is not None or index.uses_ann  # one build, after the load
    assert index.wait_ready(60) and index.uses_ann and len(index.slots._ann) == 1500
    assert index.search(vectors[1300], 1)[0][0] == "u1300"


def test_load_index_reads_vectors_of_existing_memories(store):
    from tests.search.helpers import entity, insert

    rows = [entity(f"e{i}") for i in range(3)]
    vectors = clustered(3, store.dim, seed=4)
    insert(store, "entity", rows, vectors)
    write_embeddings(store, "entity", ["orphan"], clustered(1, store.dim))  # no entity row
    index = load_index(store, "entity")
    assert sorted(index.uuids()) == sorted(r["uuid"] for r in rows)
    assert index.search(vectors[1], 1)[0][0] == rows[1]["uuid"]


def test_group_filtered_search_stays_exact_as_the_group_changes(data):
    """The group subset is cached between searches; adds, upserts and removes refresh it."""
    vectors, uuids, groups = data
    index = VectorIndex(DIM)
    index.add(uuids, vectors, groups)
    query = clustered(1, DIM, seed=5)[0]
    in_b = [i for i, g in enumerate(groups) if g == "b"]
    first = index.search(query, 5, group_ids=["b"])
    assert same(first, brute(vectors, uuids, query, 5, keep=lambda i: groups[i] == "b"))
    assert index.search(query, 5, group_ids=["b"]) == first  # from the cached subset
    # a new member of b that matches the query exactly
    index.add(["new"], query[None, :], ["b"])
    assert index.search(query, 1, group_ids=["b"])[0][0] == "new"
    # the best member of b moves to group a: it leaves b's results
    index.add(["new"], query[None, :], ["a"])
    assert index.search(query, 5, group_ids=["b"]) == first
    # removing b's best leaves the rest in order
    index.remove([first[0][0]])
    assert [u for u, _ in index.search(query, 4, group_ids=["b"])] == [u for u, _ in first[1:]]
    # a changed vector of a member of b is seen
    target = uuids[in_b[-1]]
    index.add([target], query[None, :], ["b"])
    assert index.search(query, 1, group_ids=["b"])[0][0] == target
    # two groups together
    both = index.search(query, 5, group_ids=["a", "b"])
    assert both == index.search(query, 5)


def test_the_index_says_how_it_searches():
    rng = np.random.default_rng(5)
    index = VectorIndex(16, ann_threshold=200)
    index.add([f"u{i}" for i in range(50)], rng.standard_normal((50, 16)), ["g"] * 50)
    assert index.state == "exact"
    index.add([f"v{i}" for i in range(300)], rng.standard_normal((300, 16)), ["g"] * 300)
    assert index.state in ("building", "graph")
    assert index.wait_ready(timeout=60)
    assert index.state == "graph"
    index.close()
