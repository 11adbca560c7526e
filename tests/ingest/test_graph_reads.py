"""Extraction's graph reads: the row caches answer exactly as DuckDB does, and the publish gate
keeps them current for the next episode of a group."""

from __future__ import annotations

import random
import threading
import time
import uuid as uuidlib
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from tests.ingest.test_pipeline import open_wb
from workbench.fakes import rule_llm
from workbench.index.rows import RowCache
from workbench.ingest.reads import CachedReads
from workbench.store import Store
from workbench.store import graph as g


class StoreReads:
    """The oracle: :class:`GraphReads` answered by the store's SQL (the source of truth)."""

    def __init__(self, store: Store):
        self.store = store

    def entities_by_norm(self, group_id, names_norm):
        return g.entities_by_norm(self.store, group_id, names_norm)

    def entities_by_uuid(self, uuids):
        return g.entities_by_uuid(self.store, uuids)

    def facts_between(self, entity_uuids, limit):
        return g.facts_between(self.store, entity_uuids, limit=limit)

    def existing_fact_keys(self, group_id, keys):
        return g.existing_fact_keys(self.store, group_id, keys)


T0 = datetime(2026, 1, 1, tzinfo=UTC)
NAMES = ["maria keller", "tom", "acme", "neovim", "python", "munich", "berlin"]
STATES = ["ACTIVE", "ACTIVE", "ACTIVE", "DORMANT", "ARCHIVED", "EXPIRED", "SOFT_DELETED"]


def random_graph(store: Store, rng: random.Random, n_entities: int = 60, n_facts: int = 200):
    entities = []
    for i in range(n_entities):
        name = rng.choice(NAMES)
        entities.append(
            {
                "uuid": str(uuidlib.UUID(int=rng.getrandbits(128))),
                "group_id": rng.choice(["g1", "g2"]),
                "name": name.title(),
                "name_norm": name,
                "entity_type": rng.choice(["Person", "Organization"]),
                "summary": f"s{i}",
                "created_at": T0 + timedelta(minutes=i),
                "importance": 3,
                "stability": 3,
                "classification_status": "success",
                "lifecycle_state": rng.choice(STATES),
            }
        )
    g.insert_entities(store, entities)
    facts = []
    for i in range(n_facts):
        a, b = rng.sample(entities, 2)
        facts.append(
            {
                "uuid": str(uuidlib.UUID(int=rng.getrandbits(128))),
                "group_id": a["group_id"],
                "source_uuid": a["uuid"],
                "target_uuid": b["uuid"],
                "relation": "RELATES_TO",
                "fact": rng.choice(["Likes it", "  uses it ", "Works at it", "LIKES IT"]),
                "created_at": T0 + timedelta(minutes=i),
                "invalid_at": T0 if rng.random() < 0.2 else None,
                "importance": 3,
                "stability": 3,
                "classification_status": "success",
                "lifecycle_state": rng.choice(STATES),
            }
        )
    g.insert_facts(store, facts)
    expired = [f["uuid"] for f in facts if rng.random() < 0.2]
    store.execute("UPDATE facts SET expired_at = ? WHERE list_contains(?, uuid)", [T0, expired])
    return entities, facts


def caches_of(store: Store):
    entities, facts = RowCache("entity"), RowCache("fact")
    entities.load(store)
    facts.load(store)

    @contextmanager
    def caches():
        yield entities, facts

    return entities, facts, CachedReads(caches)


