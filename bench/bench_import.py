"""Bulk import benchmark: ``workbench import`` of a conversation-sized file with the default
(local) embedder, on a fresh DuckDB file.

The file is generated: ``--facts`` facts (default 2,541, the size of a public long-conversation
benchmark imported one observation per fact) about 10 conversations of two people, 15-25 words
each, as JSON lines of the import format. Reported: the command's wall time (process start,
model load and database included), the import's own time, texts embedded per second, and the
peak RSS.

    .venv/bin/python bench/bench_import.py [--facts 2541] [--repeat 2]
    .venv/bin/python bench/bench_import.py --facts 200000 --parquet-vectors --repeat 1

With ``--parquet-vectors`` the same facts come as Parquet with an ``embedding`` column of
random unit vectors (384 dims): a migration from another store, no model time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEOPLE = ["Caroline", "Melanie", "Jon", "Gina", "Audrey", "Andrew", "Tim", "John", "Maria",
          "Joanna", "Nate", "Deborah", "Evan", "Sam", "Priya", "Kenji", "Lucia"]  # fmt: skip
THINGS = ["pottery class", "support group", "adoption agency", "camping trip", "painting",
          "marathon", "new job", "dance studio", "guitar lessons", "dog Max", "book club",
          "photography", "bakery", "hiking", "yoga", "volunteering", "art show", "road trip",
          "sunflowers", "the beach"]  # fmt: skip
VERBS = ["went to", "talked about", "signed up for", "was excited about", "shared a photo of",
         "felt proud of", "planned", "recommended", "finished", "started"]  # fmt: skip
WHEN = ["last weekend", "yesterday", "in May 2023", "two weeks ago", "on Sunday", "after work",
        "during the summer", "last year"]  # fmt: skip
HOW = ["meant a lot", "was fun", "helped a lot", "was hard but worth it", "made the week better"]


def rows(facts: int, seed: int = 1):
    rng = random.Random(seed)
    for i in range(facts):
        conv = i % 10
        who = PEOPLE[(2 * conv + rng.randrange(2)) % len(PEOPLE)]
        thing = rng.choice(THINGS)
        text = (f"{who} {rng.choice(VERBS)} {thing} {rng.choice(WHEN)}, and said it "
                f"{rng.choice(HOW)} (session {i // 60}, note {i}).")  # fmt: skip
        yield {"type": "fact", "source": who, "target": thing, "relation": "MENTIONED",
               "fact": text, "group_id": f"conv-{conv}"}  # fmt: skip


def write_file(path: Path, facts: int, seed: int = 1) -> None:
    with path.open("w") as out:
        for row in rows(facts, seed):
            out.write(json.dumps(row) + "\n")


def write_parquet(path: Path, facts: int, dim: int = 384, seed: int = 1) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(list(rows(facts, seed)))
    vectors = np.random.default_rng(seed).standard_normal((facts, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim)
    pq.write_table(table.append_column("embedding", column), path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=2541)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--model", help="local embedding model (default: the configured one)")
    parser.add_argument(
        "--parquet-vectors", action="store_true", help="Parquet with an embedding column"
    )
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench_import_"))
    if args.parquet_vectors:
        source = scratch / "facts.parquet"
        write_parquet(source, args.facts)
    else:
        source = scratch / "facts.jsonl"
        write_file(source, args.facts)
    cli = Path(sys.executable).with_name("workbench")
    model = {"SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL": args.model} if args.model else {}
    env = {**os.environ, **model}
    print(f"{args.facts} facts, load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")
    try:
        for attempt in range(args.repeat):
            db = scratch / f"kb{attempt}.duckdb"
            started = time.perf_counter()
            done = subprocess.run(
                ["/usr/bin/time", "-f", "peak RSS %M KB", str(cli), "import", str(source),
                 "--db", str(db), "--quiet"],
                capture_output=True, text=True, check=True, env=env,
            )  # fmt: skip
            wall = time.perf_counter() - started
            report = json.loads(done.stdout[done.stdout.index("{") :])
            rss = re.search(r"peak RSS (\d+) KB", done.stderr)
            print(f"run {attempt + 1}: workbench import {wall:.2f} s wall; "
                  f"{report['facts_created']} facts, {report['entities_created']} entities; "
                  f"peak RSS {int(rss.group(1)) // 1024 if rss else '?'} MB")  # fmt: skip
        from workbench.config import load_settings
        from workbench.facade import Workbench

        settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": str(scratch / "inproc.duckdb"),
                                  **model}, env_file=None)  # fmt: skip
        with Workbench.open(settings) as wb:
            wb.embedder.embed(["warm up"])
            started = time.perf_counter()
            report = wb.import_jsonl(source)
            took = time.perf_counter() - started
            texts = report["facts_created"] + report["entities_created"]
        print(f"in process (model loaded): import {took:.2f} s, {texts / took:.0f} texts/s "
              "embedded and written")  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
