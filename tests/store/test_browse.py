"""Browsing a group page by page (store.browse through the facade's tools): per-group
figures, the timeline, an episode whole, facts current and superseded, entities, one
entity's neighbourhood, and deleting an entity (its facts go, search forgets them)."""

from __future__ import annotations

import pytest

from workbench.errors import InvalidInput, NotFound
from workbench.facade import Workbench
from workbench.metrics import Metrics

LINES = [
    {"type": "entity", "name": "Maria", "entity_type": "Person", "summary": "a user"},
    {"type": "fact", "source": "Maria", "target": "Acme", "relation": "WORKS_AT",
     "fact": "Maria works at Acme", "valid_at": "2024-01-01T00:00:00Z"},
    {"type": "fact", "source": "Maria", "target": "Porto", "relation": "LIVES_IN",
     "fact": "Maria lives in Porto", "valid_at": "2020-01-01T00:00:00Z",
     "invalid_at": "2025-03-01T00:00:00Z"},
    {"type": "fact", "source": "Tom", "target": "Acme", "relation": "WORKS_AT",
     "fact": "Tom works at Acme"},
]  # fmt: skip


@pytest.fixture
def wb(settings, hash_embedder):
    workbench = Workbench.open(settings, embedder=hash_embedder, metrics=Metrics())
    workbench.import_memories(LINES, group_id="home")
    workbench.import_memories(LINES[:2], group_id="work")
    for day in (3, 1, 2):
        workbench.add_memory(
            f"day {day}", f"On day {day} Maria said a long thing. " * 20, group_id="home",
            reference_time=f"2025-01-0{day}T10:00:00Z",
        )  # fmt: skip
    yield workbench
    workbench.close()


def test_group_stats_count_each_group_and_its_queue(wb):
    stats = {g["group_id"]: g for g in wb.pages.get_group_stats()["groups"]}
    home = stats["home"]
    assert (home["episodes"], home["entities"], home["facts"], home["facts_current"]) == (
        3,
        4,
        3,
        2,
    )
    assert home["passages"] >= 3 and home["queue"]["queued"] == 3  # no LLM: they wait
    assert home["last_activity"] is not None and home["llm_cost_today_usd"] == 0.0
    assert (stats["work"]["facts"], stats["work"]["episodes"], stats["work"]["last_activity"]) == (
        1, 0, None,
    )  # fmt: skip
    only = wb.pages.get_group_stats(["work", "empty"])["groups"]
    assert [g["group_id"] for g in only] == ["empty", "work"] and only[0]["facts"] == 0


def test_the_timeline_is_by_reference_time_and_paged(wb):
    page = wb.pages.list_episodes("home", limit=2)
    assert page["total"] == 3 and [e["name"] for e in page["episodes"]] == ["day 3", "day 2"]
    first = page["episodes"][0]
    assert len(first["preview"]) == 240 and first["body_chars"] > 240
    assert [e["name"] for e in wb.pages.list_episodes("home", limit=2, offset=2)["episodes"]] == [
        "day 1"
    ]
    whole = wb.pages.get_episode(first["uuid"])
    assert whole["episode"]["body"].startswith("On day 3") and len(whole["episode"]["body"]) > 240
    assert whole["passages"] and [p["position"] for p in whole["passages"]] == sorted(
        p["position"] for p in whole["passages"]
    )
    with pytest.raises(InvalidInput, match="limit"):
        wb.pages.list_episodes("home", limit=0)
    with pytest.raises(NotFound):
        wb.pages.get_episode("3a460868-7411-4c0e-99cf-570bf7f9a77d")


def test_facts_current_superseded_and_all(wb):
    assert wb.pages.list_facts("home")["total"] == 3
    current = wb.pages.list_facts("home", state="current")["facts"]
    assert {f["fact"] for f in current} == {"Maria works at Acme", "Tom works at Acme"}
    (old,) = wb.pages.list_facts("home", state="superseded")["facts"]
    assert old["superseded"] and old["invalid_at"].startswith("2025-03-01")
    assert (old["source_name"], old["target_name"]) == ("Maria", "Porto")
    with pytest.raises(InvalidInput, match="state"):
        wb.pages.list_facts("home", state="old")


def test_entities_and_a_neighbourhood(wb):
    page = wb.pages.list_entities("home")
    assert [e["name"] for e in page["entities"]] == ["Acme", "Maria", "Porto", "Tom"]
    assert {e["name"]: e["fact_count"] for e in page["entities"]}["Acme"] == 2
    (maria,) = wb.pages.list_entities("home", name_contains="MAR")["entities"]
    around = wb.pages.get_entity(maria["uuid"])
    assert around["entity"]["summary"] == "a user"
    assert [f["superseded"] for f in around["facts"]] == [False, True]  # current first
    assert {n["name"] for n in around["neighbours"]} == {"Acme", "Porto"}


def test_deleting_an_entity_takes_its_facts_and_search_forgets_them(wb):
    acme = wb.pages.list_entities("home", name_contains="acme")["entities"][0]
    assert wb.search_memory_facts("works at Acme", ["home"])["facts"]
    answer = wb.delete_entity(acme["uuid"])
    assert answer["facts_removed"] == 2 and "Acme" in answer["message"]
    assert wb.pages.list_facts("home")["total"] == 1
    found = wb.search_memory_facts("works at Acme", ["home"])["facts"]
    assert all("Acme" not in f["fact"] for f in found)
    assert (
        wb.pages.list_entities("work", name_contains="acme")["total"] == 1
    )  # another group's Acme
    with pytest.raises(NotFound):
        wb.delete_entity(acme["uuid"])
