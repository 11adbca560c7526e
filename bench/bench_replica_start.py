"""A new replica of a PostgreSQL store: seconds until it serves with both HNSW graphs, with
and without the indexes another replica saved in the database.

On a throw-away PostgreSQL (tests/pg.py): ``--facts`` generated facts naming ``--entities``
entities (``bench_import.py``'s shapes) are imported from Parquet with their vectors (the
import's time is reported: the PostgreSQL import figure), a first replica builds its graphs
(saved into the database as each build ends) and stops; then a new replica, with no local
files, starts: its start-up until both vector indexes use their graphs is timed, then the
p50/p95 of ``search_memory_facts`` in process (each query a new text: the model embeds it).
With ``--http``, then a ``workbench serve`` replica in a process of its own (its own temporary
folder, no files of the others): seconds from its start until ``/health`` reports both vector
indexes searching through their graphs, and the p50/p95 of 200 new ``search_memory_facts``
requests over HTTP right after. Each replica's stop is timed too, with the saves it stored
in the database (a stop with nothing changed since the save it started from stores none).

    .venv/bin/python bench/bench_replica_start.py [--facts 100000] [--entities 25000] [--http]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import bench_import  # noqa: E402

from tests.pg import ThrowawayPostgres, schema_url  # noqa: E402


def open_replica(location: str, scratch: Path):
    from workbench.config import load_settings
    from workbench.facade import Workbench

    settings = load_settings({"SVC_KNOWLEDGE_DATABASE_URL": location,
                              "SVC_KNOWLEDGE_DECAY_ENABLED": "false"}, env_file=None)  # fmt: skip
    return Workbench.open(settings)


def graphs_ready(wb) -> bool:
    vectors = wb.search.indexes.vectors
    return all(vectors[k].state == "graph" for k in ("entity", "fact"))


def timed_start(location: str, scratch: Path) -> tuple[object, float, float]:
    """A replica opened: (it, seconds to open, seconds until both graphs serve)."""
    started = time.perf_counter()
    wb = open_replica(location, scratch)
    opened = time.perf_counter() - started
    while not graphs_ready(wb):
        time.sleep(0.05)
    return wb, opened, time.perf_counter() - started


STORED: list[int] = []  # bytes of each save stored in the database


def count_stores() -> None:
    """Count the saves stored in the database (and their bytes) in :data:`STORED`."""
    from workbench.store import saved_indexes

    real = saved_indexes.publish

    def publish(store, folder, kind):
        stored = real(store, folder, kind)
        if stored:
            names = saved_indexes.files_of_save(folder, kind) or []
            STORED.append(sum((folder / name).stat().st_size for name in names))
        return stored

    saved_indexes.publish = publish


def timed_stop(wb, what: str) -> None:
    before = len(STORED)
    started = time.perf_counter()
    wb.close()
    took = time.perf_counter() - started
    stored = STORED[before:]
    print(f"{what} stop: {took:.1f} s, {len(stored)} saves stored "
          f"({sum(stored) / 1e6:.0f} MB) (load {os.getloadavg()[0]:.1f})")  # fmt: skip


def search_latency(wb, n: int = 200) -> tuple[float, float]:
    took = []
    for i in range(n):
        started = time.perf_counter()
        wb.search_memory_facts(f"what did person {i} talk about after work {i}")
        took.append((time.perf_counter() - started) * 1000)
    took.sort()
    return statistics.median(took), took[int(0.95 * len(took)) - 1]


def http_replica(location: str, scratch: Path, n: int = 200) -> tuple[float, float, float]:
    """``workbench serve`` on ``location``: (seconds until both graphs serve, p50 ms, p95 ms)."""
    import subprocess

    import httpx
    from bench_http import free_port

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    env.update({"SVC_KNOWLEDGE_DATABASE_URL": location, "SVC_KNOWLEDGE_DECAY_ENABLED": "false",
                "SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE": "0", "LOG_LEVEL": "WARNING",
                "TMPDIR": str(scratch / "serve-tmp")})  # fmt: skip
    (scratch / "serve-tmp").mkdir(exist_ok=True)
    log = scratch / "serve.log"
    command = [sys.executable, "-m", "service.control.cli", "serve", "--port", str(port),
               "--metrics-port", str(free_port())]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            while True:
                if proc.poll() is not None:
                    raise SystemExit(f"serve exited:\n{log.read_text()[-3000:]}")
                if time.perf_counter() - started > 600:
                    raise SystemExit("the replica did not serve both graphs within 600 s")
                try:
                    answer = client.get("/health")
                    search = answer.json().get("checks", {}).get("search", {})
                    if all(search.get(k, {}).get("vector_index") == "graph"
                           for k in ("entity", "fact")):  # fmt: skip
                        break
                except (httpx.TransportError, ValueError):
                    pass
                time.sleep(0.1)
            ready = time.perf_counter() - started
            took = []
            for i in range(n):
                asked = time.perf_counter()
                reply = client.post("/tools/search_memory_facts", json={
                    "query": f"what did person {i} say about the trip on day {i}",
                    "max_facts": 10})  # fmt: skip
                reply.raise_for_status()
                took.append((time.perf_counter() - asked) * 1000)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    took.sort()
    return ready, statistics.median(took), took[int(0.95 * len(took)) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=100_000)
    parser.add_argument("--entities", type=int, default=25_000)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument(
        "--http", action="store_true", help="also time a `workbench serve` replica over HTTP"
    )
    args = parser.parse_args()
    count_stores()
    scratch = Path(tempfile.mkdtemp(prefix="bench_replica_"))
    pg = ThrowawayPostgres().start()
    try:
        import psycopg

        with psycopg.connect(pg.url, autocommit=True) as con:
            con.execute('CREATE SCHEMA "bench"')
        location = schema_url(pg.url, "bench")
        shape = argparse.Namespace(facts=args.facts, entities=args.entities, groups=args.groups)
        bench_import.write_records(scratch / "facts.parquet", list(bench_import.fact_rows(shape)))
        bench_import.write_records(scratch / "entities.parquet",
                                   bench_import.entity_records(shape), seed=2)  # fmt: skip
        print(f"{args.facts} facts naming {args.entities} entities on PostgreSQL, load "
              f"{os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")  # fmt: skip
        with open_replica(location, scratch) as wb:
            started = time.perf_counter()
            report = wb.import_jsonl(scratch / "facts.parquet")
            took = time.perf_counter() - started
            print(
                f"import (entity and fact vectors given): {took:.1f} s, "
                f"{report['facts_created']} facts, {report['entities_created']} entities"
            )
        with psycopg.connect(location, autocommit=True) as con:  # the import's own saves
            con.execute("DELETE FROM saved_index_files")
        # the first replica: no save, it builds (and saves as each build ends)
        wb, opened, ready = timed_start(location, scratch)
        print(f"first replica, no saved index: open {opened:.1f} s, graphs serving {ready:.1f} s")
        timed_stop(wb, "first replica (its builds stored as they ended)")
        # a new replica, no local files: the saves in the database
        wb, opened, ready = timed_start(location, scratch)
        p50, p95 = search_latency(wb)
        print(f"new replica, saved index in the database: open {opened:.1f} s, graphs serving "
              f"{ready:.1f} s; search_memory_facts p50 {p50:.1f} ms, p95 {p95:.1f} ms "
              f"(load {os.getloadavg()[0]:.1f})")  # fmt: skip
        timed_stop(wb, "new replica (searched, nothing written)")
        wb, opened, ready = timed_start(location, scratch)
        timed_stop(wb, "another new replica (nothing written)")
        if args.http:
            ready, p50, p95 = http_replica(location, scratch)
            print(f"new replica, `workbench serve`: both graphs serving {ready:.1f} s after its "
                  f"start; HTTP search_memory_facts p50 {p50:.1f} ms, p95 {p95:.1f} ms "
                  f"(load {os.getloadavg()[0]:.1f})")  # fmt: skip
    finally:
        pg.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
