"""Provenance: every fact's ``sources`` (the episodes that stated or restated it, the
passages that say it, first and last time said; the file of an imported fact) in every
search and ``get_entity_edge``; ``get_sources`` of a fact and of an entity; what deletes
do to them; a database of schema 8 upgraded."""

from __future__ import annotations

import json

import pytest

from tests.ingest.test_pipeline import open_wb
from workbench.errors import NotFound
from workbench.fakes import rule_llm
from workbench.search import sources as src
from workbench.store import Store
from workbench.store.schema import MIGRATIONS

T1, T2, T3 = "2026-01-05T10:00:00+00:00", "2026-02-05T10:00:00+00:00", "2026-03-05T10:00:00+00:00"


@pytest.fixture
def wb(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    workbench = open_wb(fake_llm, hash_embedder)
    yield workbench
    workbench.close()


def said(wb, name, body, when, group="g1"):
    return wb.add_memory(name, body, group_id=group, reference_time=when)["episode_uuid"]


@pytest.fixture
def restated(wb):
    """One fact stated by three episodes (the second and third state it again)."""
    a = said(wb, "first", "Maria Keller works at Acme. The weather was fine.", T1)
    b = said(wb, "second", "We spoke of cats. Maria Keller works at Acme.", T2)
    c = said(wb, "third", "Maria Keller works at Acme.", T3)
    wb.process_pending()
    return a, b, c


def works_at(wb):
    return wb.search_memory_facts("Maria works at Acme", ["g1"])["facts"][0]


def test_a_restated_fact_lists_every_episode_with_the_passage_that_says_it(wb, restated):
    a, b, c = restated
    fact = works_at(wb)
    assert fact["fact"] == "Maria Keller works at Acme."
    got = fact["sources"]
    assert [e["episode_uuid"] for e in got["episodes"]] == [a, b, c]
    assert [e["episode_name"] for e in got["episodes"]] == ["first", "second", "third"]
    assert got["episode_count"] == 3 and got["complete"] is True
    assert got["first_said"] == T1 and got["last_said"] == T3
    assert got["imported"] is None
    second = got["episodes"][1]["passages"]
    assert len(second) == 1 and "Maria Keller works at Acme" in second[0]["text"]
    assert fact["episode_uuid"] == a  # the first, as before


def test_search_memory_and_get_entity_edge_carry_the_sources(wb, restated):
    results = wb.search_memory("Maria works at Acme", ["g1"], kinds=["fact"])["results"]
    fact = results[0]
    assert fact["episodes"] == list(restated)
    assert fact["sources"]["episode_count"] == 3
    edge = wb.get_entity_edge(fact["uuid"])
    assert [e["episode_uuid"] for e in edge["sources"]["episodes"]] == list(restated)
    passages = wb.search_memory("Maria works at Acme", ["g1"], kinds=["passage"])["results"]
    assert passages and all("sources" not in p for p in passages)


def test_a_search_quotes_the_first_and_latest_episodes_and_says_it_left_some_out(wb):
    uuids = [
        said(wb, f"ep{i}", "Maria Keller works at Acme.", f"2026-01-{i + 1:02d}T00:00:00+00:00")
        for i in range(6)
    ]
    wb.process_pending()
    got = works_at(wb)["sources"]
    assert got["episode_count"] == 6 and got["complete"] is False
    kept = [uuids[0], *uuids[-src.LATEST_EPISODES :]]
    assert [e["episode_uuid"] for e in got["episodes"]] == kept
    assert got["first_said"].startswith("2026-01-01") and got["last_said"].startswith("2026-01-06")
    full = wb.get_sources(works_at(wb)["uuid"])
    assert full["kind"] == "fact" and full["sources"]["episode_count"] == 6
    assert [e["episode_uuid"] for e in full["sources"]["episodes"]] == uuids
    assert full["sources"]["complete"] is True


def test_the_passages_of_a_whole_answer_are_capped(wb, restated):
    rows = [(f["uuid"], f["fact"]) for f in wb.search_memory_facts("Maria", ["g1"])["facts"]]
    capped = src.fact_sources(wb.store, rows, src.Limits(None, 3, 1))
    quoted = sum(len(e["passages"]) for s in capped.values() for e in s["episodes"])
    assert quoted == 1 and not all(s["complete"] for s in capped.values())


def test_get_sources_of_an_entity_lists_the_episodes_that_mention_it(wb, restated):
    node = wb.search_memory_nodes("Acme", ["g1"])["nodes"][0]
    assert node["name"] == "Acme"
    got = wb.get_sources(node["uuid"])
    assert got["kind"] == "entity" and got["text"] == "Acme" and got["group_id"] == "g1"
    assert [e["episode_uuid"] for e in got["sources"]["episodes"]] == list(restated)
    assert all("Acme" in e["passages"][0]["text"] for e in got["sources"]["episodes"])
    with pytest.raises(NotFound):
        wb.get_sources("3a460868-7411-4c0e-99cf-570bf7f9a77d")


def test_an_imported_fact_says_which_file_and_when(wb, tmp_path):
    path = tmp_path / "people.jsonl"
    line = {"type": "fact", "source": "Ana", "target": "Initech", "fact": "Ana works at Initech"}
    path.write_text(json.dumps({**line, "group_id": "g1"}) + "\n")
    wb.import_jsonl(path)
    wb.import_memories([{**line, "group_id": "g1", "fact": "Ana likes tea", "target": "tea"}])
    facts = {f["fact"]: f for f in wb.search_memory_facts("Ana", ["g1"])["facts"]}
    first = facts["Ana works at Initech"]["sources"]
    assert first["imported"]["file"] == "people.jsonl" and first["episodes"] == []
    assert first["imported"]["imported_at"]
    assert facts["Ana likes tea"]["sources"]["imported"]["file"] == "import_memories"


def test_deleting_the_first_episode_keeps_a_fact_another_one_stated(wb, restated):
    a, b, c = restated
    uuid = works_at(wb)["uuid"]
    wb.delete_episode(a)
    edge = wb.get_entity_edge(uuid)
    assert edge["episode_uuid"] == b
    assert [e["episode_uuid"] for e in edge["sources"]["episodes"]] == [b, c]
    wb.delete_entity_edge(uuid)
    assert wb.store.one("SELECT count(*) FROM fact_sources WHERE fact_uuid = ?", [uuid])[0] == 0


def test_a_database_of_schema_8_is_upgraded_with_its_facts_first_episodes(tmp_path):
    path = tmp_path / "old.duckdb"
    import duckdb

    con = duckdb.connect(str(path))
    for migrate in MIGRATIONS[:8]:
        for statement in migrate(384):
            con.execute(statement)
    con.execute("INSERT INTO meta VALUES ('schema_version', '8')")
    con.execute(
        "INSERT INTO facts (uuid, group_id, source_uuid, target_uuid, fact, episode_uuid, "
        "created_at) VALUES ('f1', 'g', 's', 't', 'x', 'e1', now()), "
        "('f2', 'g', 's', 't', 'y', NULL, now())"
    )
    con.close()
    store = Store.open(path)
    try:
        assert store.fetchall("SELECT fact_uuid, episode_uuid FROM fact_sources") == [("f1", "e1")]
        assert store.meta("schema_version") == str(len(MIGRATIONS))
    finally:
        store.close()


def test_the_passages_quoted_are_those_sharing_most_words_with_the_fact():
    passages = [
        {"uuid": "a", "position": 0, "text": "Hello there, how are you?"},
        {"uuid": "b", "position": 1, "text": "I moved to Lisbon last spring."},
        {"uuid": "c", "position": 2, "text": "Lisbon is sunny."},
    ]
    assert [p["uuid"] for p in src.best_passages("Maria moved to Lisbon", passages, 1)] == ["b"]
    assert [p["uuid"] for p in src.best_passages("Maria moved to Lisbon", passages, 2)] == [
        "b",
        "c",
    ]  # in the episode's order
    assert [p["uuid"] for p in src.best_passages("Tom likes tea", passages, 1)] == ["a"]
    assert src.best_passages("anything", [], 3) == []
