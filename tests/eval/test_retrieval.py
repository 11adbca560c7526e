"""The retrieval set: our fusion must not lose to vector-only or BM25-only search."""

from __future__ import annotations

import pytest

from workbench.eval.retrieval import evaluate, load_into, load_set

pytestmark = pytest.mark.slow


def test_retrieval_set_is_well_formed():
    rset = load_set()
    keys = {m["key"] for m in rset.memories}
    assert 60 <= len(rset.memories) <= 120 and len(rset.questions) >= 30
    assert len(keys) == len(rset.memories)
    assert all(q["answers"] and set(q["answers"]) <= keys for q in rset.questions)


def test_fused_search_beats_each_signal_alone(make_engine, local_embedder):
    engine = make_engine(local_embedder)
    rset = load_set()
    result = evaluate(engine, rset, load_into(engine, rset))
    fused, vector, bm25 = result["fused"], result["vector"], result["bm25"]
    for metric in ("recall@1", "recall@3", "recall@5", "recall@10", "mrr"):
        assert fused[metric] >= vector[metric], (metric, result)
        assert fused[metric] >= bm25[metric], (metric, result)
    assert fused["recall@10"] >= 0.95
