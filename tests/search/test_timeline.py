"""``get_timeline``: episodes, facts that became true and facts that stopped being true (and
what superseded them), in time order, within a window, for one entity, page by page."""

from __future__ import annotations

import pytest

from tests.search.test_provenance import said, wb  # noqa: F401 - the fixture
from workbench.errors import InvalidInput
from workbench.search.timeline import decode_cursor

JAN, FEB, MAR = (f"2026-0{m}-10T09:00:00+00:00" for m in (1, 2, 3))


@pytest.fixture
def moved(wb):  # noqa: F811
    said(wb, "berlin", "Maria Keller lives in Berlin.", JAN)
    said(wb, "job", "Maria Keller works at Acme.", FEB)
    said(wb, "munich", "Maria Keller moved to Munich.", MAR)
    said(wb, "elsewhere", "Tom lives in Berlin.", FEB, group="other")
    wb.process_pending()
    return wb


def kinds(page):
    return [(e["event"], e.get("name") or e.get("fact")) for e in page["events"]]


def test_events_come_in_time_order_with_what_superseded_a_fact(moved):
    page = moved.get_timeline(["g1"])
    assert kinds(page) == [
        ("episode", "berlin"),
        ("fact_valid", "Maria Keller lives in Berlin."),
        ("episode", "job"),
        ("fact_valid", "Maria Keller works at Acme."),
        ("episode", "munich"),
        ("fact_invalid", "Maria Keller lives in Berlin."),
        ("fact_valid", "Maria Keller lives in Munich."),
    ]
    assert page["next"] is None
    ended = page["events"][5]
    assert ended["invalid_at"] == MAR and ended["at"] == MAR
    assert [s["fact"] for s in ended["superseded_by"]] == ["Maria Keller lives in Munich."]
    assert {e["group_id"] for e in page["events"]} == {"g1"}
    everything = moved.get_timeline()
    assert {e["group_id"] for e in everything["events"]} == {"g1", "other"}


def test_a_window_keeps_what_changed_in_it(moved):
    since = moved.get_timeline(["g1"], after=FEB)
    assert kinds(since)[0] == ("episode", "job") and len(since["events"]) == 5
    before = moved.get_timeline(["g1"], after=FEB, before=MAR)
    assert kinds(before) == [("episode", "job"), ("fact_valid", "Maria Keller works at Acme.")]
    with pytest.raises(InvalidInput, match="'after'"):
        moved.get_timeline(["g1"], after=MAR, before=FEB)
    with pytest.raises(InvalidInput, match="after"):
        moved.get_timeline(["g1"], after="next tuesday")


def test_pages_follow_each_other_without_repeats_or_gaps(moved):
    whole = kinds(moved.get_timeline(["g1"]))
    seen, cursor = [], None
    while True:
        page = moved.get_timeline(["g1"], max_items=2, cursor=cursor)
        assert len(page["events"]) <= 2
        seen += kinds(page)
        cursor = page["next"]
        if cursor is None:
            break
        said(moved, "later", "Maria Keller uses Neovim.", "2026-04-01T00:00:00+00:00")
    assert seen[: len(whole)] == whole
    with pytest.raises(InvalidInput, match="max_items"):
        moved.get_timeline(["g1"], max_items=0)
    with pytest.raises(InvalidInput, match="cursor"):
        decode_cursor("bm90IGEgY3Vyc29y")


def test_one_entity_has_its_episodes_and_facts_only(moved):
    acme = moved.search_memory_nodes("Acme", ["g1"])["nodes"][0]
    assert acme["name"] == "Acme"
    page = moved.get_timeline(["g1"], entity_uuid=acme["uuid"])
    assert kinds(page) == [("episode", "job"), ("fact_valid", "Maria Keller works at Acme.")]
