"""Retrieval on a public long-conversation benchmark in the LoCoMo format, as a new user would
run it: one fact per observation, imported with the importer, asked through
``search_memory_facts``.

The data is not shipped (it is not ours to redistribute): point the script at the benchmark's
JSON, either the single ``locomo10.json`` (a list of samples with ``conversation``,
``observation`` and ``qa``) or a folder of one-sample files with those keys at the top level.

    .venv/bin/python bench/bench_locomo.py PATH [--model multilingual-e5-small] [--json]
        [--unit turn] [--with-sessions [--turns N] [--http]]

Each conversation is a group. Each observation (``[text, dia_id]`` said by a speaker in a
session) becomes a fact from its speaker to the other speaker, valid from the session's date.
Each question except the adversarial category 5 (1,540 in the public set) is asked with the
conversation's group; a retrieved fact counts for every dialogue turn its observation cites.
Reported, overall and per category (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop):
recall@10 (the share of a question's evidence turns among the top 10, averaged), hit@10, the
same for plain cosine and BM25 over the group, the bound (what a perfect ranking of these
facts would score: a turn no observation cites cannot be found), the import's time, and the
search's p50/p95 in process (query embedding included).

``--with-sessions`` adds what was said: every session also goes in through ``add_memory`` as
one ``message`` episode ("Speaker: text" a turn, a shared photo's caption after it, the
session's date as its reference time) with no LLM configured, so its passages are searchable
at once; each question is then asked through ``search_memory`` (facts and passages in one
list), and a retrieved passage counts for the turns it holds. Reported besides: ``add_memory``'s
p50/p95, the fusion's variants on the same candidates (no near-duplicate hold-back, other
thresholds, passages alone, facts alone) and, with ``--http``, the same questions asked of a
real ``workbench serve`` over HTTP (its p50/p95 include HTTP, JSON and the query embedding).
``--turns N`` sets the turns per passage (default: the shipped one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
SKIPPED_CATEGORY = 5  # adversarial: questions with no answer in the conversation
K = 10


def samples(path: Path) -> list[dict[str, Any]]:
    """The benchmark's conversations, each as one flat dict (both published layouts)."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    out = []
    for file in files:
        data = json.loads(file.read_text(encoding="utf-8"))
        for i, sample in enumerate(data if isinstance(data, list) else [data]):
            flat = {**sample.get("conversation", {}), **sample.get("observation", {}), **sample}
            flat.setdefault(
                "sample_id", f"{file.stem}-{i}" if isinstance(data, list) else file.stem
            )
            out.append(flat)
    return out


def session_time(text: str) -> str | None:
    """'1:56 pm on 8 May, 2023' -> ISO 8601 (UTC)."""
    try:
        return (
            datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC).isoformat()
        )
    except ValueError:
        return None


def sessions(sample: dict[str, Any], suffix: str, kind: type) -> Iterator[tuple[str | None, Any]]:
    """Each ``session_N<suffix>`` value of ``kind`` in a conversation, with its session's date."""
    for key, value in sample.items():
        match = re.fullmatch(rf"session_(\d+){suffix}", key)
        if match and isinstance(value, kind):
            yield session_time(sample.get(f"session_{match.group(1)}_date_time", "")), value


def fact_lines(
    sample: dict[str, Any], group: str, said: Iterable[tuple[str, str, str, str | None, set[str]]]
) -> tuple[list[dict], dict[str, set[str]]]:
    """The import lines of ``said`` (speaker, text, relation, date, cited turns): one fact per
    distinct text, from its speaker to the other speaker; and each fact text's turns."""
    a, b = sample["speaker_a"], sample["speaker_b"]
    lines, turns = [], defaultdict(set)
    for speaker, text, relation, when, cited in said:
        if text not in turns:
            line = {"type": "fact", "source": speaker, "target": b if speaker == a else a,
                    "fact": text, "relation": relation, "group_id": group}  # fmt: skip
            lines.append(line | ({"valid_at": when} if when else {}))
        turns[text] |= cited
    return lines, turns


def import_lines(sample: dict[str, Any], group: str) -> tuple[list[dict], dict[str, set[str]]]:
    """The import lines of one conversation (one fact per observation), and each fact text's
    dialogue turns."""

    def said():
        for when, by_speaker in sessions(sample, "_observation", dict):
            for speaker, observations in by_speaker.items():
                for text, *cited in observations:
                    ids = cited[0] if cited and isinstance(cited[0], list) else cited
                    yield speaker, text.strip(), "TOLD", when, turn_ids(ids)

    return fact_lines(sample, group, said())


