"""Reliability benchmark: does ingestion lose or duplicate anything when the process is killed,
or when the LLM misbehaves?

1. **Crash test.** A client adds ``--episodes`` episodes to a real ``workbench serve`` process
   (each with an ``Idempotency-Key``, retried until it is answered), while the benchmark
   SIGKILLs the process ``--kills`` times at random moments and starts it again. Then it waits
   until every episode is settled.
2. **Fault test.** The same service in one process, with an LLM that answers ``--fault-rate`` of
   its calls with a rate limit, a server error or malformed JSON; then the failed episodes are
   re-queued once (``retry_failed_episodes``) and settle again.

Each prints: accepted (answered 200), processed (done), lost (accepted but missing or never
settled), duplicated (an episode stored twice, or a fact written twice by one episode) and failed
with their reasons. The LLM is the rule-based fake behind a real HTTP server; the embedder is the
local model. Figures in ``docs/performance.md``.

    .venv/bin/python bench/bench_reliability.py [--episodes 300] [--kills 5] [--fault-rate 0.3]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import duckdb
import httpx

from workbench.fakes import rule_llm
from workbench.fakes.chat_server import FakeLLMServer, FakeReply, chat_settings_env

SETTLED = ("done", "failed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Serve:
    """One ``workbench serve`` process on free ports."""

    def __init__(self, env: dict[str, str], db: Path, log: Path):
        self.port = free_port()
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
        with log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "service.control.cli",
                    "serve",
                    "--port",
                    str(self.port),
                    "--metrics-port",
                    str(free_port()),
                    "--db",
                    str(db),
                ],
                env={**clean, **env},
                cwd=db.parent,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"serve exited with {self.proc.returncode}")
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise SystemExit("serve did not become ready")

    def stop(self, sig: int) -> None:
        self.proc.send_signal(sig)
        self.proc.wait(120)


class Adder(threading.Thread):
    """Adds the episodes one by one to whichever process is up, retrying each (same
    ``Idempotency-Key``) until it is answered."""

    def __init__(self, texts: list[str], current: list[Serve]):
        super().__init__(daemon=True)
        self.texts, self.current = texts, current
        self.accepted: dict[str, str] = {}  # key -> episode uuid

    def run(self) -> None:
        for i, text in enumerate(self.texts):
            key = f"reliability-{i}"
            body = {"name": f"e{i}", "episode_body": text, "group_id": f"g{i % 8}"}
            while key not in self.accepted:
                try:
                    response = httpx.post(
                        f"{self.current[-1].url}/tools/add_memory",
                        json=body,
                        headers={"Idempotency-Key": key},
                        timeout=10,
                    )
                    if response.status_code == 200:
                        self.accepted[key] = response.json()["episode_uuid"]
                except httpx.TransportError:
                    time.sleep(0.1)  # killed meanwhile: the next process takes the retry


def texts(n: int) -> list[str]:
    people = ["Maria Keller", "Tom", "Ana", "Kenji", "Li Wei", "Sofia", "Omar", "Lena"]
    places = ["Acme", "Globex", "Initech", "Munich", "Berlin", "Lisbon", "Osaka", "Atlas"]
    verbs = ["works at", "lives in", "uses", "leads", "visited"]
    rng = random.Random(7)
    return [
        f"{rng.choice(people)} {rng.choice(verbs)} {rng.choice(places)}. Note {i}."
        for i in range(n)
    ]


def report(title: str, db: Path, accepted: dict[str, str]) -> dict[str, int]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("SELECT uuid, name, status FROM episodes").fetchall()
        reasons = Counter(
            r[0]
            for r in con.execute(
                "SELECT coalesce(error_type, '?') FROM queue WHERE state = 'failed'"
            ).fetchall()
        )
        doubled_facts = con.execute(
            """SELECT count(*) FROM (SELECT episode_uuid, source_uuid, target_uuid, fact
               FROM facts GROUP BY ALL HAVING count(*) > 1)"""
        ).fetchone()[0]
    finally:
        con.close()
    by_uuid = {uuid: status for uuid, _, status in rows}
    names = Counter(name for _, name, _ in rows)
    wanted = set(accepted.values())
    figures = {
        "accepted": len(wanted),
        "processed": sum(1 for u in wanted if by_uuid.get(u) == "done"),
        "lost": sum(1 for u in wanted if by_uuid.get(u) not in SETTLED),
        "duplicated": sum(n - 1 for n in names.values() if n > 1) + doubled_facts,
        "failed": sum(1 for u in wanted if by_uuid.get(u) == "failed"),
    }
    detail = ", ".join(f"{k} {v}" for k, v in figures.items())
    print(f"{title}: {detail}; failed by reason: {dict(reasons) or '-'}")
    return figures


def wait_settled(url: str, total: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = httpx.post(f"{url}/tools/get_queue_status", json={}, timeout=30).json()["counts"]
        if sum(counts.get(s, 0) for s in SETTLED) >= total:
            return
        time.sleep(0.5)
    print(f"not settled after {timeout:.0f} s: {counts}")


def crash_test(args, llm: FakeLLMServer, workdir: Path) -> dict[str, int]:
    db, log = workdir / "crash.duckdb", workdir / "crash.log"
    env = chat_settings_env(
        llm, SVC_KNOWLEDGE_QUEUE_POLL_SECONDS="0.1", SVC_KNOWLEDGE_LLM_MAX_RETRIES="1"
    )
    llm.set_responder(rule_llm.respond)
    llm.latency = args.latency
    rng = random.Random(args.seed)
    current = [Serve(env, db, log)]
    current[-1].wait_ready()
    adder = Adder(texts(args.episodes), current)
    adder.start()
    for kill in range(1, args.kills + 1):
        time.sleep(rng.uniform(0.5, args.max_kill_delay))
        current[-1].stop(signal.SIGKILL)
        print(f"  kill {kill}: {len(adder.accepted)} accepted so far")
        current.append(Serve(env, db, log))
        current[-1].wait_ready()
    adder.join()
    wait_settled(current[-1].url, args.episodes)
    current[-1].stop(signal.SIGTERM)
    return report(f"crash test ({args.kills} SIGKILLs)", db, adder.accepted)


def faulty(rate: float, rng: random.Random):
    faults = [
        FakeReply.rate_limited(retry_after=0.05),
        FakeReply.server_error(),
        FakeReply.text("{not json"),
    ]
    lock = threading.Lock()

    def respond(request: dict):
        with lock:
            roll = rng.random()
        if roll < rate:
            return faults[int(roll / rate * len(faults)) % len(faults)]
        return rule_llm.respond(request)

    return respond


def fault_test(args, llm: FakeLLMServer, workdir: Path) -> dict[str, int]:
    db, log = workdir / "faults.duckdb", workdir / "faults.log"
    env = chat_settings_env(
        llm,
        SVC_KNOWLEDGE_QUEUE_POLL_SECONDS="0.1",
        SVC_KNOWLEDGE_LLM_MAX_RETRIES="0",
        SVC_KNOWLEDGE_QUEUE_MAX_ATTEMPTS="3",
    )
    llm.set_responder(faulty(args.fault_rate, random.Random(args.seed)))
    llm.latency = 0.0
    serve = Serve(env, db, log)
    serve.wait_ready()
    adder = Adder(texts(args.episodes), [serve])
    adder.run()
    wait_settled(serve.url, args.episodes)
    serve.stop(signal.SIGTERM)
    first = report(f"fault test ({args.fault_rate:.0%} of LLM calls fail)", db, adder.accepted)
    serve = Serve(env, db, log)
    serve.wait_ready()
    requeued = httpx.post(f"{serve.url}/tools/retry_failed_episodes", json={}, timeout=30).json()[
        "episode_uuids"
    ]
    wait_settled(serve.url, args.episodes)
    serve.stop(signal.SIGTERM)
    report(f"  after re-queueing the {len(requeued)} failed once", db, adder.accepted)
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--max-kill-delay", type=float, default=4.0)
    parser.add_argument("--latency", type=float, default=0.05, help="LLM latency (s)")
    parser.add_argument("--fault-rate", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-faults", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer() as llm:
        workdir = Path(tmp)
        crash = crash_test(args, llm, workdir)
        fault = None if args.skip_faults else fault_test(args, llm, workdir)
    bad = crash["lost"] or crash["duplicated"] or (fault and (fault["lost"] or fault["duplicated"]))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