def ask_both(store_reads, cached, entities, facts, rng):
    uuids = [e["uuid"] for e in entities]
    for _ in range(30):
        group = rng.choice(["g1", "g2", "g3"])
        names = rng.sample([*NAMES, "nobody"], 3)
        assert cached.entities_by_norm(group, names) == store_reads.entities_by_norm(group, names)
        some = rng.sample(uuids, 5) + ["missing"]
        by_uuid = store_reads.entities_by_uuid(some)
        assert cached.entities_by_uuid(some).keys() == by_uuid.keys()
        for u, row in cached.entities_by_uuid(some).items():
            assert {k: by_uuid[u][k] for k in row} == row
        limit = rng.choice([3, 30])
        assert cached.facts_between(some, limit) == store_reads.facts_between(some, limit)
        keys = [
            (f["source_uuid"], f["target_uuid"], rng.choice(["likes it", "uses it", "x"]))
            for f in rng.sample(facts, 20)
        ]
        assert cached.existing_fact_keys(group, keys) == store_reads.existing_fact_keys(group, keys)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cached_reads_answer_as_duckdb_does(seed):
    rng = random.Random(seed)
    store = Store.open(":memory:")
    entities, facts = random_graph(store, rng)
    ent_cache, fact_cache, cached = caches_of(store)
    ask_both(StoreReads(store), cached, entities, facts, rng)
    # deletes and renames reach the caches the way the search engine applies them
    gone = rng.sample(entities, 10)
    g.delete_entities(store, [e["uuid"] for e in gone])
    ent_cache.remove([e["uuid"] for e in gone])
    renamed = [e for e in entities if e not in gone][:5]
    store.execute(
        "UPDATE entities SET name_norm = 'renamed' WHERE list_contains(?, uuid)",
        [[e["uuid"] for e in renamed]],
    )
    ent_cache.refresh(store, [e["uuid"] for e in renamed])
    dropped = rng.sample(facts, 30)
    g.delete_facts(store, [f["uuid"] for f in dropped])
    fact_cache.remove([f["uuid"] for f in dropped])
    ask_both(StoreReads(store), cached, entities, facts, rng)
    assert cached.entities_by_norm(renamed[0]["group_id"], ["renamed"])
    store.close()


def test_the_name_index_follows_puts_and_removes():
    cache = RowCache("entity")
    row = {"uuid": "a", "group_id": "g", "name_norm": "tom"}
    cache.put([row, {"uuid": "b", "group_id": "g", "name_norm": "tom"}])
    assert sorted(cache.named_uuids("g", "tom")) == ["a", "b"]
    cache.remove(["a"])
    assert cache.named_uuids("g", "tom") == ["b"]
    cache.put([{"uuid": "b", "group_id": "g", "name_norm": "thomas"}])
    assert cache.named_uuids("g", "tom") == [] and cache.named_uuids("g", "thomas") == ["b"]
    assert cache.named_uuids("other", "thomas") == []
    cache.remove(["b"])
    assert cache.named == {}


def test_the_next_episode_of_a_group_waits_for_the_indexes_of_the_previous(fake_llm, hash_embedder):
    """Workers must not claim a group's next episode between the previous one's commit and the
    search-index update: extraction would miss its entities and create duplicates."""
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(
        fake_llm,
        hash_embedder,
        SVC_KNOWLEDGE_QUEUE_CONCURRENCY="3",
        SVC_KNOWLEDGE_QUEUE_POLL_SECONDS="0.01",
        SVC_KNOWLEDGE_DECAY_ENABLED="false",
    )
    on_upsert = wb.search.indexes.on_upsert
    slow = threading.Event()

    def slow_upsert(*args, **kwargs):
        if slow.is_set():
            time.sleep(0.15)  # a wide window between the commit and the index update
        on_upsert(*args, **kwargs)

    wb.search.indexes.on_upsert = slow_upsert
    slow.set()
    try:
        for i in range(5):
            wb.add_memory(f"e{i}", f"Maria Keller works at Acme. Step {i}.", group_id="g")
        wb.start()
        deadline = time.monotonic() + 30
        while wb.store.fetchone("SELECT count(*) FROM queue WHERE state = 'done'")[0] < 5:
            assert time.monotonic() < deadline, "the episodes were not processed in time"
            time.sleep(0.02)
        rows = wb.store.fetchall("SELECT name, count(*) FROM entities GROUP BY 1 ORDER BY 1")
        assert rows == [("Acme", 1), ("Maria Keller", 1)]
        assert wb.store.fetchone("SELECT count(*) FROM facts")[0] == 1
    finally:
        wb.close()


