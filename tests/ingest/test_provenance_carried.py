"""Provenance travels with the graph: a backup restored (``workbench export DIR`` /
``import DIR``), a re-extraction promoted, and another replica on the same PostgreSQL
database all see the episodes that stated each fact and the file of an imported one."""

from __future__ import annotations

import json

from tests.ingest.test_pipeline import open_wb
from tests.jobs.test_reextract import built, other_settings  # noqa: F401 - the fixture
from tests.search.test_provenance import said
from workbench.fakes import rule_llm
from workbench.search import sources as src
from workbench.store import Store
from workbench.store.restore import read_backup, restore

LINE = {"type": "fact", "source": "Ana", "target": "Initech", "fact": "Ana works at Initech"}


def stated_by(store, group: str) -> dict[str, set[str]]:
    """fact text (without a re-extraction's 'v2: ') -> the names of the episodes stating it."""
    rows = store.fetchall(
        """SELECT f.fact, e.name FROM facts f JOIN fact_sources s ON s.fact_uuid = f.uuid
           JOIN episodes e ON e.uuid = s.episode_uuid WHERE f.group_id = ?""",
        [group],
    )
    out: dict[str, set[str]] = {}
    for fact, name in rows:
        out.setdefault(fact.removeprefix("v2: "), set()).add(name)
    return out


def test_a_restored_backup_keeps_every_source(fake_llm, hash_embedder, tmp_path):
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(fake_llm, hash_embedder)
    try:
        said(wb, "one", "Maria Keller works at Acme.", "2026-01-01T00:00:00+00:00")
        said(wb, "two", "Maria Keller works at Acme.", "2026-02-01T00:00:00+00:00")
        wb.process_pending()
        (tmp_path / "f.jsonl").write_text(json.dumps({**LINE, "group_id": "g1"}) + "\n")
        wb.import_jsonl(tmp_path / "f.jsonl")
        facts = [(f["uuid"], f["fact"]) for f in wb.search_memory_facts("works", ["g1"])["facts"]]
        before = src.fact_sources(wb.store, facts, src.FULL)
        wb.export_parquet(tmp_path / "backup")
    finally:
        wb.close()
    backup = read_backup(tmp_path / "backup")
    store = Store.open(":memory:", dim=backup.dim, embedding_model=backup.model)
    try:
        report = restore(store, backup)
        assert report["restored"]["fact_sources"] == 1 + 1  # the first episode, the restating one
        assert report["restored"]["fact_imports"] == 1
        after = src.fact_sources(store, facts, src.FULL)
        assert after == before
        counts = sorted(s["episode_count"] for s in after.values())
        assert counts == [0, 1 + 1]
        assert [s["imported"]["file"] for s in after.values() if s["imported"]] == ["f.jsonl"]
    finally:
        store.close()


def test_a_promoted_reextraction_carries_the_sources_of_its_facts(built, fake_llm, tmp_path):  # noqa: F811
    wb = built
    before = stated_by(wb.store, "tom")
    assert any(len(names) > 1 for names in before.values())  # the history restates facts
    runs = wb.reextraction(other_settings(fake_llm), tmp_path)
    run_id = runs.run("tom")["run_id"]
    wb.reextraction(shadow_dir=tmp_path).promote(run_id)
    after = stated_by(wb.store, "tom")
    # the other model never states USES: every other fact has the same sources as before
    assert after == {f: names for f, names in before.items() if " uses " not in f}
    facts = wb.search_memory_facts("Tom", ["tom"], max_facts=20)["facts"]
    assert facts and all(f["sources"]["episodes"] for f in facts)
    orphans = wb.store.one(
        "SELECT count(*) FROM fact_sources s WHERE NOT EXISTS "
        "(SELECT 1 FROM facts f WHERE f.uuid = s.fact_uuid)"
    )[0]
    assert orphans == 0


def test_another_replica_on_postgres_quotes_the_sources(fake_llm, hash_embedder, pg_location):
    fake_llm.set_responder(rule_llm.respond)
    shared = {"db": ":memory:", "SVC_KNOWLEDGE_DATABASE_URL": pg_location}
    a = open_wb(fake_llm, hash_embedder, **shared)
    b = open_wb(fake_llm, hash_embedder, **shared)
    try:
        first = said(a, "one", "Maria Keller works at Acme.", "2026-01-01T00:00:00+00:00")
        a.process_pending()
        second = said(a, "two", "Maria Keller works at Acme.", "2026-02-01T00:00:00+00:00")
        a.process_pending()
        a.import_memories([{**LINE, "group_id": "g1"}], file="people.jsonl")
        from tests.pg import wait_for

        def seen() -> dict[str, dict]:
            facts = b.search_memory_facts("works at", ["g1"])["facts"]
            return {f["fact"]: f["sources"] for f in facts}

        assert wait_for(lambda: len(seen()) == 2, timeout=10)
        got = seen()
        quoted = got["Maria Keller works at Acme."]["episodes"]
        assert [e["episode_uuid"] for e in quoted] == [first, second]
        assert got["Ana works at Initech"]["imported"]["file"] == "people.jsonl"
        timeline = b.get_timeline(["g1"])["events"]
        assert [e["name"] for e in timeline if e["event"] == "episode"] == ["one", "two"]
    finally:
        b.close()
        a.close()
