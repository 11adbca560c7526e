"""History import benchmark: LongMemEval's haystack sessions as a conversation export.

1. Converts ``longmemeval_s_sub100.json.gz`` (``--data``; never committed) into the generic
   JSON-lines form (one message a line; each question's session its own conversation, so the
   4,784 sessions of the 100 questions all import) in a temporary folder.
2. Times ``workbench import FILE --format jsonl --session-gap-hours 0`` into a fresh DuckDB
   file (a child process, as a user runs it), then checks that a word search finds a session
   the moment it returned.
3. With ``--drain S``: opens the database as a service does (``Workbench.start``: the
   passages without a vector are queued), and for up to S seconds measures the passages
   embedded a second, ``search_memory`` p50/p95 while the backlog drains (a search every
   ``--search-every`` seconds), for 60 s before it starts and on the idle store after it, and
   the local model's own bulk rate on a sample of the same passages (``--sample`` texts in one
   call, as bench_embed.py measures a bulk call).

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python bench/bench_history_import.py [--data PATH]
        [--drain 180]
    ... bench_history_import.py --call-sizes 64,256,1024 [--sample 1024]   (the model alone)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this tree's workbench, whatever is installed
DATA = Path("/work/shared/data/longmemeval/longmemeval_s_sub100.json.gz")


def convert(data: Path, out: Path) -> tuple[int, int]:
    """The haystack sessions as generic JSON lines; (sessions, messages)."""
    questions = json.load(gzip.open(data))
    sessions = messages = 0
    with out.open("w", encoding="utf-8") as file:
        for q in questions:
            for sid, date, turns in zip(
                q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"], strict=True
            ):
                when = datetime.strptime(date[:10] + date[-6:], "%Y/%m/%d %H:%M").replace(
                    tzinfo=UTC
                )
                sessions += 1
                for turn in turns:
                    line = {"conversation_id": f"{q['question_id']}/{sid}", "role": turn["role"],
                            "text": turn["content"], "time": when.isoformat(),
                            "title": sid}  # fmt: skip
                    file.write(json.dumps(line) + "\n")
                    messages += 1
    return sessions, messages


def call_sizes(data: Path, sizes: list[int], sample: int) -> dict:
    """The local model's passages a CPU-second and a wall-second, embedding ``sample`` passages
    of the sessions in calls of each size (how large a passage writer's bulk call must be)."""
    from workbench.config import load_settings
    from workbench.embedding import build_embedder
    from workbench.ingest.passages import split_episode

    questions = json.load(gzip.open(data))
    texts: list[str] = []
    for turns in (s for q in questions for s in q["haystack_sessions"]):
        body = "\n".join(f"{t['role']}: {' '.join(t['content'].split())}" for t in turns)
        texts += [p.text for p in split_episode(body, "message")]
        if len(texts) >= sample:
            break
    texts = texts[:sample]
    embedder = build_embedder(load_settings(env_file=None))
    embedder.embed(texts[:32])
    out = {}
    for size in sizes:
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(0, len(texts), size):
            embedder.embed(texts[i : i + size])
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        out[size] = {"per_cpu_second": round(len(texts) / cpu, 1),
                     "per_second": round(len(texts) / wall, 1)}  # fmt: skip
    return {"texts": len(texts), "mean_chars": round(statistics.mean(map(len, texts))),
            "calls": out, "load": [round(x, 2) for x in os.getloadavg()]}  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def timed_import(path: Path, db: Path) -> tuple[float, dict]:
    """Wall seconds of the command (and its CPU seconds in the report), its JSON summary."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SVC_KNOWLEDGE_LOG_LEVEL": "WARNING"}
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    command = [sys.executable, "-m", "service.control.cli", "import", str(path), "--format",
               "jsonl", "--session-gap-hours", "0", "--quiet", "--db", str(db)]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"import failed: {done.stderr[-2000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    report = json.loads(done.stdout)
    report["cpu_seconds"] = round(after.ru_utime - cpu.ru_utime + after.ru_stime - cpu.ru_stime, 1)
    return seconds, report


def drain(db: Path, seconds: float, search_every: float, sample: int) -> dict:
    from workbench.config import load_settings
    from workbench.facade import Workbench

    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": str(db)}, env_file=None)
    wb = Workbench.open(settings, chat=None)
    try:
        texts = [r[0] for r in wb.store.fetchall(
            f"SELECT text FROM passages USING SAMPLE {sample} ROWS")]  # fmt: skip
        mean_chars = statistics.mean(len(t) for t in texts)
        wb.embedder.embed(texts[:32])  # loaded
        started = time.perf_counter()
        wb.embedder.embed(texts)
        bulk_rate = len(texts) / (time.perf_counter() - started)
        wb.search_memory("warm up the query path", max_results=5)
        baseline = searches(wb, 60, search_every)  # no drain yet: the same store, idle
        before = wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0]
        wb.start()
        waiting = wb.passages.waiting()
        latencies = searches(wb, seconds, search_every)
        status = wb.get_queue_status()["passages_without_vector"]
        after = wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0]
        idle = [] if wb.passages.waiting() else searches(wb, 20, search_every)
    finally:
        wb.close()
    return {
        "sample_texts": len(texts), "sample_mean_chars": round(mean_chars),
        "embedder_bulk_rate": round(bulk_rate, 1), "waiting_at_start": waiting,
        "embedded": after - before, "drain_seconds": seconds,
        "drain_rate": round((after - before) / seconds, 1),
        "status_after": status,
        "search_p50_ms_during_drain": round(percentile(latencies, 0.5) * 1000, 1),
        "search_p95_ms_during_drain": round(percentile(latencies, 0.95) * 1000, 1),
        "searches_during_drain": len(latencies),
        "search_p50_ms_before_drain": round(percentile(baseline, 0.5) * 1000, 1),
        "search_p95_ms_before_drain": round(percentile(baseline, 0.95) * 1000, 1),
        "search_p95_ms_idle": round(percentile(idle, 0.95) * 1000, 1) if idle else None,
    }  # fmt: skip


QUESTIONS = ["what did I say about my team outing", "recipe for banana bread",
             "when did I start learning guitar", "my dog's vet appointment",
             "how much was the car repair"]  # fmt: skip


def searches(wb, seconds: float, every: float) -> list[float]:
    out: list[float] = []
    stop = time.monotonic() + seconds
    i = 0
    while time.monotonic() < stop:
        started = time.perf_counter()
        wb.search_memory(QUESTIONS[i % len(QUESTIONS)], max_results=10)
        out.append(time.perf_counter() - started)
        i += 1
        time.sleep(every)
    return out


def word_search(db: Path) -> bool:
    """Whether a word search finds a passage the import wrote (its own words), on the store
    as the command left it (vectors or not)."""
    from workbench.config import load_settings
    from workbench.facade import Workbench

    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": str(db)}, env_file=None)
    with Workbench.open(settings, chat=None) as wb:
        uuid, text = wb.store.fetchone(
            "SELECT uuid, text FROM passages ORDER BY created_at DESC, uuid LIMIT 1"
        )
        query = " ".join(text.split()[2:14])
        hits = wb.search_memory(query, max_results=10, kinds=["passage"])["results"]
        return any(h["uuid"] == uuid for h in hits)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--drain", type=float, default=0, help="seconds of drain to measure")
    parser.add_argument("--search-every", type=float, default=0.5)
    parser.add_argument("--sample", type=int, default=1024)
    parser.add_argument(
        "--call-sizes", help="only this: the model's rate in calls of these sizes (64,256,1024)"
    )
    args = parser.parse_args()
    if args.call_sizes:
        sizes = [int(x) for x in args.call_sizes.split(",")]
        print(json.dumps(call_sizes(args.data, sizes, args.sample), indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="bench-history-") as folder:
        path, db = Path(folder, "history.jsonl"), Path(folder, "history.duckdb")
        sessions, messages = convert(args.data, path)
        load = os.getloadavg()
        seconds, report = timed_import(path, db)
        size = round(path.stat().st_size / 2**20, 1)
        out = {"sessions": sessions, "messages": messages, "file_mb": size,
               "import_seconds": round(seconds, 1), "load_before": [round(x, 2) for x in load],
               "report": {k: v for k, v in report.items() if k not in ("errors",)},
               "found_by_words_after_import": word_search(db)}  # fmt: skip
        print(json.dumps(out, indent=2), flush=True)
        again, second = timed_import(path, db)
        created = second.get("episodes_created")
        print(json.dumps({"reimport_seconds": round(again, 1), "reimport_created": created}))
        if args.drain:
            print(json.dumps(drain(db, args.drain, args.search_every, args.sample), indent=2))
        print(json.dumps({"load_after": [round(x, 2) for x in os.getloadavg()]}), flush=True)


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
