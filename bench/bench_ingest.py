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
        [--in-memory]

Each run writes a fresh DuckDB file in a temporary directory, as the service does by default
(``--in-memory`` keeps DuckDB in memory: about 6% faster, since a commit then writes no log).

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
import tempfile
import time
from dataclasses import dataclass
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
    args = parser.parse_args()
    BATCH_SIZE = str(args.batch_size)
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
