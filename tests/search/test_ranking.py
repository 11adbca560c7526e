"""Ranking with the real local embedder on a small hand-made corpus with known answers."""

from __future__ import annotations

import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.search.helpers import add, entity, fact

pytestmark = pytest.mark.slow


@pytest.fixture
def engine(make_engine, local_embedder):
    return make_engine(local_embedder)


@pytest.fixture
def people(engine):
    sam, neovim, bruno = add(
        engine,
        "entity",
        [
            entity("Sam", "backend engineer in Lisbon", entity_type="Person"),
            entity("Neovim", "a terminal text editor", entity_type="Tool"),
            entity("Bruno", "Sam's beagle", entity_type="Animal"),
        ],
    )
    return sam, neovim, bruno


def cosine(embedder, a: str, b: str) -> float:
    va, vb = embedder.embed([a, b])
    return float(np.dot(va, vb))


def test_relevant_fact_beats_irrelevant_and_similarity_is_real_cosine(engine, people):
    sam, neovim, bruno = people
    add(
        engine,
        "fact",
        [
            fact("Sam uses Neovim as the main code editor", sam, neovim, "USES"),
            fact("Bruno the dog loves running on the beach", bruno, bruno, "LOVES"),
            fact("Sam moved to Lisbon in March", sam, sam, "MOVED_TO"),
        ],
    )
    query = "Which text editor does Sam code in?"
    hits = engine.search_facts(query)
    assert hits[0]["fact"] == "Sam uses Neovim as the main code editor"
    assert hits[0]["source_node_name"] == "Sam" and hits[0]["target_node_name"] == "Neovim"
    for hit in hits:
        real = cosine(engine.searcher.embedder, query, hit["fact"])
        assert hit["score_parts"]["similarity"] == pytest.approx(real, abs=1e-4)
    w = engine.searcher.weights
    for hit in hits:
        p = hit["score_parts"]
        assert hit["score"] == pytest.approx(
            w.similarity * p["similarity"]
            + w.keyword * p["keyword"]
            + w.freshness * p["freshness"]
            + w.importance * p["importance"],
            abs=1e-5,
        )
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)


def test_decayed_memory_loses_to_equally_similar_fresh_one(engine, people):
    sam, neovim, _ = people
    old, fresh = add(
        engine,
        "fact",
        [
            fact("Sam prefers Neovim for editing", sam, neovim, decay_score=0.8),
            fact("Sam prefers Neovim for editing", sam, neovim, decay_score=0.0),
        ],
    )
    hits = engine.search_facts("What editor does Sam prefer?", max_facts=2)
    assert [h["uuid"] for h in hits] == [fresh["uuid"], old["uuid"]]
    assert hits[0]["score_parts"]["similarity"] == pytest.approx(
        hits[1]["score_parts"]["similarity"], abs=1e-6
    )
    assert hits[0]["score"] - hits[1]["score"] == pytest.approx(0.25 * 0.8, abs=1e-5)
    assert hits[1]["score_parts"]["freshness"] == pytest.approx(0.2)


def test_importance_breaks_ties(engine, people):
    sam, _, bruno = people
    low, high = add(
        engine,
        "fact",
        [
            fact("Bruno is allergic to chicken", bruno, bruno, importance=2),
            fact("Bruno is allergic to chicken", bruno, bruno, importance=5),
        ],
    )
    hits = engine.search_facts("What is the dog allergic to?", max_facts=2)
    assert [h["uuid"] for h in hits] == [high["uuid"], low["uuid"]]
    assert hits[0]["score_parts"]["importance"] == 1.0
    assert hits[1]["score_parts"]["importance"] == 0.25


def test_keyword_signal_finds_rare_tokens(engine, people):
    sam, _, _ = people
    add(
        engine,
        "fact",
        [
            fact("The home wifi password is zebra-7731", sam, sam),
            fact("Sam's router sits in the hallway closet", sam, sam),
            fact("Sam changed the internet provider last month", sam, sam),
        ],
    )
    hits = engine.search_facts("zebra-7731")
    assert hits[0]["fact"] == "The home wifi password is zebra-7731"
    assert hits[0]["score_parts"]["keyword"] > 0.5
    assert all(h["score_parts"]["keyword"] == 0 for h in hits[1:])


def test_nodes_rank_by_name_and_summary(engine, people):
    sam, neovim, bruno = people
    hits = engine.search_nodes("my dog")
    assert hits[0]["uuid"] == bruno["uuid"]
    assert hits[0]["entity_type"] == "Animal" and hits[0]["summary"] == "Sam's beagle"
    assert {"similarity", "keyword", "freshness", "importance"} == set(hits[0]["score_parts"])


def test_unweighted_ranking_ignores_freshness_and_importance(engine, people):
    sam, neovim, _ = people
    add(
        engine,
        "fact",
        [
            fact(
                "Sam uses Neovim as the main code editor",
                sam,
                neovim,
                decay_score=1.0,
                importance=1,
            ),
            fact("Sam sometimes opens files in a text editor", sam, neovim, importance=5),
        ],
    )
    query = "Which code editor does Sam use?"
    plain = engine.search_nodes(query, include_weighted_scores=False)
    for hit in plain:
        p, w = hit["score_parts"], hit["score_weights"]
        assert w["freshness"] == 0 and w["importance"] == 0
        assert hit["score"] == pytest.approx(
            w["similarity"] * p["similarity"] + w["keyword"] * p["keyword"], abs=1e-5
        )


def test_search_makes_no_network_call_and_imports_no_llm(engine, people, monkeypatch):
    sam, neovim, _ = people
    add(engine, "fact", [fact("Sam uses Neovim", sam, neovim)])

    def refuse(*args, **kwargs):
        raise AssertionError("search opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    assert engine.search_facts("editor")
    assert engine.search_nodes("editor")
    code = (
        "import sys, workbench.search.engine; "
        "bad = [m for m in sys.modules if m.startswith(('workbench.llm', 'openai'))]; "
        "sys.exit(1 if bad else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
