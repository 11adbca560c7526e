"""Retrieval on LongMemEval (Wu et al., ICLR 2025) as a new user would run it, no LLM.

The data is not shipped (evaluation only; see its README): point the script at the S split's
JSON (gzip'd or not), a list of questions each with its own haystack of ~48 sessions.

    .venv/bin/python bench/bench_longmemeval.py PATH [--limit N] [--types T,T]
        [--no-vectors] [--model multilingual-e5-small] [--json]

``--limit N`` keeps the first N questions of each type, ``--types`` some types only.

Per question: a fresh store; its sessions, in date order, added through ``add_memory`` as
``message`` episodes (one ``role: text`` line a turn) with the session's date as
``reference_time``; every passage embedded (``--no-vectors``: an embedder that carries no
information, so the ranking is the keyword score's); then the question asked through
``search_memory`` (10 results) with ``now`` = the question's date. A passage counts for the
turns it holds, a fact for nothing (no LLM: there are none).

Reported by question type, as upstream's ``print_retrieval_metrics`` defines them and without
the abstention (``_abs``) questions: turn-level recall_any@10 (an evidence turn, marked
``has_answer``, among the turns of the first 10 results) and session-level recall_any@5 (an
answer session among the sessions of the first 5). The same questions are also ranked with
the time boosts switched off and over a grid of their weights (``variants``: ranked as
``search_memory`` ranks, no access recorded), which is how the shipped weights were chosen.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

K_TURN, K_SESSION = 10, 5
GROUP = "lme"
# (time window weight, recency weight) compared with the shipped ones
GRID = [(0.0, 0.0), (0.1, 0.0), (0.2, 0.0), (0.3, 0.0), (0.5, 0.0), (0.2, 0.05), (0.2, 0.1),
        (0.2, 0.2), (0.0, 0.1)]  # fmt: skip


class BlankEmbedder:
    """An embedder that carries no information (every text the same unit vector): the
    ranking is then the keyword score's (``--no-vectors``), at no embedding cost."""

    model = "blank"
    dimensions = 384

    def embed(self, texts: Any) -> np.ndarray:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        out[:, 0] = 1.0
        return out


