"""Local embedder benchmark.

0. Import + load + first embedding of the local model in a fresh process (``--backend``:
   onnx = onnxruntime + tokenizers, torch = sentence-transformers).
1. Throughput of the in-process local model (``--model``, default the configured default,
   multilingual-e5-small; or all-MiniLM-L6-v2) at batch 32 and batch 1.
2. One query in process (p50 / p95) and its round trip through ``workbench embed-server``
   with the ``compat`` client over loopback (``--no-server`` skips it), embedded as a query.

3. With ``--entity-names N``: N entity texts as an import embeds them (``Name (Entity):`` of
   ``bench_import.py``'s generated names) in one call, lengths batched on every core: the floor
   of an import whose entities bring no vectors.

    .venv/bin/python bench/bench_embed.py [--model NAME] [--backend onnx|torch] [--texts 512]
        [--queries 200] [--threads 1] [--cache-dir DIR] [--no-server] [--entity-names 6000]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from workbench.config import LOCAL_EMBEDDER_MODEL
from workbench.embedding import CompatEmbedder, LocalEmbedder
from workbench.embedding.base import embed_queries
from workbench.embedding.local import open_local

ROOT = Path(__file__).resolve().parents[1]


SENTENCES = [
    "The user prefers dark mode in every editor.",
    "Maria Keller moved from Munich to Berlin in March.",
    "The billing service is being migrated from Flask to FastAPI.",
    "Tom reviews pull requests on Tuesdays and Thursdays.",
    "The quarterly planning meeting was moved to the second week of April.",
    "Alex is allergic to peanuts and avoids Thai restaurants.",
    "The Atlas project uses DuckDB for its analytics store.",
    "Priya manages the data engineering team at Fernhill Analytics.",
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def throughput(embedder: LocalEmbedder, n: int, batch: int) -> float:
    texts = [f"{SENTENCES[i % len(SENTENCES)]} ({i})" for i in range(n)]
    started = time.perf_counter()
    for i in range(0, n, batch):
        embedder.embed(texts[i : i + batch])
    return n / (time.perf_counter() - started)


FRESH = """
import json, sys, time
started = time.perf_counter()
from workbench.embedding.local import open_local
imported = time.perf_counter()
backend, threads, cache_dir, model = sys.argv[1], int(sys.argv[2]), sys.argv[3] or None, sys.argv[4]
embedder = open_local(model, backend=backend, threads=threads, cache_dir=cache_dir)
embedder.warm_up()
done = time.perf_counter()
print(json.dumps({"import": imported - started, "load": done - imported, "total": done - started,
                  "backend": embedder.backend,
                  "torch_loaded": "torch" in sys.modules}))
"""


def fresh_process(backend: str, threads: int, cache_dir: str | None, model: str) -> dict:
    """Time ``import workbench.embedding`` + model load + one embedding in a new interpreter."""
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", FRESH, backend, str(threads), cache_dir or "", model],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process"] = time.perf_counter() - started
    return result


def serve(embedder: LocalEmbedder, port: int):
    import uvicorn

    from service.sidecars.embed_server import create_embed_app

    app = create_embed_app(embedder)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread


def round_trips(client, queries: int) -> list[float]:
    out = []
    for i in range(queries):
        text = f"where does {SENTENCES[i % len(SENTENCES)].split()[1]} work? {i}"
        started = time.perf_counter()
        embed_queries(client, [text])
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=LOCAL_EMBEDDER_MODEL, help="local embedding model")
    parser.add_argument("--backend", choices=["onnx", "torch"], default="onnx")
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-dir", default=os.environ.get("WORKBENCH_MODEL_CACHE"))
    parser.add_argument("--no-server", action="store_true", help="skip the embed-server part")
    parser.add_argument(
        "--entity-names", type=int, default=0, metavar="N",
        help="also time N entity texts embedded in one call, as an import does",
    )  # fmt: skip
    args = parser.parse_args()
    print(
        f"load average: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
        f"{os.getloadavg()[2]:.2f} on {os.cpu_count()} cores"
    )
    fresh = fresh_process(args.backend, args.threads, args.cache_dir, args.model)
    print(
        f"fresh process ({fresh['backend']}): import workbench.embedding {fresh['import']:.2f} s, "
        f"load + first embedding {fresh['load']:.2f} s, total {fresh['total']:.2f} s "
        f"(interpreter included {fresh['process']:.2f} s; torch imported: "
        f"{fresh['torch_loaded']})"
    )
    embedder = open_local(
        args.model, backend=args.backend, threads=args.threads, cache_dir=args.cache_dir
    )
    started = time.perf_counter()
    embedder.warm_up()
    print(f"model load + first embedding (in this process): {time.perf_counter() - started:.2f} s")
    print(
        f"batch 32: {throughput(embedder, args.texts, 32):.0f} texts/s "
        f"({args.threads} thread(s), backend {embedder.backend})"
    )
    print(f"batch 1:  {throughput(embedder, args.texts // 4, 1):.0f} texts/s")
    local = round_trips(embedder, args.queries)
    results = [("in-process", local)]
    if not args.no_server:
        port = free_port()
        server, _ = serve(embedder, port)
        client = CompatEmbedder(
            f"http://127.0.0.1:{port}/v1", embedder.model, 384, send_input_type=True
        )
        results.append(("embed-server", round_trips(client, args.queries)))
        server.should_exit = True
    for name, values in results:
        print(
            f"{name:12s} one query: p50 {statistics.median(values):.1f} ms, "
            f"p95 {percentile(values, 0.95):.1f} ms, max {max(values):.1f} ms"
        )
    if len(results) == 2:
        overhead = statistics.median(results[1][1]) - statistics.median(local)
        print(f"HTTP overhead p50: {overhead:.1f} ms")
    if args.entity_names:
        print(f"entity names, one call: {entity_names(embedder, args.entity_names):.0f} texts/s")


def entity_names(embedder: LocalEmbedder, n: int) -> float:
    """Entity texts a second, embedded as ``workbench import`` embeds new entities."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_import import entity_name

    from workbench.ingest.records import entity_text

    texts = [entity_text(entity_name(k), "Entity", "") for k in range(20_000, 20_000 + n)]
    started = time.perf_counter()
    embedder.embed(texts)
    return n / (time.perf_counter() - started)


if __name__ == "__main__":
    main()
