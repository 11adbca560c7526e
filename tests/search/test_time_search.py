"""Search by the time a memory is about: ``after`` / ``before``, ``as_of``,
``include_superseded`` (with ``superseded_by`` and ``superseded_omitted``), the window a
query's time words name (a boost reported as ``time_window``) and recency for a question about
the present; the pure rules first, then through the facade."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from workbench.clock import ManualClock
from workbench.config import load_settings
from workbench.errors import InvalidInput
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.index.rows import NO_TIME, to_micros
from workbench.search.ranking import TimeBoost, boosted, recency_score, time_parts, window_score

NOW = datetime(2026, 3, 11, 12, tzinfo=UTC)  # a Wednesday
DAY = timedelta(days=1)


def us(when: datetime) -> int:
    return to_micros(when)


# --- the pure rules ---------------------------------------------------------------------------
def test_the_window_score_is_one_inside_and_falls_to_zero_one_length_away():
    start, end = us(NOW - 7 * DAY), us(NOW)
    when = np.array([us(NOW - 3 * DAY), us(NOW - 10.5 * DAY), us(NOW - 14 * DAY),
                     us(NOW + 30 * DAY), NO_TIME], dtype=np.int64)  # fmt: skip
    score = window_score(when, start, end)
    assert score[0] == 1.0 and score[1] == pytest.approx(0.5, abs=1e-3)
    assert score[2] == pytest.approx(0.0, abs=1e-3) and score[3] == 0.0 and score[4] == 0.0


def test_recency_ranks_the_newest_one_and_the_oldest_zero():
    when = np.array([us(NOW - 2 * DAY), us(NOW), us(NOW - DAY)], dtype=np.int64)
    assert recency_score(when).tolist() == [0.0, 1.0, 0.5]
    assert recency_score(np.array([5, 5])).tolist() == [0.0, 0.0]
    assert recency_score(np.zeros(0)).tolist() == []


def test_a_boost_adds_only_the_parts_it_asks_for():
    when = np.array([us(NOW - DAY), us(NOW - 30 * DAY)], dtype=np.int64)
    assert time_parts(when, TimeBoost()) == {}
    assert not TimeBoost()
    parts = time_parts(when, TimeBoost((us(NOW - 2 * DAY), us(NOW)), recent=True))
    assert set(parts) == {"time", "recency"}
    boost = TimeBoost((us(NOW - 2 * DAY), us(NOW)), True, window_weight=0.2, recency_weight=0.1)
    score = boosted(np.zeros(2), parts, boost)
    assert score.tolist() == pytest.approx([0.3, 0.0])


# --- through the facade -------------------------------------------------------------------------
@pytest.fixture
def wb():
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=HashEmbedder(), chat=None,
                        clock=ManualClock(NOW)) as workbench:  # fmt: skip
        yield workbench


def said(wb: Workbench, text: str, when: datetime, group: str = "g") -> str:
    body = f"user: {text}"
    uuid = wb.add_memory(f"chat {when:%F}", body, group_id=group, source="message",
                         reference_time=when.isoformat())["episode_uuid"]  # fmt: skip
    assert wb.passages.flush(timeout=30)  # embedded: every passage ranked on the same parts
    return uuid


def facts(wb: Workbench, *lines: dict) -> None:
    report = wb.import_jsonl([json.dumps({"type": "fact", "group_id": "g", **line})
                              for line in lines])  # fmt: skip
    assert report["facts_created"] == len(lines)


def test_what_did_i_say_last_week_ranks_last_weeks_passages_first(wb):
    said(wb, "I planted tomatoes in the garden", NOW - 25 * DAY)
    last_week = said(wb, "I planted basil in the garden", NOW - 6 * DAY)  # Thursday before
    said(wb, "I planted roses in the garden", NOW - DAY)
    out = wb.search_memory("what did I say about the garden last week?", now=NOW.isoformat())
    assert out["time_window"] == {
        "start": "2026-03-02T00:00:00+00:00",
        "end": "2026-03-09T00:00:00+00:00",
        "text": "last week",
    }
    first = out["results"][0]
    assert first["episode_uuid"] == last_week and first["score_parts"]["time"] == 1.0
    assert len(out["results"]) == 3  # a boost, not a filter
    plain = wb.search_memory("what did I say about the garden?")
    assert plain["time_window"] is None and "time" not in plain["results"][0]["score_parts"]


def test_now_moves_the_window_a_replayed_conversation_reads(wb):
    said(wb, "We went hiking in the Alps", datetime(2023, 5, 20, tzinfo=UTC))
    said(wb, "We went hiking in the Andes", datetime(2023, 5, 2, tzinfo=UTC))
    out = wb.search_memory("where did we go hiking two weeks ago", now="2023-05-16T09:00:00Z")
    assert out["time_window"]["start"].startswith("2023-05-01")
    assert "Andes" in out["results"][0]["text"]


def test_a_question_about_the_present_ranks_the_newer_memory_first(wb):
    said(wb, "I work as a nurse at the city hospital", NOW - 300 * DAY)
    said(wb, "I work as a teacher at the city school", NOW - 20 * DAY)
    out = wb.search_memory("where do I currently work", kinds=["passage"])
    assert "teacher" in out["results"][0]["text"]
    assert out["results"][0]["score_parts"]["recency"] == 1.0


def test_after_and_before_keep_passages_said_in_the_window(wb):
    said(wb, "the blue bicycle was stolen", NOW - 40 * DAY)
    recent = said(wb, "the red bicycle was repaired", NOW - 5 * DAY)
    out = wb.search_memory("bicycle", after=(NOW - 10 * DAY).isoformat())
    assert [r["episode_uuid"] for r in out["results"]] == [recent]
    old = wb.search_memory("bicycle", before=(NOW - 10 * DAY).isoformat())["results"]
    assert len(old) == 1 and "blue" in old[0]["text"]


def test_a_fact_superseded_last_month_is_found_as_of_before_then_and_not_by_default(wb):
    moved = NOW - 30 * DAY
    facts(
        wb,
        {"source": "Alice", "target": "Lisbon", "relation": "LIVES_IN",
         "fact": "Alice lives in Lisbon", "valid_at": "2024-01-01T00:00:00Z",
         "invalid_at": moved.isoformat()},
        {"source": "Alice", "target": "Porto", "relation": "LIVES_IN",
         "fact": "Alice lives in Porto", "valid_at": moved.isoformat()},
    )  # fmt: skip
    current = wb.search_memory_facts("where does Alice live", group_ids=["g"])
    assert [f["fact"] for f in current["facts"]] == ["Alice lives in Porto"]
    assert current["superseded_omitted"] == 1
    then = wb.search_memory_facts("where does Alice live", as_of=(moved - 5 * DAY).isoformat())
    assert [f["fact"] for f in then["facts"]] == ["Alice lives in Lisbon"]
    both = wb.search_memory_facts("where does Alice live", include_superseded=True)
    by_text = {f["fact"]: f for f in both["facts"]}
    assert set(by_text) == {"Alice lives in Lisbon", "Alice lives in Porto"}
    assert (
        by_text["Alice lives in Lisbon"]["superseded_by"] == by_text["Alice lives in Porto"]["uuid"]
    )
    assert by_text["Alice lives in Lisbon"]["invalid_at"] == moved.isoformat()
    assert by_text["Alice lives in Porto"]["superseded_by"] is None
    assert both["superseded_omitted"] == 0
    recalled = wb.search_memory("where does Alice live", kinds=["fact"])
    assert recalled["superseded_omitted"] == 1 and len(recalled["results"]) == 1
    window = wb.search_memory_facts("Alice lives", after="2024-06-01", before="2024-07-01")
    assert [f["fact"] for f in window["facts"]] == ["Alice lives in Lisbon"]


def test_a_fact_without_valid_at_is_about_the_time_it_was_stored(wb):
    facts(wb, {"source": "Bo", "target": "chess", "fact": "Bo plays chess"})
    assert wb.search_memory_facts("Bo chess", after=(NOW - DAY).isoformat())["facts"]
    assert not wb.search_memory_facts("Bo chess", before=(NOW - DAY).isoformat())["facts"]


def test_an_entity_is_about_the_times_of_its_facts(wb):
    visit = {"valid_at": "2025-06-01T00:00:00Z", "invalid_at": "2025-06-10T00:00:00Z"}
    facts(wb, {"source": "Carla", "target": "Rome", "fact": "Carla visited Rome", **visit})
    found = wb.search_memory_nodes("Carla", after="2025-06-05", before="2025-07-01")["nodes"]
    assert "Carla" in [n["name"] for n in found]
    later = wb.search_memory_nodes("Carla", after="2025-08-01", before="2025-09-01")["nodes"]
    assert "Carla" not in [n["name"] for n in later]


@pytest.mark.parametrize(("args", "says"), [
    ({"after": "last tuesday"}, "'after' is not an ISO 8601"),
    ({"before": "2026-13-01"}, "'before' is not an ISO 8601"),
    ({"after": "2026-02-01", "before": "2026-01-01"},
     "'after' (2026-02-01T00:00:00+00:00) must be earlier"),
    ({"as_of": "yesterday"}, "'as_of' is not an ISO 8601"),
    ({"now": "soon"}, "'now' is not an ISO 8601"),
])  # fmt: skip
def test_bad_times_are_clear_errors(wb, args, says):
    said(wb, "anything at all", NOW)
    with pytest.raises(InvalidInput, match=re.escape(says)):
        wb.search_memory("anything", **args)
