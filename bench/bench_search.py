"""Search benchmark: latency of search_nodes / search_facts and ANN recall, by corpus size.

For each size N (default 10k and 100k; ``--big`` adds 1M) the store gets N entities and N facts
with synthetic unit vectors (clustered on a low-rank manifold, like sentence embeddings) and
synthetic texts (Zipf-distributed words, ~10 a memory). Then:

* startup: the time a new SearchEngine takes to load both indexes from the store (searchable,
  exact), and until the HNSW graphs built in the background are ready;
* ``search_nodes`` / ``search_facts`` through the core API, p50/p95 over ``--queries`` calls,
  (a) engine only: the query vector comes from a lookup table (in-distribution queries), and
  (b) end to end with the real local embedder (``--no-model`` skips it) — query embedding
  included, no query cache; the BM25 search runs in a worker thread while the query is
  embedded, so its wall time hides behind the embedding only when a second core is free
  (on this shared machine, compare the CPU columns too);
* the parts: query embedding alone, vector index, BM25 index;
* recall@10 of the vector index (ANN above the threshold) against exact brute force;
* a group-filtered search (10% of the memories).

Access tracking runs as in production (background flusher). Each size reports the process's
resident memory (RSS) after the engine is ready.

``--reopen`` keeps the store in a DuckDB file (in a temporary folder, or ``--dir``): after the
first engine closes (saving its HNSW graphs beside the file), the store is opened again and a
new engine measures the second start: start-up, time until the graphs are ready (caught up from
the saved ones), search p50/p95 from the first query, and RSS.

A reopen alone on files kept by ``--reopen --dir``: ``--measure-reopen DB QUERIES`` (the
database and the ``.queries.pickle`` beside it), with ``--full-read`` to read every vector as
before saves recorded their newest vector write (the comparison on the same files).

    .venv/bin/python bench/bench_search.py [--sizes 10000 100000] [--big] [--queries 200]
        [--no-model] [--reopen [--dir DIR]] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid as uuidlib
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from workbench.metrics import Metrics
from workbench.search.engine import SearchEngine
from workbench.store import Store
from workbench.store import graph as g

ROOT = Path(__file__).resolve().parents[1]


DIM = 384
T0 = datetime(2026, 1, 1, tzinfo=UTC)


# --- synthetic corpus ------------------------------------------------------------------------
def clustered(n: int, rng: np.random.Generator, basis: np.ndarray) -> np.ndarray:
    out = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        block = rng.standard_normal((m, basis.shape[0]), dtype=np.float32) @ basis
        block += 0.35 * rng.standard_normal((m, DIM), dtype=np.float32)
        out[start : start + m] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return out


def texts(n: int, rng: np.random.Generator, vocab: np.ndarray) -> list[str]:
    ranks = np.minimum(rng.zipf(1.3, size=(n, 10)) - 1, len(vocab) - 1)
    return [" ".join(vocab[r]) for r in ranks]


def rss_mb(field: str = "VmRSS") -> float:
    """The process's resident memory now, in MB (Linux): all of it (``VmRSS``), or its
    private part (``RssAnon``) or the pages of mapped files (``RssFile``: the saved vectors,
    which the kernel can drop and read again)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def build_store(n: int, seed: int = 0, path: str = ":memory:") -> tuple[Store, dict]:
    rng = np.random.default_rng(seed)
    basis = rng.standard_normal((48, DIM), dtype=np.float32)
    vocab = np.array([f"w{i}" for i in range(20_000)])
    store = Store.open(path)
    started = time.perf_counter()
    ent_uuids = [str(uuidlib.uuid4()) for _ in range(n)]
    groups = np.where(rng.random(n) < 0.1, "work", "main")
    ent_text = texts(n, rng, vocab)
    entities = pa.table(
        {
            "uuid": ent_uuids,
            "group_id": groups,
            "name": [t[:24] for t in ent_text],
            "name_norm": [t[:24] for t in ent_text],
            "summary": ent_text,
            "created_at": pa.array([T0] * n, pa.timestamp("us", tz="UTC")),
        }
    )
    src = rng.integers(0, n, n)
    facts = pa.table(
        {
            "uuid": [str(uuidlib.uuid4()) for _ in range(n)],
            "group_id": groups,
            "source_uuid": [ent_uuids[i] for i in src],
            "target_uuid": [ent_uuids[i] for i in rng.integers(0, n, n)],
            "fact": texts(n, rng, vocab),
            "created_at": pa.array([T0] * n, pa.timestamp("us", tz="UTC")),
        }
    )
    store.register("_e", entities)
    store.execute(
        "INSERT INTO entities (uuid, group_id, name, name_norm, summary, created_at, "
        "updated_at) SELECT uuid, group_id, name, name_norm, summary, created_at, "
        "created_at FROM _e"
    )
    store.register("_f", facts)
    store.execute(
        "INSERT INTO facts (uuid, group_id, source_uuid, target_uuid, fact, "
        "created_at) SELECT uuid, group_id, source_uuid, target_uuid, fact, "
        "created_at FROM _f"
    )
    store.unregister("_e")
    store.unregister("_f")
    vectors = {}
    for kind, table in (("entity", entities), ("fact", facts)):
        vectors[kind] = clustered(n, rng, basis)
        uuids = table.column("uuid").to_pylist()
        for start in range(0, n, 50_000):
            g.insert_embeddings(
                store,
                kind,
                uuids[start : start + 50_000],
                vectors[kind][start : start + 50_000],
                "synthetic",
            )
    corpus = {
        "vectors": vectors,
        "basis": basis,
        "rng": rng,
        "vocab": vocab,
        "groups": groups,
        "fill_seconds": time.perf_counter() - started,
        "texts": {"entity": ent_text, "fact": facts.column("fact").to_pylist()},
        "uuids": {"entity": ent_uuids, "fact": facts.column("uuid").to_pylist()},
    }
    return store, corpus


