"""A service restart on a large store: how soon ``workbench serve`` answers and searches at full
speed again, and in how much memory.

``--facts`` facts (default 200,000, generated as in ``bench_import.py``) are imported from
Parquet with their vectors by ``workbench import`` (timed) into a DuckDB file. ``workbench
serve`` then starts twice on that file, with the local embedder:

1. the first start builds the HNSW graphs in the background (the import leaves that to the next
   start); once ``/health`` reports them ready the service is stopped with SIGTERM, which saves
   the graphs and keyword indexes beside the file;
2. the second start is the restart measured: seconds from launch to ``/health`` 200, the
   seconds until ``/health`` reports the graphs serving (not "building"), HTTP
   ``search_memory_facts`` p50/p95 over the first ``--queries`` requests (one client; query
   embedding included, every query a new text), and the service process's RSS after them
   and at its most.

With ``--full-read`` the restart reads and fingerprints every stored vector, as before saves
recorded their newest vector write: the comparison on the same files.

    .venv/bin/python bench/bench_service_restart.py [--facts 200000] [--queries 200]
        [--dir DIR (keep the files; a second run reuses the database)] [--json out.json]
        [--full-read]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
from bench_http import free_port
from bench_import import PEOPLE, THINGS, write_parquet
from bench_search import forget_write_numbers

CLI = Path(sys.executable).with_name("workbench")


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """A process's resident memory now (``VmRSS``) or at its most (``VmHWM``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def serve(db: Path, log: Path) -> tuple[subprocess.Popen, str, float]:
    """Start ``workbench serve``; return it, its URL and the seconds until /health said 200."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    env.update({"SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE": "0", "LOG_LEVEL": "WARNING",
                "SVC_KNOWLEDGE_DECAY_ENABLED": "false"})  # fmt: skip
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [str(CLI), "serve", "--port", str(port), "--metrics-port", str(free_port()),
         "--db", str(db)],
        env=env, cwd=db.parent, stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    while time.perf_counter() - started < 600:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return proc, url, time.perf_counter() - started
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    proc.kill()
    raise SystemExit("serve did not answer /health within 600 s")


def graphs_ready(url: str) -> bool:
    search = httpx.get(f"{url}/health", timeout=30).json()["checks"].get("search", {})
    return all(search.get(k, {}).get("vector_index") != "building" for k in ("entity", "fact"))


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=300)


def searches(url: str, count: int) -> dict:
    rng = np.random.default_rng(7)
    latencies = []
    with httpx.Client(base_url=url, timeout=60) as client:
        for i in range(count):
            who, thing = rng.choice(PEOPLE), rng.choice(THINGS)
            query = f"What did {who} say about the {thing}? ({i})"
            t0 = time.perf_counter()
            response = client.post("/tools/search_memory_facts", json={"query": query})
            latencies.append(time.perf_counter() - t0)
            response.raise_for_status()
    ms = np.array(latencies) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 1),
            "p95_ms": round(float(np.percentile(ms, 95)), 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dir", type=Path, help="keep the files here (reused when present)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--full-read",
        action="store_true",
        help="the measured restart reads every vector, as before saves recorded their newest "
        "vector write (a comparison on the same files)",
    )
    args = parser.parse_args()
    folder = args.dir or Path(tempfile.mkdtemp(prefix="bench_service_restart_"))
    folder.mkdir(parents=True, exist_ok=True)
    db, source = folder / "kb.duckdb", folder / "facts.parquet"
    out: dict = {"facts": args.facts, "load_before": round(os.getloadavg()[0], 2)}
    try:
        if not db.exists():
            write_parquet(source, args.facts)
            started = time.perf_counter()
            subprocess.run([str(CLI), "import", str(source), "--db", str(db), "--quiet"],
                           check=True, capture_output=True)  # fmt: skip
            out["import_seconds"] = round(time.perf_counter() - started, 1)
            print(f"import of {args.facts} facts with vectors: {out['import_seconds']} s")
        proc, url, _ = serve(db, folder / "serve1.log")
        started = time.perf_counter()
        while not graphs_ready(url):
            time.sleep(1)
        print(f"first start: graphs ready {time.perf_counter() - started:.1f} s after /health")
        stop(proc)
        if args.full_read:
            forget_write_numbers(Path(f"{db}.search"))
        proc, url, health = serve(db, folder / "serve2.log")
        launched = time.perf_counter() - health
        restart = out["restart"] = {"health_seconds": round(health, 2)}
        while not graphs_ready(url):
            time.sleep(0.05)
        restart["graphs_ready_seconds"] = round(time.perf_counter() - launched, 2)
        restart.update(searches(url, args.queries))
        restart["rss_mb"] = rss_mb(proc.pid)
        restart["peak_rss_mb"] = rss_mb(proc.pid, "VmHWM")
        stop(proc)
    finally:
        if args.dir is None:
            shutil.rmtree(folder, ignore_errors=True)
    out["load_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
