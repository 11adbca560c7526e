"""``bench_locomo.py --with-sessions``: the LoCoMo conversations as facts (one per observation,
imported) plus every session added through ``add_memory`` as a ``message`` episode with no LLM,
each question asked through ``search_memory``. See ``bench_locomo.py``'s docstring."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench_locomo import (
    CATEGORIES,
    K,
    import_lines,
    passage_turns,
    questions,
    scores,
    session_episodes,
    summary,
    turn_ids,
)

# the near-duplicate thresholds compared (0.8, the shipped one, with no time words read:
# search_memory as it ranked before the time boosts)
THRESHOLDS = (
    None,
    0.6,
    0.7,
    0.8,
    0.9,
    1.0,
)


def run_recall(
    convs: list[dict[str, Any]], db: Path, model: str | None, turns: int | None, http: bool
) -> dict[str, Any]:
    from workbench.config import load_settings
    from workbench.facade import Workbench
    from workbench.ingest import passages

    if turns:
        passages.TURNS = turns
    env = {"SVC_KNOWLEDGE_DB_PATH": str(db)}
    if model:
        env["SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL"] = model
    settings = load_settings(env, env_file=None)
    load = os.getloadavg()[0]
    with Workbench.open(settings, chat=None) as wb:
        wb.embedder.embed(["warm up"])
        facts = import_facts(wb, convs)
        turns_of, added = add_sessions(wb, convs)
        started = time.perf_counter()
        wb.passages.flush()  # every passage embedded (the thread ran during the adds too)
        embedded_s = time.perf_counter() - started
        result = evaluate(wb, convs, turns_of)
    result |= {"facts": facts, "episodes": len(added), "load": round(load, 2),
               "model": settings.local_embedder_model, "turns_per_passage": passages.TURNS,
               "add_memory_p50_ms": percentile(added, 0.5),
               "add_memory_p95_ms": percentile(added, 0.95),
               "embedding_left_after_adds_s": round(embedded_s, 1)}  # fmt: skip
    if http:
        result["http"] = ask_over_http(db, env, convs, turns_of)
    return result


def import_facts(wb, convs) -> int:
    lines = []
    for i, sample in enumerate(convs):
        lines += import_lines(sample, f"conv-{i}")[0]
    return wb.import_jsonl([json.dumps(line) for line in lines])["facts_created"]


def add_sessions(wb, convs) -> tuple[dict[str, dict[str, set[str]]], list[float]]:
    """Every session through ``add_memory``; per group, the turns of each fact text and of
    each passage uuid; and each ``add_memory``'s seconds."""
    from workbench.ingest.passages import passage_uuid

    turns_of: dict[str, dict[str, set[str]]] = {}
    took = []
    for i, sample in enumerate(convs):
        group = f"conv-{i}"
        turns = dict(import_lines(sample, group)[1])
        for episode, ids in session_episodes(sample, group):
            started = time.perf_counter()
            uuid = wb.add_memory(**episode)["episode_uuid"]
            took.append(time.perf_counter() - started)
            for position, held in enumerate(passage_turns(episode["episode_body"], ids)):
                turns[passage_uuid(uuid, position)] = held
        turns_of[group] = turns
    return turns_of, took


def hit_turns(hit: dict, turns: dict[str, set[str]]) -> set[str]:
    key = hit["fact"] if hit["kind"] == "fact" else hit["uuid"]
    return turns.get(key, set())


def evaluate(wb, convs, turns_of) -> dict[str, Any]:
    sums: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    latencies = []
    for i, sample in enumerate(convs):
        group = f"conv-{i}"
        turns = turns_of[group]
        for q in questions(sample):
            evidence = turn_ids(q["evidence"])
            started = time.perf_counter()
            hits = wb.search_memory(q["question"], group_ids=[group], max_results=K)["results"]
            latencies.append(time.perf_counter() - started)
            ranked = {"search_memory": [hit_turns(h, turns) for h in hits]}
            ranked |= variants(wb.search, q["question"], group, turns)
            label = CATEGORIES.get(q["category"], str(q["category"]))
            for method, ranks in ranked.items():
                for key in ("all", label):
                    sums[method][key].append(scores(ranks, evidence))
    return {"questions": len(sums["search_memory"]["all"]),
            "search_p50_ms": percentile(latencies, 0.5),
            "search_p95_ms": percentile(latencies, 0.95),
            "methods": summary(sums)}  # fmt: skip


