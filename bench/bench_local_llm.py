"""Full local mode as a new user runs it: ``workbench serve --local-llm`` (the bundled SmolLM2
behind llama.cpp's server), a few sample episodes from queued to done.

    .venv/bin/python bench/bench_local_llm.py [--episodes 3] [--busy 1] [--json]
        [--env SVC_KNOWLEDGE_LLM_PROFILE=hosted] [--timeout 600] [--score]

The service runs as its own process on a fresh DuckDB file, with the in-process local
embedder; the episodes are the first ``--episodes`` of ``data/sample_episodes.jsonl``, posted
to ``/tools/add_memory`` at once. ``--busy N`` starts N processes that spin on the CPU for the
whole run (a machine shared with other work). ``--env NAME=VALUE`` passes a setting to the
service (repeatable), e.g. ``SVC_KNOWLEDGE_LLM_PROFILE=hosted`` for the full prompts (``serve
--local-llm`` uses the ``local`` profile unless told otherwise). ``--score`` takes the
episodes from the labelled set ``data/extraction_labelled.jsonl`` instead and scores what was
extracted against it (micro precision/recall/F1 of entities and facts, as the tuning
notebook does).

Reported: seconds from the first post until every episode is done or failed, per episode,
and per LLM call (from the ``llm_calls`` rows the service wrote) the prompt and completion
tokens, the latency and the completion tokens per second.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import httpx

ROOT = Path(__file__).resolve().parents[1]


def spin(stop: multiprocessing.synchronize.Event) -> None:  # type: ignore[name-defined]
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


ADD_MEMORY = ("name", "episode_body", "group_id", "source", "source_description", "reference_time")


def episodes(n: int, labelled: bool) -> list[dict]:
    name = "extraction_labelled.jsonl" if labelled else "sample_episodes.jsonl"
    lines = (ROOT / "data" / name).read_text(encoding="utf-8").splitlines()
    return [{k: v for k, v in json.loads(line).items() if k in ADD_MEMORY} for line in lines[:n]]


def score(db: Path, n: int) -> dict:
    """Micro P/R/F1 of the extraction stored in ``db`` against the first ``n`` labelled."""
    from workbench.eval.extraction import (
        gold_by_key,
        load_labelled,
        predictions_from_rows,
        score_set,
    )

    gold = gold_by_key(load_labelled(ROOT / "data" / "extraction_labelled.jsonl")[:n])
    with duckdb.connect(str(db), read_only=True) as con:
        tables = [
            rows(con, f"SELECT * FROM {t}") for t in ("episodes", "entities", "facts", "mentions")
        ]
    result = score_set(predictions_from_rows(*tables), gold, ended_facts=False)
    return {
        kind: {
            k: round(getattr(getattr(result, kind), k), 3) for k in ("precision", "recall", "f1")
        }
        for kind in ("entities", "facts")
    }


def start_service(db: Path, log: Path, extra_env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    env.update(extra_env)
    command = [sys.executable, "-m", "service.control.cli", "serve", "--local-llm", "--db", str(db)]
    command += ["--port", str(port), "--metrics-port", "0"]
    with log.open("ab") as sink:
        proc = subprocess.Popen(
            command, env=env, cwd=db.parent, stdout=sink, stderr=subprocess.STDOUT
        )
    return proc, f"http://127.0.0.1:{port}"


def wait_ready(proc: subprocess.Popen, http: httpx.Client, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"serve exited:\n{log.read_text()[-3000:]}")
        try:
            if http.get("/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise SystemExit(f"serve not ready in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def wait_finished(http: httpx.Client, total: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    counts: dict = {}
    while time.monotonic() < deadline:
        counts = http.post("/tools/get_queue_status", json={}).json()["counts"]
        if counts.get("done", 0) + counts.get("failed", 0) >= total:
            break
        time.sleep(0.5)
    return counts


def rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict]:
    cur = con.execute(sql)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def call_rows(db: Path) -> list[dict]:
    with duckdb.connect(str(db), read_only=True) as con:
        return rows(
            con,
            "SELECT prompt_name, prompt_tokens, completion_tokens, latency_seconds, status "
            "FROM llm_calls ORDER BY id",
        )


def summarise(rows: list[dict], seconds: float, counts: dict, n: int) -> dict:
    ok = [r for r in rows if r["status"] == "success" and r["latency_seconds"]]
    rate = [r["completion_tokens"] / (r["latency_seconds"]) for r in ok if r["completion_tokens"]]
    return {
        "episodes": n,
        "done": counts.get("done", 0),
        "failed": counts.get("failed", 0),
        "seconds": round(seconds, 1),
        "seconds_per_episode": round(seconds / n, 1),
        "calls": len(rows),
        "calls_ok": len(ok),
        "prompt_tokens_mean": round(statistics.mean(r["prompt_tokens"] or 0 for r in rows), 1)
        if rows
        else 0,
        "completion_tokens_mean": round(
            statistics.mean(r["completion_tokens"] or 0 for r in rows), 1
        )
        if rows
        else 0,
        "latency_s_median": round(statistics.median(r["latency_seconds"] for r in ok), 2)
        if ok
        else None,
        "completion_tokens_per_s_median": round(statistics.median(rate), 1) if rate else None,
        "errors": sorted({r["status"] for r in rows} - {"success"}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--busy", type=int, default=0, help="CPU-spinning processes beside it")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--score", action="store_true", help="labelled episodes, scored")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.env)
    stop = multiprocessing.Event()
    busy = [
        multiprocessing.Process(target=spin, args=(stop,), daemon=True) for _ in range(args.busy)
    ]
    for proc in busy:
        proc.start()
    with tempfile.TemporaryDirectory(prefix="bench_local_llm_") as scratch:
        db, log = Path(scratch) / "kb.duckdb", Path(scratch) / "serve.log"
        service, url = start_service(db, log, extra)
        try:
            with httpx.Client(base_url=url, timeout=60) as http:
                wait_ready(service, http, log, timeout=300)
                eps = episodes(args.episodes, args.score)
                start = time.monotonic()
                for ep in eps:
                    http.post("/tools/add_memory", json=ep).raise_for_status()
                counts = wait_finished(http, len(eps), args.timeout)
                seconds = time.monotonic() - start
        finally:
            service.send_signal(signal.SIGTERM)
            service.wait(60)
            stop.set()
            for proc in busy:
                proc.join(5)
        result = summarise(call_rows(db), seconds, counts, len(eps))
        if args.score:
            result["score"] = score(db, len(eps))
    result.update(busy=args.busy, env=extra, load=os.getloadavg()[0])
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