def load(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def iso(date: str) -> str:
    """'2023/05/30 (Tue) 23:40' -> ISO 8601 (UTC)."""
    day, _, clock = date.partition(") ")
    return (
        datetime.strptime(f"{day.split(' (')[0]} {clock}", "%Y/%m/%d %H:%M")
        .replace(tzinfo=UTC)
        .isoformat()
    )


def episodes(q: dict[str, Any]) -> list[tuple[dict[str, Any], str, list[str], set[str]]]:
    """Each session as ``add_memory`` arguments, in date order, with its session id, the id
    of each line's turn and the evidence turns among them."""
    out = []
    sessions = zip(q["haystack_dates"], q["haystack_session_ids"], q["haystack_sessions"])
    for date, sid, turns in sorted(sessions, key=lambda s: iso(s[0])):
        lines, ids, evidence = [], [], set()
        for n, turn in enumerate(turns):
            text = " ".join(str(turn.get("content", "")).split())
            if not text:
                continue
            lines.append(f"{turn['role']}: {text}")
            ids.append(f"{sid}#{n}")
            if turn.get("has_answer"):
                evidence.add(f"{sid}#{n}")
        if lines:
            episode = {"name": sid, "episode_body": "\n".join(lines), "group_id": GROUP,
                       "source": "message", "reference_time": iso(date)}  # fmt: skip
            out.append((episode, sid, ids, evidence))
    return out


def passage_turns(body: str, ids: list[str]) -> list[set[str]]:
    """The turn ids each passage of a message episode holds, in the passages' order
    (``bench_locomo.passage_turns``, with this benchmark's own turn ids as they are)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_locomo import passage_turns as held_turns

    return held_turns(body, ids, lambda turn: {turn})


def first_of_each(questions: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first ``n`` questions of each type."""
    taken: dict[str, int] = defaultdict(int)
    out = []
    for q in questions:
        taken[q["question_type"]] += 1
        if taken[q["question_type"]] <= n:
            out.append(q)
    return out


def scored(q: dict[str, Any]) -> bool:
    return not q["question_id"].endswith("_abs")


def ask(q: dict[str, Any], embedder: Any, scratch: Path) -> dict[str, Any]:
    """One question in a fresh store: its hits (as turn sets and sessions) per method."""
    from workbench.config import load_settings
    from workbench.facade import Workbench
    from workbench.ingest.passages import passage_uuid

    db = scratch / f"{q['question_id']}.duckdb"
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": str(db)}, env_file=None)
    turns_of: dict[str, tuple[set[str], str]] = {}  # passage uuid -> (turns, session)
    evidence: set[str] = set()
    with Workbench.open(settings, chat=None, embedder=embedder) as wb:
        for episode, sid, ids, said in episodes(q):
            uuid = wb.add_memory(**episode)["episode_uuid"]
            evidence |= said
            for position, held in enumerate(passage_turns(episode["episode_body"], ids)):
                turns_of[passage_uuid(uuid, position)] = (held, sid)
        wb.passages.flush()
        now = iso(q["question_date"])
        ranked = variants(wb.search, q["question"], now)
        started = time.perf_counter()
        found = wb.search_memory(q["question"], group_ids=[GROUP], max_results=K_TURN, now=now)
        took = time.perf_counter() - started
        ranked["search_memory"] = [h["uuid"] for h in found["results"]]
    answers = set(q["answer_session_ids"])
    out = {}
    for method, uuids in ranked.items():
        hits = [turns_of.get(u, (set(), "")) for u in uuids]
        turn_hit = bool(evidence & set().union(*(t for t, _ in hits[:K_TURN]))) if hits else False
        session_hit = bool(answers & {s for _, s in hits[:K_SESSION]})
        out[method] = (turn_hit, session_hit)
    return {"methods": out, "seconds": took, "window": found.get("time_window")}


def variants(engine: Any, question: str, now: str) -> dict[str, list[str]]:
    """The question ranked as ``search_memory`` ranks it under other time weights (no
    access recorded): the uuids of the first 10, per (window weight, recency weight)."""
    from dataclasses import replace

    from workbench.clock import as_utc
    from workbench.search.filters import DEFAULT_STATES, SearchFilters
    from workbench.search.query import time_boost
    from workbench.search.recall import OVERSAMPLE, _candidates, fuse

    at = as_utc(now)
    filters = SearchFilters(group_ids=(GROUP,), states=DEFAULT_STATES,
                            include_invalidated=False, now=at)  # fmt: skip
    _window, boost = time_boost(question, at)
    out = {}
    for w_time, w_recent in GRID:
        mine = replace(boost, window_weight=w_time, recency_weight=w_recent)
        ranked = {
            kind: engine.ranked(
                kind,
                question,
                K_TURN * OVERSAMPLE,
                filters,
                engine.searcher.weights,
                None,
                None,
                mine,
            )  # fmt: skip
            for kind in ("fact", "passage")
        }
        out[f"time {w_time} recency {w_recent}"] = [
            c.uuid for c in fuse(_candidates(ranked), K_TURN)
        ]
    return out


def summary(results: list[tuple[str, dict[str, tuple[bool, bool]]]]) -> dict[str, Any]:
    """Per method and question type: n, turn recall_any@10, session recall_any@5."""
    sums: dict[str, dict[str, list[tuple[bool, bool]]]] = defaultdict(lambda: defaultdict(list))
    for qtype, methods in results:
        for method, hit in methods.items():
            sums[method]["all"].append(hit)
            sums[method][qtype].append(hit)
    return {
        method: {
            label: {
                "n": len(v),
                "turn_any@10": round(sum(t for t, _ in v) / len(v), 3),
                "session_any@5": round(sum(s for _, s in v) / len(v), 3),
            }  # fmt: skip
            for label, v in sorted(by.items())
        }
        for method, by in sums.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="longmemeval_s JSON (or .json.gz)")
    parser.add_argument("--limit", type=int, help="at most this many questions of each type")
    parser.add_argument("--types", help="only these question types (comma-separated)")
    parser.add_argument("--no-vectors", action="store_true", help="keyword ranking only")
    parser.add_argument("--model", help="local embedding model (default: the configured one)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if not args.path.exists():
        parser.error(f"{args.path} does not exist")
    questions = [q for q in load(args.path) if scored(q)]
    if args.types:
        wanted = {t.strip() for t in args.types.split(",")}
        questions = [q for q in questions if q["question_type"] in wanted]
    if args.limit:
        questions = first_of_each(questions, args.limit)
    if not questions:
        parser.error("no questions left to ask")
    embedder = BlankEmbedder() if args.no_vectors else None
    if embedder is None:
        from workbench.config import load_settings
        from workbench.embedding import build_embedder

        env = {"SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL": args.model} if args.model else {}
        embedder = build_embedder(load_settings(env, env_file=None))
    load_avg = os.getloadavg()[0]
    results, took, started = [], [], time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench_lme_") as scratch:
        for n, q in enumerate(questions, 1):
            got = ask(q, embedder, Path(scratch))
            results.append((q["question_type"], got["methods"]))
            took.append(got["seconds"])
            line = {"n": n, "of": len(questions), "type": q["question_type"],
                    "window": got["window"], "methods": got["methods"]}  # fmt: skip
            print(json.dumps(line), file=sys.stderr, flush=True)  # a partial run can be read
    took.sort()
    report = {
        "questions": len(questions),
        "vectors": not args.no_vectors,
        "load": round(load_avg, 2),
        "minutes": round((time.perf_counter() - started) / 60, 1),
        "search_p50_ms": round(1000 * took[len(took) // 2], 1),
        "search_p95_ms": round(1000 * took[min(len(took) - 1, int(len(took) * 0.95))], 1),
        "methods": summary(results),
    }
    print(json.dumps(report, indent=1) if args.json else table(report))


def table(r: dict[str, Any]) -> str:
    lines = [
        f"{r['questions']} questions, vectors {r['vectors']}, load {r['load']}, "
        f"{r['minutes']} min; search_memory p50/p95 {r['search_p50_ms']}/{r['search_p95_ms']} ms",
        f"{'method':<28} {'type':<26} {'n':>4} {'turn@10':>8} {'sess@5':>7}",
    ]
    for method, by in r["methods"].items():
        for label, m in by.items():
            lines.append(f"{method:<28} {label:<26} {m['n']:>4} {m['turn_any@10']:>8.3f} "
                         f"{m['session_any@5']:>7.3f}")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
