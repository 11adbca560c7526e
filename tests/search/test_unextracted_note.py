"""An empty search of entities or facts says when the searched groups have episodes not
extracted yet (its ``note``): with no LLM they wait for one, with one they are under way.
Nothing is said when the search finds something or the groups have nothing waiting."""

from __future__ import annotations

import pytest

from workbench import Workbench, load_settings
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import chat_settings_env
from workbench.store import queue as q


def open_wb(hash_embedder, env=None):
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:", **(env or {})}, env_file=None)
    return Workbench.open(settings, embedder=hash_embedder)


@pytest.mark.parametrize("tool", ["search_memory_facts", "search_memory_nodes"])
def test_with_no_llm_an_empty_search_says_episodes_wait_for_one(hash_embedder, tool):
    wb = open_wb(hash_embedder)
    try:
        assert "note" not in getattr(wb, tool)("where does Maria work")  # nothing waits
        wb.add_memory("n1", "Maria Keller works at Acme.", group_id="work")
        wb.add_memory("n2", "Maria Keller lives in Munich.", group_id="work")
        found = getattr(wb, tool)("where does Maria work")
        assert found["note"].startswith("2 episodes of the searched groups are not extracted")
        assert "none is configured" in found["note"] and "search_memory" in found["note"]
        assert "note" not in getattr(wb, tool)("Maria", group_ids=["home"])  # not its groups
        wb.add_memory("n3", "Tom plays chess.", group_id="home")
        assert getattr(wb, tool)("x", group_ids=["home"])["note"].startswith(
            "1 episode of the searched groups is not"
        )
        assert wb.search_memory("Maria Acme")["results"]  # the words are found already
    finally:
        wb.close()


def test_with_an_llm_the_note_says_extraction_is_under_way_until_it_is_done(
    hash_embedder, fake_llm
):
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(hash_embedder, chat_settings_env(fake_llm))
    try:
        wb.add_memory("n1", "Maria Keller works at Acme.", group_id="work")
        note = wb.search_memory_facts("zzz unrelated", group_ids=["work"])["note"]
        assert "under way" in note and "get_queue_status" in note
        assert wb.process_pending() == 1
        assert "note" not in wb.search_memory_facts("zzz unrelated", group_ids=["work"])
        assert wb.search_memory_facts("Maria Acme")["facts"]
    finally:
        wb.close()


def test_the_count_covers_queued_and_processing_episodes_of_the_groups(hash_embedder):
    wb = open_wb(hash_embedder)
    try:
        for i, group in enumerate(["a", "a", "b"]):
            wb.add_memory(f"n{i}", f"note {i}", group_id=group)
        assert q.unextracted(wb.store, None) == 3 and q.unextracted(wb.store, []) == 3
        assert q.unextracted(wb.store, ["a"]) == 2 and q.unextracted(wb.store, ["c"]) == 0
        wb.store.execute("UPDATE queue SET state = 'processing' WHERE group_id = 'b'")
        assert q.unextracted(wb.store, ["b"]) == 1
        wb.store.execute("UPDATE queue SET state = 'failed' WHERE group_id = 'b'")
        assert q.unextracted(wb.store, ["b"]) == 0
    finally:
        wb.close()
