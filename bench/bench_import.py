"""Bulk import benchmark: ``workbench import`` of a conversation-sized file with the default
(local) embedder, on a fresh DuckDB file.

The file is generated: ``--facts`` facts (default 2,541, the size of a public long-conversation
benchmark imported one observation per fact) about 10 conversations of two people, 15-25 words
each, as JSON lines of the import format. Reported: the command's wall time (process start,
model load and database included), the import's own time, texts embedded per second, and the
peak RSS.

    .venv/bin/python bench/bench_import.py [--facts 2541] [--repeat 2]
    .venv/bin/python bench/bench_import.py --facts 200000 --parquet-vectors --repeat 1
    .venv/bin/python bench/bench_import.py --facts 200000 --entities 50000 --parquet-vectors \
        --repeat 1 [--entity-vectors] [--no-inproc]

With ``--parquet-vectors`` the same facts come as Parquet with an ``embedding`` column of
random unit vectors (384 dims): a migration from another store, no model time.

``--entities N`` (default 37: the 17 people and 20 things of the conversations) makes the
facts name N distinct entities across ``--groups`` groups (default 20), each fact linking two
entities of its group: a store moved from another system. ``--entity-vectors`` writes their
vectors too, as an ``entities.parquet`` beside the facts (a migration that needs no model);
``--entity-lines`` puts those entity records, with their vectors, first in the facts file.

``--postgres`` imports into a throw-away PostgreSQL cluster (``tests/pg.py``) instead, in
process (the store opened first, the model not used when vectors are given): the import's own
time, the figure ``bench_replica_start.py`` reports, without the replica part. ``--profile
FILE`` runs that in-process import (either backend) under cProfile and writes its statistics
to FILE (read with ``python -m pstats FILE``), printing the 25 costliest functions.

    .venv/bin/python bench/bench_import.py --postgres --facts 100000 --entities 25000 \
        --parquet-vectors --entity-vectors [--profile pg.prof]
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
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

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


def entity_name(k: int) -> str:
    """A short, distinct name for entity ``k`` (a person or a thing)."""
    return f"{PEOPLE[k % len(PEOPLE)]} {THINGS[(k // len(PEOPLE)) % len(THINGS)]} {k}"


def many_rows(facts: int, entities: int, groups: int, seed: int = 1):
    """Facts naming ``entities`` distinct entities, entity k in group k % groups: every entity
    is named (as a source) once the facts outnumber the entities."""
    rng = random.Random(seed)
    per_group = max(1, entities // groups)
    for i in range(facts):
        src = i % entities
        dst = (src + groups * rng.randrange(1, per_group + 1)) % entities
        if dst % groups != src % groups or dst == src:
            dst = src
        text = (f"{entity_name(src)} {rng.choice(VERBS)} {entity_name(dst)} "
                f"{rng.choice(WHEN)}, and said it {rng.choice(HOW)} (note {i}).")  # fmt: skip
        yield {"type": "fact", "source": entity_name(src), "target": entity_name(dst),
               "relation": "MENTIONED", "fact": text,
               "group_id": f"conv-{src % groups}"}  # fmt: skip


def fact_rows(args: argparse.Namespace):
    if args.entities == 37:
        return rows(args.facts)
    return many_rows(args.facts, args.entities, args.groups)


def write_file(path: Path, facts: Iterable[dict]) -> None:
    with path.open("w") as out:
        for row in facts:
            out.write(json.dumps(row) + "\n")


def write_parquet(path: Path, facts: int, dim: int = 384, seed: int = 1) -> None:
    """The conversation facts as Parquet with their vectors (``bench_service_restart``)."""
    write_records(path, list(rows(facts, seed)), dim, seed)


def write_records(path: Path, records: list[dict], dim: int = 384, seed: int = 1) -> None:
    """``records`` as Parquet with an ``embedding`` column of random unit vectors."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = dict.fromkeys(key for record in records for key in record)  # nulls where absent
    table = pa.Table.from_pylist([{k: r.get(k) for k in columns} for r in records])
    vectors = np.random.default_rng(seed).standard_normal((len(records), dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim)
    pq.write_table(table.append_column("embedding", column), path)


def entity_records(args: argparse.Namespace) -> list[dict]:
    if args.entities == 37:
        names = [(p, f"conv-{c}") for c in range(10) for p in PEOPLE + THINGS]
    else:
        names = [(entity_name(k), f"conv-{k % args.groups}") for k in range(args.entities)]
    return [{"type": "entity", "name": n, "group_id": g} for n, g in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=2541)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--model", help="local embedding model (default: the configured one)")
    parser.add_argument(
        "--parquet-vectors", action="store_true", help="Parquet with an embedding column"
    )
    parser.add_argument("--entities", type=int, default=37, help="distinct entities named")
    parser.add_argument("--groups", type=int, default=20, help="groups (with --entities)")
    parser.add_argument(
        "--entity-vectors", action="store_true", help="an entities.parquet with their vectors"
    )
    parser.add_argument(
        "--entity-lines", action="store_true", help="entity records with vectors first in the file"
    )
    parser.add_argument("--no-inproc", action="store_true", help="skip the in-process run")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="import in process into a throw-away PostgreSQL cluster (tests/pg.py) instead",
    )
    parser.add_argument(
        "--profile", metavar="FILE", help="cProfile the in-process import, statistics to FILE"
    )
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench_import_"))
    if args.parquet_vectors:
        source = scratch / "facts.parquet"
        entities = entity_records(args) if args.entity_lines else []
        write_records(source, entities + list(fact_rows(args)))
    else:
        source = scratch / "facts.jsonl"
        write_file(source, fact_rows(args))
    if args.entity_vectors:
        write_records(scratch / "entities.parquet", entity_records(args), seed=2)
    cli = Path(sys.executable).with_name("workbench")
    model = {"SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL": args.model} if args.model else {}
    env = {**os.environ, **model}
    print(f"{args.facts} facts naming {args.entities} entities, load average "
          f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs")  # fmt: skip
    if args.postgres:
        try:
            postgres_import(source, model, args.profile)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
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
        if args.no_inproc:
            return
        from workbench.config import load_settings
        from workbench.facade import Workbench

        settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": str(scratch / "inproc.duckdb"),
                                  **model}, env_file=None)  # fmt: skip
        with Workbench.open(settings) as wb:
            wb.embedder.embed(["warm up"])
            report, took = timed_import(wb, source, args.profile)
            texts = report["facts_created"] + report["entities_created"]
        print(f"in process (model loaded): import {took:.2f} s, {texts / took:.0f} texts/s "
              "embedded and written")  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def timed_import(wb, source: Path, profile: str | None) -> tuple[dict, float]:
    """``wb.import_jsonl(source)``: (its report, seconds), under cProfile with ``profile``."""
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    started = time.perf_counter()
    report = wb.import_jsonl(source)
    took = time.perf_counter() - started
    if profiler is not None:
        import pstats

        profiler.disable()
        profiler.dump_stats(profile)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    return report, took


def postgres_import(source: Path, model: dict[str, str], profile: str | None) -> None:
    """Import ``source`` in process into a fresh schema of a throw-away PostgreSQL cluster."""
    sys.path.insert(0, str(ROOT))
    import psycopg

    from tests.pg import ThrowawayPostgres, schema_url
    from workbench.config import load_settings
    from workbench.facade import Workbench

    pg = ThrowawayPostgres().start()
    try:
        with psycopg.connect(pg.url, autocommit=True) as con:
            con.execute('CREATE SCHEMA "bench"')
        settings = load_settings({"SVC_KNOWLEDGE_DATABASE_URL": schema_url(pg.url, "bench"),
                                  "SVC_KNOWLEDGE_DECAY_ENABLED": "false", **model},
                                 env_file=None)  # fmt: skip
        with Workbench.open(settings) as wb:
            report, took = timed_import(wb, source, profile)
        print(f"PostgreSQL, in process: import {took:.2f} s; {report['facts_created']} facts, "
              f"{report['entities_created']} entities, {len(report['errors'])} errors "
              f"(load {os.getloadavg()[0]:.2f})")  # fmt: skip
    finally:
        pg.stop()


if __name__ == "__main__":
    main()