class TableEmbedder:
    """Returns a precomputed vector per query text (engine-only timing, no model)."""

    model, dimensions = "table", DIM

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = table

    def embed(self, items):
        return np.stack([self.table[t] for t in items])


def make_queries(corpus: dict, kind: str, count: int) -> dict[str, np.ndarray]:
    """Query texts (words of a memory, plus noise) and in-distribution query vectors."""
    rng = corpus["rng"]
    vecs, words = corpus["vectors"][kind], corpus["texts"][kind]
    out = {}
    for i in rng.integers(0, len(words), count):
        chosen = rng.choice(words[i].split(), size=3)
        text = " ".join([*chosen, f"q{len(out)}"])  # unique: never a cache hit
        v = vecs[i] + 0.05 * rng.standard_normal(DIM).astype(np.float32)
        out[text] = v / np.linalg.norm(v)
    return out


# --- measuring -------------------------------------------------------------------------------
def pct(samples: list[tuple[float, float]]) -> dict[str, float]:
    """Wall-clock p50/p95/max and the p50/p95 CPU time of the process, all threads (the
    machine is shared: CPU time shows the cost without waiting for a core; it includes the
    BM25 worker thread of a search and the background access flusher)."""
    arr = np.asarray(samples) * 1000
    wall, cpu = arr[:, 0], arr[:, 1]
    return {
        "p50_ms": round(float(np.percentile(wall, 50)), 3),
        "p95_ms": round(float(np.percentile(wall, 95)), 3),
        "max_ms": round(float(wall.max()), 3),
        "cpu_p50_ms": round(float(np.percentile(cpu, 50)), 3),
        "cpu_p95_ms": round(float(np.percentile(cpu, 95)), 3),
    }


def timed(fn, items) -> list[tuple[float, float]]:
    out = []
    for item in items:
        wall, cpu = time.perf_counter(), time.process_time()
        fn(item)
        out.append((time.perf_counter() - wall, time.process_time() - cpu))
    return out


