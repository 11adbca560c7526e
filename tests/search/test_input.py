"""Bad input raises InvalidInput with a message that says what is accepted."""

from __future__ import annotations

import pytest

from tests.search.helpers import add, entity
from workbench.errors import InvalidInput
from workbench.search.filters import MAX_QUERY_CHARS


@pytest.fixture
def engine(make_engine, hash_embedder):
    e = make_engine(hash_embedder, max_results=50)
    add(e, "entity", [entity("something")])
    return e


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"query": ""}, "'query' is empty"),
        ({"query": "   "}, "'query' is empty"),
        ({"query": None}, "'query' must be a string"),
        ({"query": "x" * (MAX_QUERY_CHARS + 1)}, f"at most {MAX_QUERY_CHARS}"),
        ({"max_nodes": 0}, "'max_nodes' is 0; it must be from 1 to 50"),
        ({"max_nodes": -3}, "from 1 to 50"),
        ({"max_nodes": 51}, "from 1 to 50"),
        ({"max_nodes": "10"}, "'max_nodes' must be an integer"),
        ({"max_nodes": True}, "'max_nodes' must be an integer"),
        ({"created_after": "last tuesday"}, "'created_after' is not an ISO 8601 date-time"),
        ({"created_before": 12}, "'created_before' must be an ISO 8601"),
        ({"created_after": "2026-02-01", "created_before": "2026-01-01"}, "must be earlier"),
        ({"states": ["ACTIVE", "ASLEEP"]}, "unknown lifecycle state(s) ASLEEP"),
        ({"states": []}, "'states' is empty"),
        ({"entity_types": [""]}, "'entity_types' must hold non-empty strings"),
        ({"group_ids": ["nope"]}, "unknown group_id(s): nope"),
        ({"group_ids": 5}, "'group_ids' must be a list of strings"),
    ],
)
def test_search_nodes_rejects(engine, kwargs, message):
    args = {"query": "something", **kwargs}
    with pytest.raises(InvalidInput) as err:
        engine.search_nodes(**args)
    assert message in str(err.value)


def test_search_facts_rejects(engine):
    with pytest.raises(InvalidInput, match="'max_facts' is 0"):
        engine.search_facts("x", max_facts=0)
    with pytest.raises(InvalidInput, match="unknown lifecycle state"):
        engine.search_facts("x", states=["GONE"])
    with pytest.raises(InvalidInput, match="unknown memory kind"):
        engine.indexes.on_upsert("episode", [{"uuid": "u", "group_id": "g"}], None)


def test_the_bound_comes_from_settings(make_engine, hash_embedder, settings):
    engine = make_engine(hash_embedder, settings=settings)
    bound = settings.search_max_results
    with pytest.raises(InvalidInput, match=f"from 1 to {bound}"):
        engine.search_nodes("x", max_nodes=bound + 1)
    assert engine.search_nodes("x", max_nodes=bound) == []
