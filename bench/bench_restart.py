"""Reopening a large vector index after memories changed: catching the saved HNSW graph up
with the store against building a new one.

    .venv/bin/python bench/bench_restart.py [--size 100000] [--changed 0.01]

Fills an in-memory store with ``--size`` synthetic facts (see ``bench_search.py``), builds
and saves the fact graph, then changes ``--changed`` of the vectors behind it (half of them
re-embedded, half deleted, as another process or one that crashed before saving would) and
opens the index twice: from the saved graph (caught up) and without it (rebuilt). Prints the
time until the graph serves, and recall@10 of both against exact search.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_search import build_store, clustered

from workbench.index.vector.index import load_index


def recall(index, exact, queries: np.ndarray, k: int = 10) -> float:
    hits = 0
    for q in queries:
        want = {u for u, _ in exact.search(q, k)}
        hits += len(want & {u for u, _ in index.search(q, k)})
    return hits / (k * len(queries))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--changed", type=float, default=0.01)
    args = parser.parse_args()
    print(f"{args.size:,} facts, {args.changed:.1%} changed; load {os.getloadavg()[0]:.2f}")
    store, corpus = build_store(args.size)
    folder = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    try:
        started = time.perf_counter()
        index = load_index(store, "fact", 20_000, folder, background_build=False)
        print(f"first build: {time.perf_counter() - started:.1f} s")
        assert index.saves.save_graph(folder, "fact")
        rng = np.random.default_rng(1)
        uuids = corpus["uuids"]["fact"]
        picked = rng.choice(len(uuids), int(len(uuids) * args.changed), replace=False)
        half = len(picked) // 2
        moved = clustered(half, rng, corpus["basis"])
        for i, vector in zip(picked[:half], moved):
            store.execute(
                "UPDATE fact_embeddings SET vector = ?::FLOAT[384], seq = nextval('vector_seq') "
                "WHERE uuid = ?",
                [vector.tolist(), uuids[i]],
            )
        gone = [uuids[i] for i in picked[half:]]
        store.execute("DELETE FROM fact_embeddings WHERE uuid IN (SELECT unnest(?))", [gone])

        started = time.perf_counter()
        caught_up = load_index(store, "fact", 20_000, folder, background_build=False)
        took = time.perf_counter() - started
        print(f"reopen from the saved graph: {took:.1f} s "
              f"(caught up: {caught_up.graph._ann_tombstones} tombstones)")  # fmt: skip
        started = time.perf_counter()
        rebuilt = load_index(store, "fact", 20_000, None, background_build=False)
        took = time.perf_counter() - started
        print(f"reopen without it (a new graph): {took:.1f} s")
        exact = load_index(store, "fact", 10**9)  # never a graph: exact search
        queries = clustered(200, rng, corpus["basis"])
        print(f"recall@10 vs exact: caught up {recall(caught_up, exact, queries):.3f}, "
              f"rebuilt {recall(rebuilt, exact, queries):.3f}")  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        store.close()


if __name__ == "__main__":
    main()
