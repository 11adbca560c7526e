"""A replica of a PostgreSQL store that starts from a search-index save stored before a
re-extraction's promote replaced a group: it serves exactly the promoted group (#44)."""

from __future__ import annotations

import numpy as np

from tests.ingest.test_pipeline import open_wb
from tests.ingest.test_runs import history
from tests.jobs.test_reextract import facts_of, other_settings, responder
from workbench.search.engine import SearchEngine
from workbench.store import saved_indexes
from workbench.store import search as search_sql
from workbench.store.search import latest_vector_seq


def _small_graphs(monkeypatch) -> None:
    """Every engine builds its HNSW graphs at once from a few memories (saved then)."""
    real = SearchEngine.__init__

    def init(self, *args, **options):
        options["ann_threshold"] = 4
        options["index_options"] = {"background_build": False}
        real(self, *args, **options)

    monkeypatch.setattr(SearchEngine, "__init__", init)


def test_a_replica_started_from_a_save_made_before_a_promote_serves_the_promoted_group(
    fake_llm, hash_embedder, pg_location, tmp_path, monkeypatch
):
    _small_graphs(monkeypatch)
    responder(fake_llm)
    shared = {"db": ":memory:", "SVC_KNOWLEDGE_DATABASE_URL": pg_location}
    a = open_wb(fake_llm, hash_embedder, **shared)
    b = None
    try:
        for episode in history(12):
            a.add_memory(**episode)
        assert a.process_pending() == 12
        for kind in ("entity", "fact"):
            assert a.search.indexes.vectors[kind].uses_ann
            a.search.indexes.save(kind)
        saved = saved_indexes.newest(a.store, ["entity", "fact"])
        assert set(saved) == {"entity", "fact"}
        old = facts_of(a)
        runs = a.reextraction(other_settings(fake_llm), tmp_path)
        runs.promote(runs.run("tom")["run_id"])
        new = facts_of(a)
        assert new and new != old
        assert latest_vector_seq(a.store) > max(s or 0 for s in saved.values())
        assert saved_indexes.newest(a.store, ["entity", "fact"]) == saved  # not saved since

        b = open_wb(fake_llm, hash_embedder, **shared)  # a new replica, from that save
        for kind in ("entity", "fact"):
            index = b.search.indexes.vectors[kind]
            assert index.uses_ann  # opened from the save (or rebuilt: both must serve right)
            group = search_sql.group_uuids(b.store, kind, "tom")
            stored, vectors = search_sql.vectors_of(b.store, kind, group)
            rows = b.search.indexes.rows[kind]
            held = {u for u, g in zip(rows.uuids(), rows.group_ids()) if g == "tom"}
            assert held == set(search_sql.group_uuids(b.store, kind, "tom"))
            in_index = {
                u
                for u in index.uuids()
                if b.search.indexes.rows[kind].value(u, "group_id") == "tom"
            }
            assert in_index == set(stored)
            for uuid, vector in zip(stored, vectors):
                assert np.allclose(index.vector(uuid), vector / np.linalg.norm(vector), atol=2e-3)
        # its searches answer as those of the replica that promoted (which swapped the group
        # in at once), and no old-generation fact comes back
        for _, text in sorted(old | new):
            for engine in (a, b):
                engine.search.indexes.tracker.flush()
            found = b.search_memory_facts(text, group_ids=["tom"], max_facts=10)["facts"]
            expected = a.search_memory_facts(text, group_ids=["tom"], max_facts=10)["facts"]
            assert {f["uuid"] for f in found} == {f["uuid"] for f in expected}
            assert {(f["uuid"], f["fact"]) for f in found} <= new
    finally:
        if b is not None:
            b.close()
        a.close()