def ann_recall(engine: SearchEngine, corpus: dict, kind: str, queries, asked: int) -> float:
    """recall@10 against brute force, asking the index for ``asked`` results (10, or the
    engine's candidate pool of 50 of which the best 10 by cosine count)."""
    index, vecs = engine.indexes.vectors[kind], corpus["vectors"][kind]
    uuids = corpus["uuids"][kind]
    total = 0.0
    for q in queries:
        want = {uuids[i] for i in np.argpartition(-(vecs @ q), 10)[:10]}
        total += len(want & {u for u, _ in index.search(q, asked)[:10]}) / 10
    return round(total / len(queries), 4)


def bench_size(n: int, args, model) -> dict:
    print(f"--- {n:,} entities + {n:,} facts", flush=True)
    path = ":memory:"
    if args.reopen:
        import tempfile

        folder = Path(args.dir or tempfile.mkdtemp(prefix="bench_search_"))
        folder.mkdir(parents=True, exist_ok=True)
        path = str(folder / f"search_{n}.duckdb")
        for old in folder.glob(f"search_{n}.duckdb*"):
            import shutil

            shutil.rmtree(old) if old.is_dir() else old.unlink()
    store, corpus = build_store(n, path=path)
    print(f"    filled the store in {corpus['fill_seconds']:.1f} s", flush=True)
    queries = {k: make_queries(corpus, k, args.queries) for k in ("entity", "fact")}
    table = {t: v for qs in queries.values() for t, v in qs.items()}
    started = time.perf_counter()
    engine = SearchEngine(
        store, TableEmbedder(table), Metrics(), query_cache_size=0, ann_threshold=args.ann_threshold
    )
    result: dict = {"n": n, "startup_seconds": round(time.perf_counter() - started, 2)}
    for kind in ("entity", "fact"):
        engine.indexes.vectors[kind].wait_ready()
    result["ann_ready_seconds"] = round(time.perf_counter() - started, 2)
    result["ann"] = engine.indexes.vectors["fact"].uses_ann
    result["rss_mb"] = rss_mb()
    # the most the first start held: the graphs' builds (and this benchmark's own copy of
    # the corpus, ~1.7 KB a memory)
    result["peak_rss_mb"] = rss_mb("VmHWM")
    print(
        f"    engine startup {result['startup_seconds']} s, ANN graphs ready after "
        f"{result['ann_ready_seconds']} s (ANN: {result['ann']})",
        flush=True,
    )
    for _ in range(20):  # warm up
        engine.search_facts(next(iter(queries["fact"])))
    result["search_nodes"] = pct(timed(engine.search_nodes, queries["entity"]))
    result["search_facts"] = pct(timed(engine.search_facts, queries["fact"]))
    result["search_facts_group_10pct"] = pct(
        timed(lambda t: engine.search_facts(t, group_ids=["work"]), queries["fact"])
    )
    qv = list(queries["fact"].values())
    result["vector_index"] = pct(timed(lambda v: engine.indexes.vectors["fact"].search(v, 50), qv))
    result["bm25_index"] = pct(
        timed(lambda t: engine.indexes.keywords["fact"].search(t, 50), queries["fact"])
    )
    result["recall_at_10_vs_exact"] = ann_recall(engine, corpus, "fact", qv[:100], 10)
    result["recall_at_10_vs_exact_pool50"] = ann_recall(engine, corpus, "fact", qv[:100], 50)
    if model is not None:
        engine.searcher.embedder = model
        texts_ = list(queries["fact"])
        result["search_facts_with_model"] = pct(timed(engine.search_facts, texts_))
        result["search_nodes_with_model"] = pct(timed(engine.search_nodes, list(queries["entity"])))
    engine.close()
    store.close()
    if args.reopen:
        # in a fresh process, as after a restart: its RSS holds the engine and nothing else
        import pickle
        import subprocess
        import sys

        saved = f"{path}.queries.pickle"
        Path(saved).write_bytes(pickle.dumps(queries))
        model_flag = ["--no-model"] if args.no_model else []
        done = subprocess.run(
            [sys.executable, __file__, "--measure-reopen", path, saved,
             "--ann-threshold", str(args.ann_threshold), *model_flag],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        result["reopen"] = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(result, indent=2), flush=True)
    return result