def turn_lines(sample: dict[str, Any], group: str) -> tuple[list[dict], dict[str, set[str]]]:
    """The other way to import a conversation (``--unit turn``): each dialogue turn as one fact,
    "Speaker: text" (with the caption of a photo it shares), so every cited turn can be found."""

    def said():
        for when, session in sessions(sample, "", list):
            for turn in session:
                if not isinstance(turn, dict) or not turn.get("speaker"):
                    continue
                speaker, caption = turn["speaker"], turn.get("blip_caption")
                text = f"{speaker}: {str(turn.get('text', '')).strip()}"
                text += f" [shares a photo: {caption}]" if caption else ""
                yield speaker, text, "SAID", when, turn_ids([turn.get("dia_id", "")])

    return fact_lines(sample, group, said())


UNITS = {"observation": import_lines, "turn": turn_lines}


def session_episodes(sample: dict[str, Any], group: str) -> list[tuple[dict, list[str]]]:
    """Each session as ``add_memory`` arguments (a ``message`` episode, one line a turn), with
    the dialogue turn id of each line."""
    out = []
    for number, (when, session) in enumerate(sessions(sample, "", list), start=1):
        lines, ids = [], []
        for turn in session:
            if not isinstance(turn, dict) or not turn.get("speaker"):
                continue
            caption = turn.get("blip_caption")
            text = " ".join(str(turn.get("text", "")).split())
            text += f" [shares a photo: {caption}]" if caption else ""
            lines.append(f"{turn['speaker']}: {text}")
            ids.append(str(turn.get("dia_id", "")))
        if lines:
            episode = {"name": f"session {number}", "episode_body": "\n".join(lines),
                       "group_id": group, "source": "message"}  # fmt: skip
            out.append((episode | ({"reference_time": when} if when else {}), ids))
    return out


def passage_turns(
    body: str, ids: list[str], as_ids: Callable[[str], set[str]] | None = None
) -> list[set[str]]:
    """The turn ids each passage of a message episode holds (in the passages' order): a
    passage's lines are its turns, or pieces of one long turn, in order. ``as_ids``: a turn's
    id as the benchmark cites it (default: LoCoMo's ``D1:3`` form, :func:`turn_ids`)."""
    from workbench.ingest.passages import split_episode, turns_of

    cited = as_ids or (lambda turn: turn_ids([turn]))
    said = [" ".join(text.split()) for _, text in turns_of(body)]
    out, at = [], 0
    for passage in split_episode(body, "message"):
        held: set[str] = set()
        for line in passage.text.splitlines():
            piece = " ".join(line.split(": ", 1)[-1].split())
            while at < len(said) and piece not in said[at]:
                at += 1
            if at < len(said):
                held |= cited(ids[at])
        out.append(held)
    return out


def turn_ids(cited: list[Any]) -> set[str]:
    """Dialogue turn ids as cited ('D1:3'; some cite several in one string: 'D8:6; D9:17')."""
    return set(re.findall(r"D\d+:\d+", " ".join(map(str, cited))))


def questions(sample: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        q
        for q in sample["qa"]
        if q.get("category") != SKIPPED_CATEGORY and turn_ids(q.get("evidence") or [])
    ]


def best_ranking(cited: list[set[str]], evidence: set[str], k: int = K) -> list[set[str]]:
    """The ``k`` facts (as their cited turns) that cover most of ``evidence``: what a perfect
    retriever would return. Greedy; with the benchmark's small evidence sets it reaches the
    true maximum (never above: a turn no observation cites cannot be found by any ranking)."""
    useful = [turns & evidence for turns in cited if turns & evidence]
    chosen: list[set[str]] = []
    covered: set[str] = set()
    for _ in range(k):
        best = max(useful, key=lambda turns: len(turns - covered), default=set())
        if not best - covered:
            break
        chosen.append(best)
        covered |= best
    return chosen


