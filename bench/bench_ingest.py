"""Ingestion pipeline benchmark.

1. Throughput with an instant fake LLM (target ≥ 100 episodes/s), inline and with workers.
2. Throughput with a fake LLM of fixed latency L and C workers (target ≈ C / L episodes/s
   divided by the calls per episode).
3. LLM calls and prompt/completion tokens per episode on data/sample_episodes.jsonl.

The fake LLM is the rule-based responder of the tests behind the real HTTP fake server, so
the full wire path (openai client, JSON, validation, rows, metrics) is measured. By default the
fake server runs in its own process, as a real LLM server would (``--fake-in-process`` puts it
in the benchmark's process, where it competes with the pipeline for the GIL).

    .venv/bin/python bench/bench_ingest.py [--episodes 300] [--latency 0.2] [--workers 4]
        [--local-embedder] [--fake-in-process] [--batch-size 16] [--history 200000]
        [--in-memory] [--one-group 120 --runs 1,8,16]

Each run writes a fresh DuckDB file in a temporary directory, as the service does by default
(``--in-memory`` keeps DuckDB in memory: about 6% faster, since a commit then writes no log).

``--one-group N`` measures instead one person's history through the service: ``workbench serve``
as its own process (the local embedder, a DuckDB file), the fake LLM at ``--latency`` in
another, N episodes of one group posted to ``/tools/add_memory`` (moves, job changes and tools,
so later episodes invalidate earlier facts), timed from the first post until the queue is empty,
once per ``--runs`` value (``SVC_KNOWLEDGE_QUEUE_GROUP_RUN``; 1 is one at a time). The ideal of
one at a time is 1 / (2 calls × latency). Each service's database is then checked: every
episode done once, no fact written twice, the LLM calls per episode.

``--history N`` adds a run of the workers on a store that already holds N processed episodes
(in 8 groups) with N/2 entities, 2N facts and their mentions, written by SQL: the ingestion
path's reads and writes must not grow with what is stored. (The history is in the tables, not
in the in-memory search indexes: bench_search.py measures those at scale.)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from workbench.config import load_settings
from workbench.facade import Workbench
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import FakeLLMServer, chat_settings_env
from workbench.fakes.embedder import HashEmbedder
from workbench.fakes.replay_llm import ReplayLLM
from workbench.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]


PEOPLE = ["Maria Keller", "Tom", "User"]
ORGS = ["Acme", "Globex"]
TOOLS = ["Neovim", "VS Code", "Python"]


def episode(i: int) -> str:
    return (
        f"{PEOPLE[i % 3]} works at {ORGS[i % 2]}. {PEOPLE[(i + 1) % 3]} uses "
        f"{TOOLS[i % 3]}. Note {i}."
    )


BATCH_SIZE = "16"


@dataclass
class RemoteFake:
    """The address of a fake LLM server running in another process."""

    base_url: str
    model: str = "fake-model"


def _serve_fake(latency: float, pipe) -> None:
    with FakeLLMServer(latency=latency) as server:
        server.set_responder(rule_llm.respond)
        pipe.send(server.base_url)
        pipe.recv()  # until the benchmark says stop


class FakeProcess:
    """The rule-based fake LLM server in a child process."""

    def __init__(self, latency: float):
        self._pipe, child = multiprocessing.Pipe()
        self._proc = multiprocessing.get_context("spawn").Process(
            target=_serve_fake, args=(latency, child), daemon=True
        )

    def __enter__(self) -> RemoteFake:
        self._proc.start()
        return RemoteFake(self._pipe.recv())

    def __exit__(self, *exc) -> None:
        self._pipe.send("stop")
        self._proc.join(5)


DB_DIR: str | None = None  # None: DuckDB in memory (--in-memory)


def open_wb(server, embedder, workers: int) -> Workbench:
    """A workbench on a fresh DuckDB file (the service's default) or in memory."""
    db = ":memory:" if DB_DIR is None else tempfile.mkdtemp(dir=DB_DIR) + "/kb.duckdb"
    env = chat_settings_env(
        server,
        SVC_KNOWLEDGE_DB_PATH=db,
        SVC_KNOWLEDGE_QUEUE_CONCURRENCY=str(workers),
        SVC_KNOWLEDGE_QUEUE_BATCH_SIZE=BATCH_SIZE,
        SVC_KNOWLEDGE_DECAY_ENABLED="false",
    )
    return Workbench.open(load_settings(env, env_file=None), embedder=embedder, metrics=Metrics())


def close_wb(wb: Workbench) -> None:
    """Close it and delete its DuckDB file (a --history store takes a gigabyte)."""
    wb.close()
    if DB_DIR is not None:
        shutil.rmtree(os.path.dirname(wb.settings.db_path), ignore_errors=True)


CPU_MS: list[float] = []  # CPU ms of this process per episode, one entry per run


def preload(wb: Workbench, n: int) -> None:
    """``n`` processed episodes in the bench's 8 groups, n/2 entities, 2n facts, mentions."""
    ids = "md5('{kind}' || {i})::UUID::VARCHAR"
    ep, ent = ids.format(kind="ep", i="i"), ids.format(kind="ent", i="i")
    sql = [
        f"""INSERT INTO episodes (uuid, group_id, name, body, source, source_description,
                reference_time, created_at, priority, status, processed_at)
            SELECT {ep}, 'g' || (i % 8), 'past ' || i, 'An earlier note, number ' || i || '.',
                   'text', '', TIMESTAMPTZ '2020-01-01' + to_seconds(i), now(), 1, 'done', now()
            FROM range($1) t(i)""",
        f"""INSERT INTO queue (episode_uuid, group_id, priority, state, enqueued_at,
                available_at, finished_at)
            SELECT {ep}, 'g' || (i % 8), 1, 'done', now(), now(), now() FROM range($1) t(i)""",
        f"""INSERT INTO entities (uuid, group_id, name, name_norm, entity_type, summary,
                created_at, updated_at)
            SELECT {ent}, 'g' || (i % 8), 'Thing ' || i, 'thing ' || i, 'Entity',
                   'An earlier thing, number ' || i, now(), now()
            FROM range($1 // 2) t(i)""",
        f"""INSERT INTO facts (uuid, group_id, source_uuid, target_uuid, relation, fact,
                episode_uuid, created_at)
            SELECT {ids.format(kind="fact", i="i")}, 'g' || (i % 8),
                   {ids.format(kind="ent", i="(i % ($1 // 2))")},
                   {ids.format(kind="ent", i="((i * 7 + 8) % ($1 // 2))")}, 'RELATES_TO',
                   'Thing ' || i || ' relates to another', {ids.format(kind="ep", i="(i % $1)")},
                   now()
            FROM range(2 * $1) t(i)""",
        f"""INSERT INTO mentions SELECT DISTINCT {ids.format(kind="ep", i="(i % $1)")},
                {ids.format(kind="ent", i="(i % ($1 // 2))")} FROM range($1) t(i)""",
    ]
    with wb.store.transaction():
        for statement in sql:
            wb.store.execute(statement, [n])


def run(
    server, embedder, n: int, workers: int, groups: int, inline: bool, history: int = 0
) -> float:
    wb = open_wb(server, embedder, workers)
    if history:
        preload(wb, history)
    last = {}  # each group's last episode: when they are done, all are (groups run in order)
    for i in range(n):
        group = f"g{i % groups}"
        last[group] = wb.add_memory(f"e{i}", episode(i), group_id=group)["episode_uuid"]
    cpu = time.process_time()
    started = time.perf_counter()
    if inline:
        wb.process_pending()
    else:
        wb.start()
        # polling costs the workers the store lock: not too often, and by key (no scan)
        while any(
            state != "done"
            for (state,) in wb.store.fetchall(
                "SELECT state FROM queue WHERE episode_uuid = ANY(?)", [list(last.values())]
            )
        ):
            time.sleep(0.05)
    elapsed = time.perf_counter() - started
    CPU_MS.append((time.process_time() - cpu) / n * 1000)
    close_wb(wb)
    return n / elapsed


CITIES, EMPLOYERS = ["Berlin", "Munich"], ["Acme", "Globex"]


def life_episode(i: int) -> str:
    """Day ``i`` of one person's notes: two of a move, a job change, a tool, a project."""
    tool = TOOLS[(i * 7) % 3]
    sentences = [
        f"Tom moved to {CITIES[(i // 3) % 2]}.",
        f"Tom works at {EMPLOYERS[(i // 5) % 2]}.",
        f"Tom uses {tool}.",
        f"Maria Keller lives in {CITIES[(i // 4) % 2]}.",
        "Tom leads Atlas.",
        f"Maria Keller works at {EMPLOYERS[(i // 7) % 2]}.",
    ]
    return f"{sentences[i % 6]} {sentences[(i * 5 + 1) % 6]} Day {i}."


def one_group(n: int, latency: float, run: int, workers: int) -> dict:
    """``n`` episodes of one group through ``workbench serve`` (see the module docstring)."""
    import subprocess
    import sys

    import duckdb
    import httpx

    def free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]

    scratch = tempfile.mkdtemp(prefix="bench_one_group_")
    db = f"{scratch}/kb.duckdb"
    port, metrics = free_port(), free_port()
    with FakeProcess(latency) as fake:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
        env.update(chat_settings_env(fake))
        env.update(
            SVC_KNOWLEDGE_DB_PATH=db,
            SVC_KNOWLEDGE_QUEUE_GROUP_RUN=str(run),
            SVC_KNOWLEDGE_QUEUE_CONCURRENCY=str(workers),
            SVC_KNOWLEDGE_DECAY_ENABLED="false",
            SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE="0",
        )
        log = open(f"{scratch}/serve.log", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            [sys.executable, "-m", "service.control.cli", "serve", "--port", str(port),
             "--metrics-port", str(metrics)],
            env=env, cwd=scratch, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        try:
            deadline = time.monotonic() + 120
            while True:
                try:
                    if http.get("/health").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"workbench serve did not start; see {scratch}/serve.log")
                time.sleep(0.2)
            start = datetime(2024, 1, 1, tzinfo=UTC)
            started = time.perf_counter()
            for i in range(n):
                body = {"name": f"day {i:03d}", "episode_body": life_episode(i), "group_id": "tom",
                        "reference_time": (start + timedelta(days=i)).isoformat()}  # fmt: skip
                http.post("/tools/add_memory", json=body).raise_for_status()
            while True:
                counts = http.post("/tools/get_queue_status", json={}).json()["counts"]
                if counts["queued"] + counts["processing"] == 0:
                    break
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
        finally:
            proc.terminate()
            proc.wait(60)
            log.close()
    con = duckdb.connect(db, read_only=True)
    one = lambda sql: con.execute(sql).fetchone()[0]  # noqa: E731
    checks = {
        "done": one("SELECT count(*) FROM queue WHERE state = 'done'"),
        "failed": one("SELECT count(*) FROM queue WHERE state = 'failed'"),
        "episodes_done": one("SELECT count(*) FROM episodes WHERE status = 'done'"),
        "facts": one("SELECT count(*) FROM facts"),
        "fact_texts_twice_current": one(
            "SELECT count(*) FROM (SELECT source_uuid, target_uuid, lower(fact) FROM facts "
            "WHERE expired_at IS NULL GROUP BY ALL HAVING count(*) > 1)"
        ),
        "invalidated": one("SELECT count(*) FROM facts WHERE expired_at IS NOT NULL"),
        "calls_per_episode": round(one("SELECT count(*) FROM llm_calls") / n, 2),
    }
    con.close()
    shutil.rmtree(scratch, ignore_errors=True)
    return {"episodes_per_s": n / elapsed, "seconds": elapsed, **checks}