def variants(engine, question: str, group: str, turns) -> dict[str, list[set[str]]]:
    """The same candidates merged other ways (no access recorded)."""
    from workbench.search.filters import DEFAULT_STATES, SearchFilters
    from workbench.search.recall import OVERSAMPLE, _candidates, fuse

    filters = SearchFilters(group_ids=(group,), states=DEFAULT_STATES,
                            include_invalidated=False, now=engine.clock())  # fmt: skip
    ranked = {
        kind: engine.ranked(kind, question, K * OVERSAMPLE, filters, engine.searcher.weights)
        for kind in ("fact", "passage")
    }
    rows = {(kind, row["uuid"]): row for kind, hits in ranked.items() for row, *_ in hits}
    cands = _candidates(ranked)

    def as_turns(chosen) -> list[set[str]]:
        out = []
        for c in chosen:
            row = rows[(c.kind, c.uuid)]
            out.append(turns.get(row["fact"] if c.kind == "fact" else c.uuid, set()))
        return out

    out = {f"near {t} within a kind": as_turns(fuse(cands, K, t)) for t in THRESHOLDS}
    out["near 0.8 across kinds"] = as_turns(fuse(cands, K, 0.8, across_kinds=True))
    for kind in ("fact", "passage"):
        out[f"{kind}s only"] = as_turns(fuse([c for c in cands if c.kind == kind], K, None))
    return out


def ask_over_http(db: Path, env: dict[str, str], convs, turns_of) -> dict[str, Any]:
    """The questions asked of a real ``workbench serve`` on the database, over HTTP."""
    import httpx

    port, metrics = free_port(), free_port()
    command = [sys.executable, "-m", "service.control.cli", "serve", "--db", str(db), "--port",
               str(port), "--metrics-port", str(metrics), "--log-format", "text"]  # fmt: skip
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    env = env | {"SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE": "0"}  # the questions come back to back
    server = subprocess.Popen(command, env=clean | env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as client:
            wait_ready(client, server)
            return http_scores(client, convs, turns_of)
    finally:
        server.terminate()
        server.wait(timeout=60)


def http_scores(client, convs, turns_of) -> dict[str, Any]:
    sums: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    latencies = []
    for i, sample in enumerate(convs):
        group = f"conv-{i}"
        for q in questions(sample):
            body = {"query": q["question"], "group_ids": [group], "max_results": K}
            started = time.perf_counter()
            response = client.post("/tools/search_memory", json=body)
            latencies.append(time.perf_counter() - started)
            response.raise_for_status()
            ranks = [hit_turns(h, turns_of[group]) for h in response.json()["results"]]
            label = CATEGORIES.get(q["category"], str(q["category"]))
            for key in ("all", label):
                sums["search_memory (HTTP)"][key].append(scores(ranks, turn_ids(q["evidence"])))
    return {"p50_ms": percentile(latencies, 0.5), "p95_ms": percentile(latencies, 0.95),
            "methods": summary(sums)}  # fmt: skip


def wait_ready(client, server, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"workbench serve exited with {server.returncode}")
        try:
            if client.get("/health").status_code in (200, 503):
                return
        except Exception:  # noqa: BLE001 - not listening yet
            pass
        time.sleep(0.5)
    raise RuntimeError("workbench serve did not answer /health in time")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def percentile(seconds: list[float], q: float) -> float:
    ordered = sorted(seconds)
    return round(1000 * ordered[min(len(ordered) - 1, int(len(ordered) * q))], 1)