def forget_write_numbers(search_dir: Path) -> None:
    """Take the vector write number out of the saved graphs' manifests: the next open then
    reads and fingerprints every vector, as before saves recorded one (``--full-read``: the
    comparison on the same files)."""
    for kind in ("entity", "fact"):
        manifest = search_dir / f"{kind}.json"
        if manifest.is_file():
            saved = json.loads(manifest.read_text())
            saved.pop("seq", None)
            manifest.write_text(json.dumps(saved))


def reopen(path: str, saved: str, args) -> dict:
    """The second start on the same files: start-up, graphs ready, search at once, RSS."""
    import pickle

    if args.full_read:
        forget_write_numbers(Path(f"{path}.search"))

    queries = pickle.loads(Path(saved).read_bytes())
    table = {t: v for qs in queries.values() for t, v in qs.items()}
    started = time.perf_counter()
    store = Store.open(path)
    engine = SearchEngine(
        store, TableEmbedder(table), Metrics(), query_cache_size=0, ann_threshold=args.ann_threshold
    )
    out: dict = {"startup_seconds": round(time.perf_counter() - started, 2)}
    # searched at once, while anything still missing is built in the background
    out["search_facts_at_once"] = pct(timed(engine.search_facts, list(queries["fact"])[:100]))
    for kind in ("entity", "fact"):
        engine.indexes.vectors[kind].wait_ready()
    out["ann_ready_seconds"] = round(time.perf_counter() - started, 2)
    out["search_facts"] = pct(timed(engine.search_facts, queries["fact"]))
    out["rss_mb"] = rss_mb()
    out["rss_anon_mb"], out["rss_file_mb"] = rss_mb("RssAnon"), rss_mb("RssFile")
    out["peak_rss_mb"] = rss_mb("VmHWM")  # the most it held while it opened
    if not args.no_model:  # each query embedded by the local model as part of the search
        from workbench.embedding import LocalEmbedder

        engine.searcher.embedder = LocalEmbedder()
        engine.searcher.embedder.warm_up()
        out["search_facts_with_model"] = pct(timed(engine.search_facts, list(queries["fact"])))
    engine.close()
    store.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--big", action="store_true", help="also 1,000,000 memories")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ann-threshold", type=int, default=20_000)
    parser.add_argument("--no-model", action="store_true", help="skip the real embedder")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--reopen", action="store_true", help="also measure a second start")
    parser.add_argument("--dir", help="folder of the --reopen database files (default: temp)")
    parser.add_argument("--measure-reopen", nargs=2, metavar=("DB", "QUERIES"), help="internal")
    parser.add_argument(
        "--full-read",
        action="store_true",
        help="with --measure-reopen: read every vector at the reopen, as before saves "
        "recorded their newest vector write (a comparison on the same files)",
    )
    args = parser.parse_args()
    if args.measure_reopen:
        print(json.dumps(reopen(*args.measure_reopen, args)))
        return
    sizes = args.sizes + ([1_000_000] if args.big else [])
    model = None
    report: dict = {"sizes": []}
    if not args.no_model:
        from workbench.embedding import LocalEmbedder

        model = LocalEmbedder()
        model.warm_up()
        sentences = [
            f"What did I say about project number {i} last week?" for i in range(args.queries)
        ]
        report["query_embedding"] = pct(timed(lambda s: model.embed([s]), sentences))
        print("query embedding (all-MiniLM-L6-v2, 1 thread):", report["query_embedding"])
    for n in sizes:
        report["sizes"].append(bench_size(n, args, model))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
