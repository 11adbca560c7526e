"""Latency of ``add_memory`` in process (no LLM configured, the configured local embedder): what
a caller waits for an episode to be accepted, which now includes splitting it into passages,
embedding them and indexing them.

Episodes are conversations of ``--turns`` turns of about 90 characters each (default 4: a
short exchange; a LoCoMo session has about 22), added one after another to a fresh DuckDB
file after ``--warm`` episodes not counted.

    .venv/bin/python bench/bench_add_memory.py [--episodes 300] [--turns 4] [--json]

Run it from another checkout (``PYTHONPATH=/path/to/other``) to compare versions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

WORDS = (
    "we talked about the trip to the lake and the new job at the clinic my sister wants "
    "to adopt a dog next spring and the garden needs water after the long dry week"
).split()


def conversation(rng: random.Random, turns: int) -> str:
    names = ("Ana", "Bo")
    lines = []
    for i in range(turns):
        words = [rng.choice(WORDS) for _ in range(rng.randint(12, 22))]
        lines.append(f"{names[i % 2]}: {' '.join(words).capitalize()}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=300)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--warm", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from workbench.config import load_settings
    from workbench.facade import Workbench

    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="bench_add_") as scratch:
        env = {"SVC_KNOWLEDGE_DB_PATH": str(Path(scratch) / "kb.duckdb")}
        settings = load_settings(env, env_file=None)
        load = os.getloadavg()[0]
        took = []
        with Workbench.open(settings, chat=None) as wb:
            wb.embedder.embed(["warm up"])
            for i in range(args.warm + args.episodes):
                body = conversation(rng, args.turns)
                started = time.perf_counter()
                wb.add_memory(f"chat {i}", body, group_id=f"g{i % 10}", source="message")
                if i >= args.warm:
                    took.append(time.perf_counter() - started)
    took.sort()
    result = {
        "episodes": len(took),
        "turns": args.turns,
        "p50_ms": round(1000 * took[len(took) // 2], 2),
        "p95_ms": round(1000 * took[int(len(took) * 0.95)], 2),
        "max_ms": round(1000 * took[-1], 2),
        "load": round(load, 2),
    }
    print(json.dumps(result) if args.json else result)


if __name__ == "__main__":
    main()