def open_wb_with_broken_index_updates(fake_llm, hash_embedder):
    """A workbench whose extraction fails to tell the search indexes (after its commit)."""
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_DECAY_ENABLED="false")

    def broken_upsert(*args, **kwargs):
        raise RuntimeError("index update failed")

    wb.search.indexes.on_upsert = broken_upsert
    return wb


def test_an_index_update_failing_after_the_commit_does_not_process_episodes_again(
    fake_llm, hash_embedder, caplog
):
    """The episodes are written and acknowledged before the search indexes hear of them: a
    failure there must neither re-queue them (duplicates) nor hide their entities from the
    next episode of the group (the row caches are re-read)."""
    wb = open_wb_with_broken_index_updates(fake_llm, hash_embedder)
    try:
        wb.add_memory("e0", "Maria Keller works at Acme.", group_id="g")
        assert wb.process_pending() == 1
        wb.add_memory("e1", "Maria Keller works at Acme. She likes tea.", group_id="g")
        assert wb.process_pending() == 1
        states = wb.store.fetchall("SELECT state, attempts FROM queue ORDER BY enqueued_at")
        assert states == [("done", 1), ("done", 1)]
        rows = wb.store.fetchall("SELECT name, count(*) FROM entities GROUP BY 1 ORDER BY 1")
        assert rows == [("Acme", 1), ("Maria Keller", 1)]
        assert "updating the search indexes after a write failed" in caplog.text
    finally:
        wb.close()


def test_memories_whose_index_update_failed_are_searchable_after_the_resync(
    fake_llm, hash_embedder
):
    """The resync after a failed index update must bring the written memories into the
    vector and keyword indexes too, not only into the row caches: else no search finds
    them, and extraction's vector dedupe (``similar``) cannot offer them as duplicates."""
    wb = open_wb_with_broken_index_updates(fake_llm, hash_embedder)
    try:
        wb.add_memory("e0", "Maria Keller works at Acme.", group_id="g")
        assert wb.process_pending() == 1
        del wb.search.indexes.on_upsert  # the engine's own again
        maria = wb.store.fetchone("SELECT uuid FROM entities WHERE name = 'Maria Keller'")[0]
        assert maria in wb.search.indexes.rows["entity"]
        assert maria in wb.search.indexes.vectors["entity"]
        assert maria in wb.search.indexes.keywords["entity"]
        nodes = wb.search_memory_nodes("Maria Keller", group_ids=["g"])["nodes"]
        assert maria in [n["uuid"] for n in nodes]
        facts = wb.search_memory_facts("Maria Keller works at Acme", group_ids=["g"])["facts"]
        assert len(facts) == 1
    finally:
        wb.close()


@pytest.mark.parametrize("delete", ["episode", "fact", "group"])
def test_a_delete_whose_index_update_fails_still_succeeds_and_hides_the_memories(
    fake_llm, hash_embedder, caplog, delete
):
    """The delete is committed before the search indexes hear of it: a failure there must not
    report the delete as failed, and the indexes are re-read so searches stop finding it."""
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_DECAY_ENABLED="false")
    try:
        added = wb.add_memory("e0", "Maria Keller works at Acme.", group_id="g")
        assert wb.process_pending() == 1
        fact = wb.search_memory_facts("Maria Keller works at Acme", group_ids=["g"])["facts"][0]

        def broken_delete(*args, **kwargs):
            raise RuntimeError("index update failed")

        wb.search.indexes.on_delete = broken_delete
        if delete == "episode":
            result = wb.delete_episode(added["episode_uuid"])
        elif delete == "fact":
            result = wb.delete_entity_edge(fact["uuid"])
        else:
            result = wb.clear_graph(["g"])
        assert "message" in result
        assert "updating the search indexes after" in caplog.text
        assert fact["uuid"] not in wb.search.indexes.rows["fact"]
        assert fact["uuid"] not in wb.search.indexes.vectors["fact"]
        assert wb.search_memory_facts("Maria Keller works at Acme", group_ids=["g"])["facts"] == []
    finally:
        wb.close()
