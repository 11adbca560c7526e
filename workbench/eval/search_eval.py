"""Every search method on the conversational retrieval set (:mod:`workbench.eval.convo_set`).

    python -m workbench.eval.search_eval                 # the dev split, the default embedder
    python -m workbench.eval.search_eval --split test    # the frozen split: to report only
    python -m workbench.eval.search_eval --json          # machine-readable

Methods: ``vector`` (cosine top-k), ``bm25`` (keyword top-k), ``rrf`` (reciprocal rank fusion
of both) and ``fused`` (the service's ``search_memory_facts``: weighted similarity, keyword,
freshness and importance), asked the questions facts answer; and ``recall`` (the service's
``search_memory``: facts and the passages of the set's chats, added as ``message``
episodes), asked every question, those of category ``said`` too, which only what was said
answers (a passage counts for its chat). Per method, overall and per category and language:
recall@1/5/10 (the share of a question's answer facts in the top k, averaged), hit@1 (the
first result answers) and MRR. The store is in memory, built from the set with the engine's
own write path.
"""

from __future__ import annotations

import argparse
import json
import uuid as uuidlib
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.eval.retrieval import load_into, load_set, rankings

if TYPE_CHECKING:
    from workbench.embedding import Embedder
    from workbench.search.engine import SearchEngine

DATA = Path(__file__).resolve().parents[2] / "data"
CUTOFFS = (1, 5, 10)
SAID = "said"  # the category only what was said answers


def split_path(split: str) -> Path:
    return DATA / f"search_{split}.jsonl"


def evaluate(
    engine: SearchEngine, questions: list[dict[str, Any]], keys: dict[str, str]
) -> dict[str, Any]:
    """Per method: metrics overall, by category and by language."""
    sums: dict[str, dict[str, dict[str, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    for q in questions:
        answers = {keys[a] for a in q["answers"]}
        groups = ("all", f"category:{q['category']}", f"lang:{q.get('lang', 'en')}")
        ranks = {} if q["category"] == SAID else rankings(engine, q["question"], k=max(CUTOFFS))
        ranks["recall"] = recalled(engine, q["question"], k=max(CUTOFFS))
        for method, ranked in ranks.items():
            first = next((i for i, u in enumerate(ranked) if u in answers), None)
            values = {f"recall@{c}": len(answers & set(ranked[:c])) / len(answers)
                      for c in CUTOFFS}  # fmt: skip
            values["hit@1"] = float(first == 0)
            values["mrr"] = 0.0 if first is None else 1.0 / (first + 1)
            for group in groups:
                bucket = sums[method][group]
                bucket["n"] += 1
                for name, value in values.items():
                    bucket[name] += value
    return {
        method: {
            group: {"questions": int(b["n"])}
            | {k: round(v / b["n"], 4) for k, v in b.items() if k != "n"}
            for group, b in sorted(by_group.items())
        }
        for method, by_group in sums.items()
    }


def recalled(engine: SearchEngine, question: str, k: int) -> list[str]:
    """``search_memory``'s top ``k``: a fact as its uuid, a passage as its episode's."""
    from workbench.search.recall import search_memory

    hits = search_memory(engine, question, max_results=k)
    return [h["uuid"] if h["kind"] == "fact" else h["episode_uuid"] for h in hits]


def load_said(
    engine: SearchEngine, chats: list[dict[str, Any]], group_id: str = "eval"
) -> dict[str, str]:
    """Add each chat as a ``message`` episode with its passages (the write path of
    ``add_memory``, no LLM); key -> episode uuid."""
    from workbench.ingest.verbatim import PassageWriter
    from workbench.store import graph as g

    writer = PassageWriter(engine.store, engine.searcher.embedder, engine.indexes.publisher)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    keys: dict[str, str] = {}
    for chat in chats:
        episode = {"uuid": str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, chat["key"])),
                   "group_id": group_id, "name": chat["key"], "body": chat["body"],
                   "source": "message", "source_description": "", "reference_time": now,
                   "created_at": now, "priority": 1}  # fmt: skip
        rows = writer.prepare(episode)
        with engine.indexes.publisher:
            with engine.store.transaction():
                g.insert_episode(engine.store, episode)
                writer.write(rows)
            writer.publish(rows)
        keys[chat["key"]] = episode["uuid"]
    writer.close()  # every passage embedded
    return keys


def run(split: str = "dev", embedder: Embedder | None = None) -> dict[str, Any]:
    """Build an in-memory store from the split and evaluate every method on it."""
    from workbench.config import LOCAL_EMBEDDER_MODEL
    from workbench.embedding.local import open_local
    from workbench.search.engine import SearchEngine
    from workbench.store import Store

    embedder = embedder or open_local(LOCAL_EMBEDDER_MODEL)
    store = Store.open(":memory:", dim=embedder.dimensions)
    engine = SearchEngine(store, embedder, access_background=False)
    try:
        rset = load_set(split_path(split))
        keys = load_into(engine, rset) | load_said(engine, rset.said)
        return {
            "split": split,
            "embedder": embedder.model,
            "memories": len(rset.memories),
            "chats": len(rset.said),
            "questions": len(rset.questions),
            "methods": evaluate(engine, rset.questions, keys),
        }
    finally:
        engine.close()
        store.close()


def table(result: dict[str, Any]) -> str:
    """A text table: one row per method and group."""
    lines = [
        f"{result['split']} split, {result['memories']} memories, {result['questions']} "
        f"questions, embedder {result['embedder']}",
        f"{'method':<8} {'group':<24} {'n':>4} {'r@1':>6} {'r@5':>6} {'r@10':>6} {'hit@1':>6} "
        f"{'mrr':>6}",
    ]
    for method, groups in result["methods"].items():
        for group, m in groups.items():
            lines.append(
                f"{method:<8} {group:<24} {m['questions']:>4} {m['recall@1']:>6.3f} "
                f"{m['recall@5']:>6.3f} {m['recall@10']:>6.3f} {m['hit@1']:>6.3f} "
                f"{m['mrr']:>6.3f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=["dev", "test"], default="dev")
    parser.add_argument(
        "--model",
        help="local embedding model (default multilingual-e5-small, or all-MiniLM-L6-v2)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    embedder = None
    if args.model:
        from workbench.embedding.local import open_local

        embedder = open_local(args.model)
    result = run(args.split, embedder)
    print(json.dumps(result, indent=1) if args.json else table(result))


if __name__ == "__main__":
    main()
