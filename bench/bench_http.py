"""HTTP benchmark of the service: requests/s and latency of ``search_memory_facts`` over REST
(``POST /tools/search_memory_facts``) and over MCP (streamable HTTP at ``/mcp``) with 1, 8 and
32 concurrent clients on loopback.

The store gets N entities and N facts (synthetic texts, clustered synthetic unit vectors) in a
temporary DuckDB file; ``workbench serve`` then runs on it as a separate process with the real
local embedder (every query is embedded: unique query texts, no cache hits) and no rate
limit. The load generator is httpx (REST) and the SDK's MCP client, each worker sending its
requests back to back over a kept-alive connection.

    .venv/bin/python bench/bench_http.py [--memories 2000] [--requests 200]
        [--concurrency 1 8 32] [--no-mcp] [--model multilingual-e5-small] [--json out.json]
    .venv/bin/python bench/bench_http.py --memories 100000      # the issue's size (~2 min fill)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa

from workbench.config import LOCAL_EMBEDDER_MODEL
from workbench.store import Store
from workbench.store import graph as g

ROOT = Path(__file__).resolve().parents[1]


DIM = 384
T0 = datetime(2026, 1, 1, tzinfo=UTC)
WORDS = [
    f"{a}{b}"
    for a in ("ka", "lo", "mi", "ne", "ru", "sa", "to", "vi")
    for b in ("ber", "con", "dal", "fen", "gor", "hal", "kin", "lum", "mor", "nis")
]


def add_sources(store: Store, facts: list[str], text: list[str], rng, model: str) -> None:
    """Provenance as extraction leaves it: an episode per 5 facts, of 6 passages each, and
    every fact stated by 2 episodes (the ``sources`` each search answer reads)."""
    n_ep = max(1, len(facts) // 5)
    episodes = [str(uuidlib.uuid4()) for _ in range(n_ep)]
    when = [T0] * n_ep
    store.register(
        "_ep",
        pa.table({"uuid": episodes, "name": [f"session {i}" for i in range(n_ep)],
                  "t": pa.array(when, pa.timestamp("us", tz="UTC"))}),
    )  # fmt: skip
    store.execute(
        "INSERT INTO episodes (uuid, group_id, name, body, reference_time, created_at, status)"
        " SELECT uuid, 'main', name, name, t, t, 'done' FROM _ep"
    )
    passages = [(str(uuidlib.uuid4()), e, k) for e in episodes for k in range(6)]
    store.register(
        "_p",
        pa.table({"uuid": [p[0] for p in passages], "ep": [p[1] for p in passages],
                  "pos": [p[2] for p in passages],
                  "text": [text[i % len(text)] for i in range(len(passages))],
                  "t": pa.array([T0] * len(passages), pa.timestamp("us", tz="UTC"))}),
    )  # fmt: skip
    store.execute(
        "INSERT INTO passages (uuid, episode_uuid, group_id, position, text, reference_time,"
        " created_at) SELECT uuid, ep, 'main', pos, text, t, t FROM _p"
    )
    # with vectors: a passage without one is embedded by the service when it starts (the
    # model would then compete with the searches measured)
    vectors = rng.standard_normal((len(passages), DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    g.insert_vectors(store, "passage_embeddings", [p[0] for p in passages], vectors, model)
    links = [(f, episodes[i]) for f in facts for i in rng.integers(0, n_ep, 2)]
    store.register(
        "_s",
        pa.table({"f": [x[0] for x in links], "e": [x[1] for x in links],
                  "t": pa.array([T0] * len(links), pa.timestamp("us", tz="UTC"))}),
    )  # fmt: skip
    store.execute("INSERT INTO fact_sources SELECT DISTINCT f, e, t FROM _s ON CONFLICT DO NOTHING")


def fill_store(path: Path, n: int, model: str, seed: int = 0, sources: bool = False) -> float:
    """N entities + N facts with clustered unit vectors, recorded as ``model``'s (the service's
    own, or it refuses the database); returns the seconds it took."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    store = Store.open(path, DIM, model)
    words = np.array(WORDS)
    text = [" ".join(row) for row in words[rng.integers(0, len(WORDS), (n, 8))]]
    ents = [str(uuidlib.uuid4()) for _ in range(n)]
    created = pa.array([T0] * n, pa.timestamp("us", tz="UTC"))
    store.register(
        "_e",
        pa.table(
            {
                "uuid": ents,
                "group_id": ["main"] * n,
                "name": [f"E{i} {t[:16]}" for i, t in enumerate(text)],
                "name_norm": [f"e{i}" for i in range(n)],
                "summary": text,
                "created_at": created,
            }
        ),
    )
    store.execute(
        "INSERT INTO entities (uuid, group_id, name, name_norm, summary, created_at,"
        " updated_at) SELECT uuid, group_id, name, name_norm, summary, created_at,"
        " created_at FROM _e"
    )
    facts = [str(uuidlib.uuid4()) for _ in range(n)]
    store.register(
        "_f",
        pa.table(
            {
                "uuid": facts,
                "group_id": ["main"] * n,
                "source_uuid": [ents[i] for i in rng.integers(0, n, n)],
                "target_uuid": [ents[i] for i in rng.integers(0, n, n)],
                "fact": [f"{t} relates to {WORDS[i % len(WORDS)]}" for i, t in enumerate(text)],
                "created_at": created,
            }
        ),
    )
    store.execute(
        "INSERT INTO facts (uuid, group_id, source_uuid, target_uuid, fact, "
        "created_at) SELECT uuid, group_id, source_uuid, target_uuid, fact, "
        "created_at FROM _f"
    )
    if sources:
        add_sources(store, facts, text, rng, model)
    basis = rng.standard_normal((48, DIM)).astype(np.float32)
    for kind, uuids in (("entity", ents), ("fact", facts)):
        for start in range(0, n, 50_000):
            m = min(50_000, n - start)
            block = rng.standard_normal((m, 48)).astype(np.float32) @ basis
            block += 0.35 * rng.standard_normal((m, DIM)).astype(np.float32)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
            g.insert_embeddings(store, kind, uuids[start : start + m], block, model)
    store.close()
    return time.perf_counter() - started


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_service(
    db: Path, log: Path, model: str | None = None, threads: int | None = None
) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    if model:
        env["SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL"] = model
    if threads:
        env["SVC_KNOWLEDGE_LOCAL_EMBEDDER_THREADS"] = str(threads)
    env.update(
        {
            "SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE": "0",
            "LOG_LEVEL": "WARNING",
            "SVC_KNOWLEDGE_DECAY_ENABLED": "false",
        }
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "service.control.cli",
            "serve",
            "--port",
            str(port),
            "--metrics-port",
            str(free_port()),
            "--db",
            str(db),
        ],
        env=env,
        cwd=db.parent,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise SystemExit("serve did not become ready")


