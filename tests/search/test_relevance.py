"""Only relevant memories: the similarity floor for memories that share no keyword with the
query, and the ``min_score`` argument of both searches."""

from __future__ import annotations

import numpy as np
import pytest

from tests.search.helpers import add, entity, fact
from workbench.errors import InvalidInput


@pytest.fixture
def engine(make_engine, hash_embedder):
    return make_engine(hash_embedder)


def opposite(engine, text: str) -> np.ndarray:
    """A vector pointing away from the query's (cosine -1)."""
    return -engine.searcher.embedder.embed([text])


def test_a_memory_pointing_away_from_the_query_is_not_filler(engine):
    add(engine, "entity", [entity("coffee beans")])
    add(engine, "entity", [entity("tea leaves")], opposite(engine, "coffee"))
    # shares the keyword: kept whatever its vector says
    add(engine, "entity", [entity("coffee grinder")], opposite(engine, "coffee"))
    assert {h["name"] for h in engine.search_nodes("coffee")} == {"coffee beans", "coffee grinder"}
    engine.searcher.min_similarity = -1.0  # no floor: the unrelated one fills the results
    assert len(engine.search_nodes("coffee")) == 3


def test_the_floor_comes_from_the_settings(make_engine, hash_embedder):
    from workbench.config import load_settings

    settings = load_settings({"SVC_KNOWLEDGE_SEARCH_MIN_SIMILARITY": "0.25"}, env_file=None)
    assert make_engine(hash_embedder, settings=settings).searcher.min_similarity == 0.25
    with pytest.raises(Exception, match="SEARCH_MIN_SIMILARITY"):
        load_settings({"SVC_KNOWLEDGE_SEARCH_MIN_SIMILARITY": "2"}, env_file=None)


def test_min_score_keeps_only_results_scoring_at_least_that(engine):
    maria, acme, globex = entity("Maria"), entity("Acme"), entity("Globex")
    add(engine, "entity", [maria, acme, globex])
    add(engine, "fact", [fact("Maria works at Acme", maria, acme),
                         fact("Maria visited Globex once", maria, globex)])  # fmt: skip
    everything = engine.search_facts("Maria works at Acme")
    scores = [h["score"] for h in everything]
    assert len(scores) == 2 and scores[0] > scores[1]
    cut = (scores[0] + scores[1]) / 2
    kept = engine.search_facts("Maria works at Acme", min_score=cut)
    assert [h["fact"] for h in kept] == ["Maria works at Acme"]
    assert engine.search_facts("Maria works at Acme", min_score=scores[0] + 1) == []
    nodes = engine.search_nodes("Maria", min_score=0)
    assert nodes and all(h["score"] >= 0 for h in nodes)


@pytest.mark.parametrize("bad", ["0.3", float("nan"), float("inf"), True, [0.1]])
def test_a_bad_min_score_is_a_clear_error(engine, bad):
    add(engine, "entity", [entity("coffee beans")])
    with pytest.raises(InvalidInput, match="'min_score'"):
        engine.search_nodes("coffee", min_score=bad)
    with pytest.raises(InvalidInput, match="'min_score'"):
        engine.search_facts("coffee", min_score=bad)


def test_a_question_about_someone_named_through_another_follows_the_link(engine):
    """ "Where does Audrey's sister work?": Audrey's fact naming her sister links to the
    sister, whose job ranks right after it; a question about Audrey herself is not
    redirected."""
    names = ("Audrey", "Sofia Tanaka", "Oakwood Joinery", "MoveWell Clinic")
    audrey, sofia, joinery, clinic = (entity(n) for n in names)
    others = [entity(n) for n in ("Denver", "Waffles", "sesame", "cello", "Iceland")]
    add(engine, "entity", [audrey, sofia, joinery, clinic, *others])
    facts = [
        fact("Audrey's sister is called Sofia Tanaka.", audrey, sofia),
        fact("Sofia Tanaka is a physiotherapist at MoveWell Clinic.", sofia, clinic),
        fact("Audrey works as a carpenter at Oakwood Joinery.", audrey, joinery),
        fact("Audrey moved to Denver and loves the flat by the river.", audrey, others[0]),
        fact("Audrey adopted a pug named Waffles from the shelter.", audrey, others[1]),
        fact("Audrey is allergic to sesame.", audrey, others[2]),
        fact("Audrey has been practising the cello every evening.", audrey, others[3]),
        fact("Audrey spent two weeks hiking in Iceland with friends.", audrey, others[4]),
    ]
    add(engine, "fact", facts)
    asked = [
        h["fact"] for h in engine.search_facts("Where does Audrey's sister work?", max_facts=3)
    ]
    assert asked[:2] == [facts[0]["fact"], facts[1]["fact"]]
    curly = engine.search_facts("Where does Audrey\u2019s sister work?", max_facts=3)
    assert [h["fact"] for h in curly][:2] == asked[:2]  # a typographic apostrophe too
    engine.searcher.follow_links = False
    asked = [
        h["fact"] for h in engine.search_facts("Where does Audrey's sister work?", max_facts=3)
    ]
    assert facts[1]["fact"] not in asked[:2]
    engine.searcher.follow_links = True
    itself = engine.search_facts("What does Audrey do for a living? carpenter", max_facts=2)
    assert facts[1]["fact"] not in [h["fact"] for h in itself]
