"""Filters of both searches: groups, lifecycle states, dates, types, invalidation, centre."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.search.helpers import T0, add, entity, fact
from workbench.errors import InvalidInput, NotFound


@pytest.fixture
def engine(make_engine, hash_embedder):
    return make_engine(hash_embedder)


def names(hits):
    return [h["name"] for h in hits]


def facts(hits):
    return [h["fact"] for h in hits]


def test_group_filter(engine):
    add(
        engine,
        "entity",
        [entity("coffee beans", group_id="home"), entity("coffee machine", group_id="work")],
    )
    assert names(engine.search_nodes("coffee", group_ids=["home"])) == ["coffee beans"]
    assert len(engine.search_nodes("coffee", group_ids=["home", "work"])) == 2
    assert len(engine.search_nodes("coffee")) == 2
    assert names(engine.search_nodes("coffee", group_ids="work")) == ["coffee machine"]


def test_unknown_group_is_an_error_but_a_group_with_only_episodes_is_not(engine):
    add(engine, "entity", [entity("coffee", group_id="home")])
    with pytest.raises(InvalidInput, match="unknown group_id.*nowhere"):
        engine.search_nodes("coffee", group_ids=["nowhere"])
    engine.store.execute(
        "INSERT INTO episodes (uuid, group_id, name, body, reference_time, created_at) "
        "VALUES ('e1', 'queued-only', 'n', 'b', ?, ?)",
        [T0, T0],
    )
    assert engine.search_nodes("coffee", group_ids=["queued-only"]) == []


def test_default_states_hide_expired_and_soft_deleted(engine):
    add(
        engine,
        "entity",
        [
            entity(f"tea {state.lower()}", lifecycle_state=state)
            for state in ("ACTIVE", "DORMANT", "ARCHIVED", "PERMANENT", "EXPIRED", "SOFT_DELETED")
        ],
    )
    shown = {h["name"] for h in engine.search_nodes("tea")}
    assert shown == {"tea active", "tea dormant", "tea archived", "tea permanent"}
    asked = engine.search_nodes("tea", states=["expired", "SOFT_DELETED"])
    assert {h["name"] for h in asked} == {"tea expired", "tea soft_deleted"}
    assert {h["lifecycle_state"] for h in asked} == {"EXPIRED", "SOFT_DELETED"}


def test_entity_types_and_creation_window(engine):
    add(
        engine,
        "entity",
        [
            entity("Rust language", entity_type="Tool", created_at=T0),
            entity("Rust belt trip", entity_type="Event", created_at=T0 + timedelta(days=10)),
            entity("Rust meetup", entity_type="Event", created_at=T0 + timedelta(days=20)),
        ],
    )
    assert names(engine.search_nodes("rust", entity_types=["Tool"])) == ["Rust language"]
    window = engine.search_nodes(
        "rust",
        created_after=(T0 + timedelta(days=5)).isoformat(),
        created_before=T0 + timedelta(days=15),
    )
    assert names(window) == ["Rust belt trip"]
    assert names(engine.search_nodes("rust", created_after="2026-01-15")) == ["Rust meetup"]


def test_selective_filter_still_fills_the_page(engine):
    rows = [entity(f"note {i} about gardening", entity_type="Note") for i in range(300)]
    rows += [entity(f"gardening idea {i}", entity_type="Idea") for i in range(5)]
    add(engine, "entity", rows)
    hits = engine.search_nodes("gardening note", max_nodes=5, entity_types=["Idea"])
    assert len(hits) == 5 and all(h["entity_type"] == "Idea" for h in hits)


def test_fact_filters_relation_and_invalidation(engine, clock):
    sam, acme, initech = add(engine, "entity", [entity("Sam"), entity("Acme"), entity("Initech")])
    add(
        engine,
        "fact",
        [
            fact(
                "Sam works at Acme",
                sam,
                acme,
                "WORKS_AT",
                invalid_at=T0 - timedelta(days=1),
                expired_at=T0,
            ),
            fact("Sam works at Initech", sam, initech, "WORKS_AT"),
            fact("Sam likes Initech coffee", sam, initech, "LIKES"),
        ],
    )
    assert "Sam works at Acme" not in facts(engine.search_facts("works at"))
    assert "Sam works at Acme" in facts(engine.search_facts("works at", include_invalidated=True))
    only = engine.search_facts("Sam", relation_types=["LIKES"])
    assert facts(only) == ["Sam likes Initech coffee"]
    hit = engine.search_facts("works at", include_invalidated=True, max_facts=3)
    acme_hit = next(h for h in hit if h["target_node_name"] == "Acme")
    assert acme_hit["invalid_at"] == (T0 - timedelta(days=1)).isoformat()


def test_centre_node_ranks_its_facts_then_its_neighbourhood(engine):
    sam, lena, porto, bob = add(
        engine, "entity", [entity("Sam"), entity("Lena"), entity("Porto"), entity("Bob")]
    )
    add(
        engine,
        "fact",
        [
            fact("Bob likes green tea", bob, bob),
            fact("Lena studies medicine in Porto", lena, porto),
            fact("Sam is the brother of Lena", sam, lena),
            fact("green tea with Bob every Friday", bob, bob),
        ],
    )
    hits = engine.search_facts("green tea", center_node_uuid=sam["uuid"])
    assert [h["graph_distance"] for h in hits] == [0, 1, 2, 2]
    assert hits[0]["fact"] == "Sam is the brother of Lena"
    assert hits[1]["fact"] == "Lena studies medicine in Porto"
    plain = engine.search_facts("green tea")
    assert "graph_distance" not in plain[0] and "tea" in plain[0]["fact"]
    with pytest.raises(NotFound, match="no entity"):
        engine.search_facts("tea", center_node_uuid="no-such-uuid")
