"""Server time of the memory browser's requests (``/ui``) on a store of 3 groups and 1,000
episodes with their facts: every API call each page makes, timed through the real app in
process (Litestar's test client: no network), ``--repeat`` times each; p50, p95 and max in ms,
and whether every call stays within ``--budget`` ms (exit 1 when one does not).

The store: ``--episodes`` conversations (no LLM: they wait in the queue, their passages are
stored and indexed) spread over 3 groups, and ``--facts-per-episode`` facts per episode
imported as ``workbench import`` rows (no LLM), one in five of them superseded, about a person
of the group and ``--entities`` other entities per group (one entity, the group's user, is in
every fact of its group: the largest neighbourhood). The embedder is the deterministic hash
embedder (no model to load); ``--local`` uses the configured local model instead.

    nice .venv/bin/python bench/bench_ui.py [--episodes 1000] [--repeat 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

GROUPS = ("alice", "bob", "carol")
PLACES = ("Lisbon", "Porto", "Berlin", "Munich", "Osaka", "Lima", "Oslo", "Quito")
WORDS = (
    "we talked about the trip to the lake and the new job at the clinic my sister wants "
    "to adopt a dog next spring and the garden needs water after the long dry week"
).split()


def build(wb, args) -> None:
    rng = random.Random(7)
    lines: dict[str, list[dict]] = {g: [] for g in GROUPS}
    for i in range(args.episodes):
        group = GROUPS[i % len(GROUPS)]
        turns = [
            f"{('user', 'assistant')[t % 2]}: {' '.join(rng.choices(WORDS, k=16)).capitalize()}."
            for t in range(4)
        ]
        wb.add_memory(
            f"chat {i}",
            "\n".join(turns),
            group_id=group,
            source="message",
            reference_time=f"2025-{1 + i % 12:02d}-{1 + i % 28:02d}T10:00:00Z",
        )
        for k in range(args.facts_per_episode):
            other = f"{rng.choice(PLACES)} {rng.randrange(args.entities)}"
            row = {
                "type": "fact", "source": group.title(), "target": other, "relation": "VISITED",
                "fact": f"{group.title()} visited {other} ({i}.{k})",
                "valid_at": f"2024-{1 + k % 12:02d}-01T00:00:00Z",
            }  # fmt: skip
            if (i + k) % 5 == 0:
                row["invalid_at"] = "2025-06-01T00:00:00Z"
            lines[group].append(row)
    for group, rows in lines.items():
        for start in range(0, len(rows), 5000):
            wb.import_memories(rows[start : start + 5000], group_id=group)


def page_calls(wb) -> dict[str, list[tuple[str, dict]]]:
    """Every request of every page (the arguments the page sends)."""
    group = GROUPS[0]
    episode = wb.pages.list_episodes(group, limit=1)["episodes"][0]["uuid"]
    user = wb.pages.list_entities(group, name_contains=group)["entities"][0]["uuid"]
    total = wb.pages.list_episodes(group, limit=1)["total"]
    page = {"group_id": group, "limit": 25}
    return {
        "groups": [("get_group_stats", {})],
        "timeline": [
            ("list_episodes", {**page, "offset": 0}),
            ("list_episodes", {**page, "offset": max(0, total - 25)}),  # the oldest page
            ("get_episode", {"uuid": episode}),
        ],
        "facts": [
            ("list_facts", {**page, "state": "all", "offset": 0}),
            ("list_facts", {**page, "state": "current", "offset": 500}),
            ("list_facts", {**page, "state": "superseded", "offset": 0}),
        ],
        "entities": [
            ("list_entities", {**page, "offset": 0}),
            ("list_entities", {**page, "name_contains": "lis", "offset": 0}),
            ("get_entity", {"uuid": user, "max_facts": 50}),
        ],
        "search": [("search_memory", {"query": "trip to the lake", "max_results": 20})],
        "health": [("get_knowledge_health", {}), ("get_queue_status", {})],
    }


def measure(client, calls, repeat: int) -> list[dict]:
    rows = []
    for page, requests in calls.items():
        for tool, body in requests:
            took = []
            for _ in range(repeat):
                started = time.perf_counter()
                response = client.post(f"/tools/{tool}", json=body)
                took.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, response.text
            took.sort()
            rows.append({
                "page": page, "tool": tool, "args": body,
                "p50_ms": round(statistics.median(took), 1),
                "p95_ms": round(took[max(0, int(len(took) * 0.95) - 1)], 1),
                "max_ms": round(took[-1], 1),
            })  # fmt: skip
    for path in ("/ui", "/ui/app.js", "/ui/session", "/tools"):
        took = []
        for _ in range(repeat):
            started = time.perf_counter()
            assert client.get(path).status_code == 200
            took.append((time.perf_counter() - started) * 1000)
        took.sort()
        rows.append({
            "page": "load", "tool": f"GET {path}", "args": {},
            "p50_ms": round(statistics.median(took), 1),
            "p95_ms": round(took[max(0, int(len(took) * 0.95) - 1)], 1),
            "max_ms": round(took[-1], 1),
        })  # fmt: skip
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--facts-per-episode", type=int, default=3)
    parser.add_argument("--entities", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--budget", type=float, default=300.0)
    parser.add_argument("--local", action="store_true", help="the configured local embedder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from litestar.testing import TestClient

    from service.api.app import create_app
    from workbench.config import load_settings
    from workbench.facade import Workbench
    from workbench.fakes.embedder import HashEmbedder

    with tempfile.TemporaryDirectory(prefix="bench_ui_") as scratch:
        env = {
            "SVC_KNOWLEDGE_DB_PATH": str(Path(scratch) / "kb.duckdb"),
            "SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE": "0",
        }
        settings = load_settings(env, env_file=None)
        embedder = None if args.local else HashEmbedder()
        started = time.perf_counter()
        with Workbench.open(settings, chat=None, embedder=embedder) as wb:
            build(wb, args)
            built = time.perf_counter() - started
            counts = wb.get_status()["graph"]
            with TestClient(create_app(wb, settings), base_url="http://127.0.0.1:8000") as client:
                rows = measure(client, page_calls(wb), args.repeat)
    worst = max(r["max_ms"] for r in rows)
    report = {
        "store": counts, "build_seconds": round(built, 1), "repeat": args.repeat,
        "load_1min": round(os.getloadavg()[0], 2), "budget_ms": args.budget,
        "worst_ms": worst, "within_budget": worst <= args.budget, "calls": rows,
    }  # fmt: skip
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"store {counts}, built in {built:.1f} s; load {report['load_1min']}")
        print(f"{'page':<9} {'request':<22} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7}")
        for r in rows:
            print(
                f"{r['page']:<9} {r['tool']:<22} {r['p50_ms']:>7} {r['p95_ms']:>7} {r['max_ms']:>7}"
            )
        print(
            f"worst {worst} ms: {'within' if report['within_budget'] else 'OVER'} {args.budget} ms"
        )
    return 0 if report["within_budget"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
