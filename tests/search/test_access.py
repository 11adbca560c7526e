"""Access tracking: row updates, reactivation, the access metrics, batching and no loss."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.search.conftest import sample
from tests.search.helpers import T0, add, entity, fact
from workbench.search.engine import SearchEngine


@pytest.fixture
def engine(make_engine, hash_embedder):
    return make_engine(hash_embedder)


def row(store, uuid, table="entities"):
    return store.fetch_dicts(
        f"SELECT lifecycle_state, access_count, last_accessed_at, decay_score FROM {table} "
        "WHERE uuid = ?",
        [uuid],
    )[0]


def test_returned_memories_are_accessed_and_reactivated(engine, store, clock, metrics):
    clock.advance(days=100)
    dormant, archived, active = add(
        engine,
        "entity",
        [
            entity(
                "pizza dough recipe",
                lifecycle_state="DORMANT",
                decay_score=0.3,
                last_accessed_at=T0 + timedelta(days=60),
                importance=2,
            ),
            entity("pizza oven manual", lifecycle_state="ARCHIVED", decay_score=0.5, importance=5),
            entity("pizza night friends", access_count=4, importance=3),
        ],
    )
    hits = engine.search_nodes("pizza")
    assert {h["lifecycle_state"] for h in hits} == {"ACTIVE"}
    by_uuid = {h["uuid"]: h for h in hits}
    assert by_uuid[active["uuid"]]["access_count"] == 5
    assert by_uuid[dormant["uuid"]]["last_accessed_at"] == clock().isoformat()
    for memory in (dormant, archived, active):
        stored = row(store, memory["uuid"])
        assert stored["lifecycle_state"] == "ACTIVE"
        assert stored["last_accessed_at"] == clock()
        assert stored["decay_score"] == 0.0
    assert row(store, active["uuid"])["access_count"] == 5

    assert sample(metrics, "knowledge_reactivations_total", from_state="DORMANT") == 1
    assert sample(metrics, "knowledge_reactivations_total", from_state="ARCHIVED") == 1
    assert sample(metrics, "knowledge_access_by_state_total", state="DORMANT") == 1
    assert sample(metrics, "knowledge_access_by_state_total", state="ARCHIVED") == 1
    assert sample(metrics, "knowledge_access_by_state_total", state="ACTIVE") == 1
    assert sample(metrics, "knowledge_access_by_importance_total", level="LOW") == 1
    assert sample(metrics, "knowledge_access_by_importance_total", level="MEDIUM") == 1
    assert sample(metrics, "knowledge_access_by_importance_total", level="CRITICAL") == 1
    assert sample(metrics, "knowledge_memory_access_total") == 3
    # only the dormant one had a previous access (40 days before): one observation
    assert sample(metrics, "knowledge_days_since_last_access_count") == 1
    assert sample(metrics, "knowledge_days_since_last_access_sum") == pytest.approx(40.0)
    assert sample(metrics, "knowledge_days_since_last_access_bucket", le="30.0") == 0
    assert sample(metrics, "knowledge_days_since_last_access_bucket", le="90.0") == 1
    assert sample(metrics, "knowledge_weighted_searches_total") == 1
    assert sample(metrics, "knowledge_search_weighted_latency_seconds_count") == 1

    clock.advance(days=2)
    engine.search_nodes("pizza")  # a second access: no second reactivation
    assert sample(metrics, "knowledge_reactivations_total", from_state="DORMANT") == 1
    assert sample(metrics, "knowledge_access_by_state_total", state="ACTIVE") == 4
    assert sample(metrics, "knowledge_days_since_last_access_count") == 4
    assert row(store, active["uuid"])["access_count"] == 6


def test_facts_are_tracked_too_and_only_returned_ones(engine, store):
    a, b = add(engine, "entity", [entity("Sam"), entity("Lena")])
    hit, other = add(
        engine,
        "fact",
        [
            fact("Sam visits Lena in Porto", a, b, lifecycle_state="DORMANT"),
            fact("Sam visits Lena in Porto every June", a, b),
        ],
    )
    assert len(engine.search_facts("visits Porto", max_facts=1)) == 1
    counts = {u: row(store, u, "facts")["access_count"] for u in (hit["uuid"], other["uuid"])}
    assert sorted(counts.values()) == [0, 1]


def test_background_flusher_batches_and_close_writes_everything(
    store, clock, metrics, hash_embedder
):
    engine = SearchEngine(
        store, hash_embedder, metrics, clock, access_background=True, flush_interval=3600
    )
    try:
        (memo,) = add(engine, "entity", [entity("tax return deadline", lifecycle_state="ARCHIVED")])
        for _ in range(3):
            hits = engine.search_nodes("tax deadline")
            assert hits[0]["lifecycle_state"] == "ACTIVE"
        assert engine.indexes.tracker.pending == 1  # nothing written yet: one merged update waits
        assert row(store, memo["uuid"])["access_count"] == 0
        assert hits[0]["access_count"] == 3  # the overlay shows the queued accesses
        assert sample(metrics, "knowledge_reactivations_total", from_state="ARCHIVED") == 1
    finally:
        engine.close()
    stored = row(store, memo["uuid"])
    assert stored["access_count"] == 3 and stored["lifecycle_state"] == "ACTIVE"
    assert engine.indexes.tracker.pending == 0


def test_flush_is_explicit_and_idempotent(store, clock, metrics, hash_embedder):
    engine = SearchEngine(store, hash_embedder, metrics, clock, flush_interval=3600)
    try:
        (memo,) = add(engine, "entity", [entity("dentist appointment")])
        engine.search_nodes("dentist")
        assert engine.indexes.flush() == 1
        assert engine.indexes.flush() == 0
        assert row(store, memo["uuid"])["access_count"] == 1
    finally:
        engine.close()