def sample_tokens(server, embedder) -> dict:
    wb = open_wb(server, embedder, 1)
    lines = [
        json.loads(x)
        for x in (ROOT / "data/sample_episodes.jsonl").read_text().splitlines()
        if x.strip()
    ]
    for item in lines:
        wb.add_memory(
            item["name"],
            item["episode_body"],
            group_id=item.get("group_id"),
            source=item.get("source", "text"),
            source_description=item.get("source_description", ""),
            reference_time=item.get("reference_time"),
        )
    wb.process_pending()
    row = wb.store.fetchone(
        "SELECT count(*), sum(prompt_tokens), sum(completion_tokens) FROM llm_calls"
    )
    graph = wb.store.fetchone(
        "SELECT (SELECT count(*) FROM entities), (SELECT count(*) FROM facts)"
    )
    close_wb(wb)
    n = len(lines)
    return {
        "episodes": n,
        "calls_per_episode": row[0] / n,
        "prompt_tokens_per_episode": row[1] / n,
        "completion_tokens_per_episode": row[2] / n,
        "entities": graph[0],
        "facts": graph[1],
    }


def main() -> None:
    global BATCH_SIZE, DB_DIR
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--local-embedder", action="store_true")
    parser.add_argument("--fake-in-process", action="store_true")
    parser.add_argument(
        "--in-memory",
        action="store_true",
        help="DuckDB in memory instead of a file (about 6%% faster)",
    )
    parser.add_argument(
        "--history",
        type=int,
        default=0,
        help="also run the workers on a store holding this many episodes",
    )
    parser.add_argument(
        "--one-group",
        type=int,
        default=0,
        metavar="N",
        help="only: N episodes of one group through workbench serve (see the docstring)",
    )
    parser.add_argument("--runs", default="1,8,16", help="run sizes for --one-group")
    args = parser.parse_args()
    BATCH_SIZE = str(args.batch_size)
    if args.one_group:
        ideal = 1 / (2 * args.latency)
        print(f"one group, {args.one_group} episodes, LLM latency {args.latency}s, "
              f"{args.workers} workers, load average {os.getloadavg()[0]:.2f}")  # fmt: skip
        for size in [int(x) for x in args.runs.split(",")]:
            out = one_group(args.one_group, args.latency, size, args.workers)
            print(f"run {size:>2}: {out['episodes_per_s']:.2f} episodes/s = "
                  f"{out['episodes_per_s'] / ideal:.2f}x the one-at-a-time ideal "
                  f"{ideal:.2f}; {json.dumps(out)}")  # fmt: skip
        return
    scratch = None if args.in_memory else tempfile.TemporaryDirectory(prefix="bench_ingest_")
    DB_DIR = None if scratch is None else scratch.name
    if args.local_embedder:
        from workbench.embedding import LocalEmbedder

        embedder = LocalEmbedder()
        embedder.warm_up()
    else:
        embedder = HashEmbedder()

    def fake(latency: float):
        if not args.fake_in_process:
            return FakeProcess(latency)
        server = FakeLLMServer(latency=latency)
        server.set_responder(rule_llm.respond)
        return server

    where = "in process" if args.fake_in_process else "own process"
    print(
        f"fake LLM {where}, batch size {args.batch_size}, DuckDB "
        f"{'in memory' if DB_DIR is None else 'file'}, load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    with fake(0.0) as server:
        inline = run(server, embedder, args.episodes, 1, 8, inline=True)
        print(
            f"instant LLM, inline one at a time: {inline:.1f} episodes/s ({args.episodes} "
            f"episodes; {CPU_MS[-1]:.1f} ms of this process's CPU per episode)"
        )
        inline = run(server, embedder, args.episodes, args.workers, 8, inline=True)
        print(
            f"instant LLM, inline {args.workers} at a time (process_pending): "
            f"{inline:.1f} episodes/s ({CPU_MS[-1]:.1f} ms CPU per episode)"
        )
        pooled = run(server, embedder, args.episodes, args.workers, 8, inline=False)
        print(
            f"instant LLM, {args.workers} workers: {pooled:.1f} episodes/s "
            f"({CPU_MS[-1]:.1f} ms CPU per episode)"
        )
        if args.history:
            stored = run(
                server, embedder, args.episodes, args.workers, 8, inline=False, history=args.history
            )
            print(
                f"instant LLM, {args.workers} workers, {args.history} episodes already "
                f"stored: {stored:.1f} episodes/s ({CPU_MS[-1]:.1f} ms CPU per episode; "
                f"{stored / pooled:.2f} of the empty store's rate)"
            )
    with fake(args.latency) as server:
        # enough episodes and groups that the start and the tail do not dominate
        n = max(args.workers * 20, 40)
        slow = run(server, embedder, n, args.workers, args.workers * 4, inline=False)
        ideal = args.workers / (args.latency * 2)  # two LLM calls per episode
        print(
            f"LLM latency {args.latency}s, {args.workers} workers, {n} episodes: "
            f"{slow:.2f} episodes/s (ideal C/(2L) = {ideal:.2f}, ratio {slow / ideal:.2f})"
        )
    with FakeLLMServer() as server:
        server.set_responder(ReplayLLM())  # gold labels: realistic entity/fact counts
        print("sample data:", json.dumps(sample_tokens(server, embedder)))


if __name__ == "__main__":
    main()
