"""Local embedder benchmark.

1. Throughput of the in-process local model (all-MiniLM-L6-v2) at batch 32 and batch 1.
2. Round trip of one query through ``workbench embed-server`` with the ``compat`` client
   over loopback (p50 / p95), against the in-process embedding of the same query.

    .venv/bin/python bench/bench_embed.py [--texts 512] [--queries 200] [--threads 1]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from workbench.embedder import CompatEmbedder, LocalEmbedder  # noqa: E402

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


def serve(embedder: LocalEmbedder, port: int):
    import uvicorn

    from service.embed_server import create_embed_app

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
        client.embed([text])
        out.append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    embedder = LocalEmbedder(threads=args.threads)
    started = time.perf_counter()
    embedder.warm_up()
    print(f"model load + first embedding: {time.perf_counter() - started:.1f} s")
    print(f"batch 32: {throughput(embedder, args.texts, 32):.0f} texts/s "
          f"({args.threads} thread(s))")
    print(f"batch 1:  {throughput(embedder, args.texts // 4, 1):.0f} texts/s")
    local = round_trips(embedder, args.queries)
    port = free_port()
    server, _ = serve(embedder, port)
    client = CompatEmbedder(f"http://127.0.0.1:{port}/v1", embedder.model, 384)
    remote = round_trips(client, args.queries)
    server.should_exit = True
    for name, values in (("in-process", local), ("embed-server", remote)):
        print(f"{name:12s} one query: p50 {statistics.median(values):.1f} ms, "
              f"p95 {percentile(values, 0.95):.1f} ms")
    print(f"HTTP overhead p50: {statistics.median(remote) - statistics.median(local):.1f} ms")


if __name__ == "__main__":
    main()