def queries(count: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, 3)) + f" q{seed}-{i}" for i in range(count)]


def summary(latencies: list[float], wall: float, errors: int) -> dict:
    arr = np.array(latencies) * 1000
    return {
        "requests": len(latencies),
        "errors": errors,
        "rps": round(len(arr) / wall, 1),
        "p50_ms": round(float(np.percentile(arr, 50)), 1),
        "p95_ms": round(float(np.percentile(arr, 95)), 1),
    }


async def run_rest(url: str, concurrency: int, total: int, seed: int) -> dict:
    texts = queries(total, seed)
    latencies: list[float] = []
    errors = 0
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:

        async def worker(mine: list[str]) -> None:
            nonlocal errors
            for text in mine:
                t0 = time.perf_counter()
                response = await client.post(
                    "/tools/search_memory_facts", json={"query": text, "max_facts": 10}
                )
                latencies.append(time.perf_counter() - t0)
                errors += response.status_code != 200

        started = time.perf_counter()
        await asyncio.gather(*(worker(texts[i::concurrency]) for i in range(concurrency)))
        wall = time.perf_counter() - started
    return summary(latencies, wall, errors)


async def run_mcp(url: str, concurrency: int, total: int, seed: int) -> dict:
    from mcp import Client

    texts = queries(total, seed)
    latencies: list[float] = []
    errors = 0

    async def worker(mine: list[str]) -> None:
        nonlocal errors
        async with Client(f"{url}/mcp") as client:
            for text in mine:
                t0 = time.perf_counter()
                result = await client.call_tool(
                    "search_memory_facts", {"query": text, "max_facts": 10}
                )
                latencies.append(time.perf_counter() - t0)
                errors += bool(result.is_error)

    started = time.perf_counter()
    await asyncio.gather(*(worker(texts[i::concurrency]) for i in range(concurrency)))
    wall = time.perf_counter() - started
    return summary(latencies, wall, errors)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--memories",
        type=int,
        default=2000,
        help="entities and facts each (default 2000; the issue asks 100000)",
    )
    parser.add_argument(
        "--requests",
        type=int,
        default=200,
        help="requests per concurrency level and transport (default 200)",
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--no-mcp", action="store_true", help="REST only")
    parser.add_argument(
        "--model",
        default=LOCAL_EMBEDDER_MODEL,
        help=f"local embedding model of the service (default {LOCAL_EMBEDDER_MODEL})",
    )
    parser.add_argument("--embedder-threads", type=int, help="threads of one embedding")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--sources",
        action="store_true",
        help="give every fact two episodes that stated it (episodes, passages, fact_sources)",
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.duckdb"
        fill = fill_store(db, args.memories, args.model, sources=args.sources)
        print(f"filled {args.memories} entities + {args.memories} facts in {fill:.1f} s")
        proc, url = start_service(db, Path(tmp) / "serve.log", args.model, args.embedder_threads)
        results: dict = {"memories": args.memories, "fill_seconds": round(fill, 1), "runs": []}
        try:
            asyncio.run(run_rest(url, 4, 40, seed=999))  # warm-up: model, indexes, pools
            print(
                f"{'transport':<6} {'clients':>7} {'requests':>8} {'req/s':>8} "
                f"{'p50 ms':>8} {'p95 ms':>8} {'errors':>6}"
            )
            transports = [("rest", run_rest)] + ([] if args.no_mcp else [("mcp", run_mcp)])
            for name, runner in transports:
                for level, concurrency in enumerate(args.concurrency):
                    row = asyncio.run(runner(url, concurrency, args.requests, seed=level))
                    row.update(transport=name, concurrency=concurrency)
                    results["runs"].append(row)
                    print(
                        f"{name:<6} {concurrency:>7} {row['requests']:>8} {row['rps']:>8} "
                        f"{row['p50_ms']:>8} {row['p95_ms']:>8} {row['errors']:>6}"
                    )
        finally:
            proc.terminate()
            proc.wait(60)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