def scores(ranked: list[set[str]], evidence: set[str]) -> tuple[float, float]:
    found = set().union(*ranked) if ranked else set()
    return len(evidence & found) / len(evidence), float(bool(evidence & found))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="locomo10.json, or a folder of sample files")
    parser.add_argument("--model", help="local embedding model (default: the configured one)")
    parser.add_argument(
        "--unit", choices=sorted(UNITS), default="observation",
        help="what becomes one fact: an observation (default, the benchmark's summaries) or a "
        "dialogue turn",
    )  # fmt: skip
    parser.add_argument(
        "--with-sessions", action="store_true",
        help="also add every session as a message episode (no LLM) and ask search_memory",
    )  # fmt: skip
    parser.add_argument("--turns", type=int, help="turns per passage (with --with-sessions)")
    parser.add_argument(
        "--http", action="store_true",
        help="with --with-sessions: also ask a real `workbench serve` over HTTP",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if not args.path.exists():
        parser.error(f"{args.path} does not exist")
    try:
        convs = samples(args.path)
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read {args.path}: {exc}")
    if not convs or not all({"speaker_a", "speaker_b", "qa"} <= set(c) for c in convs):
        parser.error(f"{args.path} holds no conversations in the LoCoMo format")
    with tempfile.TemporaryDirectory(prefix="bench_locomo_") as scratch:
        if args.with_sessions:
            from bench_recall import run_recall

            result = run_recall(convs, Path(scratch) / "kb.duckdb", args.model, args.turns,
                                args.http)  # fmt: skip
        else:
            result = run(convs, Path(scratch) / "kb.duckdb", args.model, args.unit)
    if args.json or args.with_sessions:
        print(json.dumps(result, indent=1))
    else:
        print(table(result))


def run(
    convs: list[dict[str, Any]], db: Path, model: str | None, unit: str = "observation"
) -> dict[str, Any]:
    """Import every conversation into a fresh database at ``db`` and ask every question."""
    from workbench.config import load_settings
    from workbench.facade import Workbench

    env = {"SVC_KNOWLEDGE_DB_PATH": str(db)}
    if model:
        env["SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL"] = model
    settings = load_settings(env, env_file=None)
    all_lines, turns_of = [], {}
    for i, sample in enumerate(convs):
        group = f"conv-{i}"
        lines, turns = UNITS[unit](sample, group)
        all_lines += lines
        turns_of[group] = turns
    load = os.getloadavg()[0]
    with Workbench.open(settings) as wb:
        wb.embedder.embed(["warm up"])
        started = time.perf_counter()
        report = wb.import_jsonl([json.dumps(line) for line in all_lines])
        import_s = time.perf_counter() - started
        result = evaluate(wb, convs, turns_of)
    return result | {"facts": report["facts_created"], "import_s": round(import_s, 2),
                     "model": settings.local_embedder_model, "load": round(load, 2),
                     "unit": unit}  # fmt: skip


def evaluate(wb, convs, turns_of) -> dict[str, Any]:
    engine = wb.search
    sums: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    latencies = []
    for i, sample in enumerate(convs):
        group = f"conv-{i}"
        turns = turns_of[group]
        texts = engine.indexes.rows["fact"].rows
        cited = list(turns.values())
        for q in questions(sample):
            evidence = turn_ids(q["evidence"])
            started = time.perf_counter()
            hits = wb.search_memory_facts(q["question"], group_ids=[group], max_facts=K)["facts"]
            latencies.append(time.perf_counter() - started)
            ranked = {"fused": [turns.get(h["fact"], set()) for h in hits]}
            vec = engine.indexes.vectors["fact"].search(
                engine.searcher._embed(q["question"]), K, [group]
            )
            kw = engine.indexes.keywords["fact"].search(q["question"], K, [group])
            for name, pairs in (("vector", vec), ("bm25", kw)):
                ranked[name] = [turns.get(texts[p[0]]["fact"], set()) for p in pairs]
            ranked["bound"] = best_ranking(cited, evidence)
            for method, ranks in ranked.items():
                recall, hit = scores(ranks, evidence)
                for label in ("all", CATEGORIES.get(q["category"], str(q["category"]))):
                    sums[method][label].append((recall, hit))
    latencies.sort()
    return {
        "questions": len(sums["fused"]["all"]),
        "search_p50_ms": round(1000 * latencies[len(latencies) // 2], 1),
        "search_p95_ms": round(1000 * latencies[int(len(latencies) * 0.95)], 1),
        "methods": summary(sums),
    }


def summary(sums) -> dict[str, dict[str, dict[str, float]]]:
    """Per method and category: questions, mean recall@10 and hit@10."""
    return {
        method: {
            label: {
                "n": len(v),
                "recall@10": round(sum(r for r, _ in v) / len(v), 3),
                "hit@10": round(sum(h for _, h in v) / len(v), 3),
            }
            for label, v in sorted(by.items())
        }
        for method, by in sums.items()
    }


def table(r: dict[str, Any]) -> str:
    lines = [
        f"model {r['model']}: {r['facts']} facts (one per {r['unit']}) imported in "
        f"{r['import_s']} s (load "
        f"{r['load']}); {r['questions']} questions; search p50/p95 "
        f"{r['search_p50_ms']}/{r['search_p95_ms']} ms",
        f"{'method':<8} {'category':<12} {'n':>5} {'recall@10':>10} {'hit@10':>7}",
    ]
    for method, by in r["methods"].items():
        for label, m in by.items():
            lines.append(
                f"{method:<8} {label:<12} {m['n']:>5} {m['recall@10']:>10.3f} {m['hit@10']:>7.3f}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
