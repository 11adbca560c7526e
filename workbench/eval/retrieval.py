"""Retrieval evaluation: recall of vector-only, BM25-only, RRF and our fused search.

The set (``data/retrieval_set.jsonl``) holds conversational memories (``type: memory`` with a
``key``, the endpoint names and the fact text) and questions (``type: question`` with the keys
of the facts that answer them). :func:`load_into` writes the memories into a store through the
ingestion path's SQL (``workbench.store.graph``) and indexes them; :func:`evaluate` ranks every
question four ways and reports recall@k and MRR. Pure apart from the engine it is given.

    from workbench.eval.retrieval import run
    print(run())          # builds an in-memory store with the local embedder
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.search.ranking import Weights, rrf

if TYPE_CHECKING:
    from workbench.embedding import Embedder
    from workbench.search.engine import SearchEngine

__all__ = ["RetrievalSet", "load_set", "load_into", "evaluate", "sweep", "run", "DEFAULT_SET"]

DEFAULT_SET = Path(__file__).resolve().parents[2] / "data" / "retrieval_set.jsonl"
METHODS = ("vector", "bm25", "rrf", "fused")


@dataclass
class RetrievalSet:
    memories: list[dict[str, Any]] = field(default_factory=list)
    questions: list[dict[str, Any]] = field(default_factory=list)
    said: list[dict[str, Any]] = field(default_factory=list)  # chats: message episodes


def load_set(path: str | Path = DEFAULT_SET) -> RetrievalSet:
    out = RetrievalSet()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        kind = {"memory": out.memories, "said": out.said}.get(item["type"], out.questions)
        kind.append(item)
    return out


def load_into(
    engine: SearchEngine, rset: RetrievalSet, group_id: str = "eval", now: datetime | None = None
) -> dict[str, str]:
    """Write the set's entities and facts (with embeddings) and index them; key -> uuid."""
    from workbench.store import graph as g

    now = now or datetime(2026, 1, 1, tzinfo=UTC)
    names = sorted({m["source"] for m in rset.memories} | {m["target"] for m in rset.memories})
    entities = [_entity_row(name, group_id, now) for name in names]
    by_name = {e["name"]: e["uuid"] for e in entities}
    facts = [_fact_row(m, by_name, group_id, now) for m in rset.memories]
    model = engine.searcher.embedder.model
    ent_vecs = engine.searcher.embedder.embed([e["name"] for e in entities])
    fact_vecs = engine.searcher.embedder.embed([f["fact"] for f in facts])
    with engine.store.transaction():
        g.insert_entities(engine.store, entities)
        g.insert_facts(engine.store, facts)
        g.insert_embeddings(engine.store, "entity", [e["uuid"] for e in entities], ent_vecs, model)
        g.insert_embeddings(engine.store, "fact", [f["uuid"] for f in facts], fact_vecs, model)
    engine.indexes.on_upsert("entity", entities, ent_vecs)
    engine.indexes.on_upsert("fact", facts, fact_vecs)
    return {m["key"]: f["uuid"] for m, f in zip(rset.memories, facts)}


def _entity_row(name: str, group_id: str, now: datetime) -> dict[str, Any]:
    return {
        "uuid": str(uuidlib.uuid4()),
        "group_id": group_id,
        "name": name,
        "name_norm": name.casefold(),
        "entity_type": "Entity",
        "summary": "",
        "created_at": now,
        "importance": 3,
        "stability": 3,
        "classification_status": "fallback",
        "lifecycle_state": "ACTIVE",
    }


def _fact_row(
    m: dict[str, Any], by_name: dict[str, str], group_id: str, now: datetime
) -> dict[str, Any]:
    return {
        "uuid": str(uuidlib.uuid4()),
        "group_id": group_id,
        "source_uuid": by_name[m["source"]],
        "target_uuid": by_name[m["target"]],
        "relation": m.get("relation", "RELATES_TO"),
        "fact": m["fact"],
        "created_at": now,
        "valid_at": datetime.fromisoformat(m["valid_at"]).replace(tzinfo=UTC)
        if m.get("valid_at")
        else None,
        "importance": 3,
        "stability": 3,
        "classification_status": "fallback",
        "lifecycle_state": "ACTIVE",
    }


