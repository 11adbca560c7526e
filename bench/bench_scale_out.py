"""Scaled out on PostgreSQL against one process, on the same machine.

Topologies, each on a fresh store, each with the same fake LLM (the rule-based responder of the
tests behind the real HTTP fake server, in its own process, at ``--latency`` seconds a call):

* ``duckdb``: one ``workbench serve`` on a DuckDB file (the embedded default);
* ``postgres-1``: one ``workbench serve`` on a throw-away PostgreSQL (tests/pg.py);
* ``postgres-2+2``: two ``serve`` replicas and two ``workbench worker`` processes on it.

For each: ``--episodes`` episodes over ``--groups`` groups posted round-robin to the replicas;
throughput from the first post until the queue is empty; search p95 (``search_memory_facts``
on every replica, one client each, during the ingestion); then ``--probes`` writes through the
first replica (``import_memories``, a fact) and the time until the *last* replica finds each
(with one replica, its own write). Every episode done once, no fact written twice.

    .venv/bin/python bench/bench_scale_out.py [--episodes 200] [--groups 20] [--latency 0.2]
        [--concurrency 4] [--topologies duckdb,postgres-1,postgres-2+2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_ingest import FakeProcess  # noqa: E402
from tests.pg import ThrowawayPostgres, schema_url, wait_for  # noqa: E402
from tests.service.svc_helpers import free_port  # noqa: E402
from workbench.fakes.chat_server import chat_settings_env  # noqa: E402

PEOPLE = ("Tom", "Maria Keller", "User")
TOOLS = ("Neovim", "Python", "VS Code")
ORGS = ("Acme", "Globex")


def episode(i: int, groups: int) -> dict:
    person = PEOPLE[i % 3]
    text = (
        f"{person} uses {TOOLS[i % 3]}. {person} works at {ORGS[(i // 3) % 2]}. Note {i}."
        if i % 2
        else f"{person} uses {TOOLS[(i + 1) % 3]}. Note {i}."
    )
    return {"name": f"note {i}", "episode_body": text, "group_id": f"g{i % groups}"}


class Proc:
    def __init__(self, args: list[str], env: dict, scratch: str, name: str, port: int | None):
        self.name = name
        self.log = open(f"{scratch}/{name}.log", "wb")  # noqa: SIM115 - closed in stop
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service.control.cli", *args],
            env=env, cwd=scratch, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) if port else None

    def tool(self, name: str, body: dict | None = None) -> dict:
        response = self.http.post(f"/tools/{name}", json=body or {})
        response.raise_for_status()
        return response.json()

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise SystemExit(f"{self.name} exited; see {self.log.name}")
        try:
            return self.http.get("/health").status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()


def run(topology: str, args, fake, pg: ThrowawayPostgres | None) -> dict:
    scratch = tempfile.mkdtemp(prefix="bench_scale_")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    env.update(chat_settings_env(fake))
    env.update(
        SVC_KNOWLEDGE_QUEUE_CONCURRENCY=str(args.concurrency),
        SVC_KNOWLEDGE_DECAY_ENABLED="false",
        SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE="0",
        SVC_KNOWLEDGE_DB_PATH=f"{scratch}/kb.duckdb",
    )
    replicas, workers = (2, 2) if topology == "postgres-2+2" else (1, 0)
    if topology.startswith("postgres"):
        import psycopg

        schema = f"bench_{topology.replace('-', '_').replace('+', '_')}"
        with psycopg.connect(pg.url, autocommit=True) as con:
            con.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            con.execute(f"CREATE SCHEMA {schema}")
        env["SVC_KNOWLEDGE_DATABASE_URL"] = schema_url(pg.url, schema)
    procs: list[Proc] = []
    try:
        for r in range(replicas):
            port = free_port()
            procs.append(
                Proc(["serve", "--port", str(port), "--metrics-port", str(free_port())], env,
                     scratch, f"serve{r}", port)
            )  # fmt: skip
            if r == 0:  # the first migrates the store alone
                if not wait_for(procs[0].ready, timeout=180, step=0.2):
                    raise SystemExit("serve did not start")
        for w in range(workers):
            procs.append(
                Proc(["worker", "--metrics-port", str(free_port())], env, scratch,
                     f"worker{w}", None)
            )  # fmt: skip
        servers = [p for p in procs if p.http is not None]
        for p in servers:
            if not wait_for(p.ready, timeout=180, step=0.2):
                raise SystemExit(f"{p.name} did not start")
        time.sleep(2 if workers else 0)  # the workers load their embedder
        latencies: list[float] = []
        stop = threading.Event()

        def searcher(p: Proc) -> None:
            client = httpx.Client(base_url=str(p.http.base_url), timeout=60)
            while not stop.is_set():
                t = time.perf_counter()
                client.post("/tools/search_memory_facts", json={"query": "who uses Neovim"})
                latencies.append(time.perf_counter() - t)
                time.sleep(0.05)
            client.close()

        threads = [threading.Thread(target=searcher, args=(p,)) for p in servers]
        for t in threads:
            t.start()
        started = time.perf_counter()
        for i in range(args.episodes):
            servers[i % len(servers)].tool("add_memory", episode(i, args.groups))
        while True:
            counts = servers[0].tool("get_queue_status")["counts"]
            if counts["queued"] + counts["processing"] == 0:
                break
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        stop.set()
        for t in threads:
            t.join()
        visible = []
        for k in range(args.probes):
            name = f"Probe{k}"
            line = {"type": "fact", "source": name, "target": "Acme", "relation": "KNOWS",
                    "fact": f"{name} knows the quartermaster of Acme"}  # fmt: skip
            t = time.perf_counter()
            servers[0].tool("import_memories", {"lines": [json.dumps(line)], "group_id": "probe"})

            def found(name=name) -> bool:
                facts = servers[-1].tool(
                    "search_memory_facts",
                    {"query": f"{name} quartermaster", "group_ids": ["probe"], "max_facts": 3},
                )["facts"]
                return any(name in f["fact"] for f in facts)

            if not wait_for(found, timeout=10, step=0.01):
                raise SystemExit(f"probe {name} never searchable on the last replica")
            visible.append(time.perf_counter() - t)
        status = servers[0].tool("get_status")
        failed = counts.get("failed", 0)
    finally:
        for p in procs:
            p.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    latencies.sort()
    return {
        "topology": topology,
        "episodes_per_s": round(args.episodes / elapsed, 2),
        "seconds": round(elapsed, 1),
        "done": counts.get("done"),
        "failed": failed,
        "graph": status.get("graph"),
        "search_p50_ms": round(1000 * latencies[len(latencies) // 2], 1) if latencies else None,
        "search_p95_ms": round(1000 * latencies[int(len(latencies) * 0.95)], 1)
        if latencies
        else None,
        "searches": len(latencies),
        "write_to_searchable_ms_median": round(1000 * statistics.median(visible), 1),
        "write_to_searchable_ms_max": round(1000 * max(visible), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--probes", type=int, default=10)
    parser.add_argument("--topologies", default="duckdb,postgres-1,postgres-2+2")
    args = parser.parse_args()
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    topologies = args.topologies.split(",")
    pg = ThrowawayPostgres().start() if any(t.startswith("postgres") for t in topologies) else None
    try:
        with FakeProcess(args.latency) as fake:
            for topology in topologies:
                print(json.dumps(run(topology, args, fake, pg)), flush=True)
    finally:
        if pg is not None:
            pg.stop()
    print(f"load after: {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