def rankings(
    engine: SearchEngine, question: str, k: int = 10, pool: int = 50
) -> dict[str, list[str]]:
    """The top-``k`` fact uuids of each method for one question."""
    query_vec = engine.searcher._embed(question)
    by_vector = [u for u, _ in engine.indexes.vectors["fact"].search(query_vec, pool)]
    by_keyword = [u for u, *_ in engine.indexes.keywords["fact"].search(question, pool)]
    fused = [h["uuid"] for h in engine.search_facts(question, max_facts=k)]
    return {
        "vector": by_vector[:k],
        "bm25": by_keyword[:k],
        "rrf": rrf([by_vector, by_keyword])[:k],
        "fused": fused,
    }


def evaluate(
    engine: SearchEngine,
    rset: RetrievalSet,
    keys: dict[str, str],
    k: int = 10,
    cutoffs: Sequence[int] = (1, 3, 5, 10),
) -> dict[str, dict[str, float]]:
    """Per method: recall@c for each cutoff (share of answer facts in the top c, averaged over
    questions) and MRR (reciprocal rank of the first answer)."""
    totals = {m: {**{f"recall@{c}": 0.0 for c in cutoffs}, "mrr": 0.0} for m in METHODS}
    for q in rset.questions:
        answers = {keys[a] for a in q["answers"]}
        for method, ranked in rankings(engine, q["question"], k).items():
            for c in cutoffs:
                totals[method][f"recall@{c}"] += len(answers & set(ranked[:c])) / len(answers)
            first = next((i for i, u in enumerate(ranked) if u in answers), None)
            totals[method]["mrr"] += 0.0 if first is None else 1.0 / (first + 1)
    n = max(len(rset.questions), 1)
    return {m: {name: round(v / n, 4) for name, v in vals.items()} for m, vals in totals.items()}


def sweep(
    engine: SearchEngine,
    rset: RetrievalSet,
    keys: dict[str, str],
    keyword_weights: Sequence[float] = (0.0, 0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.7),
) -> dict[float, dict[str, float]]:
    """The fused method's metrics for each keyword weight (the tuning we did)."""
    original = engine.searcher.weights
    out: dict[float, dict[str, float]] = {}
    try:
        for w in keyword_weights:
            engine.searcher.weights = Weights(
                original.similarity, original.freshness, original.importance, w
            )
            out[w] = evaluate(engine, rset, keys)["fused"]
    finally:
        engine.searcher.weights = original
    return out


def run(
    path: str | Path = DEFAULT_SET, embedder: Embedder | None = None, tune: bool = False
) -> dict[str, Any]:
    """Evaluate on a fresh in-memory store (the local embedder unless one is given)."""
    from workbench.config import LOCAL_EMBEDDER_MODEL
    from workbench.embedding.local import open_local
    from workbench.search.engine import SearchEngine
    from workbench.store import Store

    embedder = embedder or open_local(LOCAL_EMBEDDER_MODEL)
    store = Store.open(":memory:", dim=embedder.dimensions)
    engine = SearchEngine(store, embedder, access_background=False)
    try:
        rset = load_set(path)
        keys = load_into(engine, rset)
        result: dict[str, Any] = {
            "memories": len(rset.memories),
            "questions": len(rset.questions),
            "metrics": evaluate(engine, rset, keys),
        }
        if tune:
            result["sweep"] = sweep(engine, rset, keys)
        return result
    finally:
        engine.close()
        store.close()


if __name__ == "__main__":  # python -m workbench.eval.retrieval [--tune]
    import sys

    print(json.dumps(run(tune="--tune" in sys.argv), indent=2))
