"""The time arguments of the search tools over REST and MCP: ``after`` / ``before``,
``as_of``, ``include_superseded``, ``now``; the answers' ``time_window`` and
``superseded_omitted`` match the published response schemas; bad times are 400s."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from litestar.testing import TestClient
from mcp import Client

from service.api.app import create_app
from service.api.responses import RESULTS
from tests.service.svc_helpers import BASE, assert_error, call, make_settings
from workbench.clock import ManualClock
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics

NOW = datetime(2026, 3, 11, 12, tzinfo=UTC)
MOVED = NOW - timedelta(days=30)


@pytest.fixture
def wb():
    workbench = Workbench.open(make_settings(), embedder=HashEmbedder(), chat=None,
                               metrics=Metrics(), clock=ManualClock(NOW))  # fmt: skip
    for days, text in (
        (25, "I planted tomatoes in the garden"),
        (6, "I planted basil in the garden"),
    ):
        when = (NOW - timedelta(days=days)).isoformat()
        workbench.add_memory(f"chat {days}", f"user: {text}", group_id="g", source="message",
                             reference_time=when)  # fmt: skip
    lines = [
        {"type": "fact", "group_id": "g", "source": "Alice", "target": "Lisbon",
         "relation": "LIVES_IN", "fact": "Alice lives in Lisbon",
         "valid_at": "2024-01-01T00:00:00Z", "invalid_at": MOVED.isoformat()},
        {"type": "fact", "group_id": "g", "source": "Alice", "target": "Porto",
         "relation": "LIVES_IN", "fact": "Alice lives in Porto", "valid_at": MOVED.isoformat()},
    ]  # fmt: skip
    workbench.import_jsonl([json.dumps(line) for line in lines])
    assert workbench.passages.flush(timeout=30)  # every passage embedded
    yield workbench
    workbench.close()


@pytest.fixture
def client(wb):
    with TestClient(create_app(wb, wb.settings), base_url=BASE) as test_client:
        yield test_client


def test_rest_search_memory_reads_time_words_against_now(client):
    out = call(client, "search_memory", {"query": "what did I say about the garden last week",
                                         "now": NOW.isoformat(), "kinds": ["passage"]})  # fmt: skip
    RESULTS["search_memory"].model_validate(out)
    assert out["time_window"]["text"] == "last week"
    assert "basil" in out["results"][0]["text"] and out["results"][0]["score_parts"]["time"] == 1
    asked = (NOW - timedelta(days=19)).isoformat()
    earlier = call(client, "search_memory", {"query": "the garden last week", "now": asked})
    assert "tomatoes" in earlier["results"][0]["text"]


def test_rest_superseded_facts_as_of_and_the_count_left_out(client):
    body = {"query": "where does Alice live", "group_ids": ["g"]}
    current = call(client, "search_memory_facts", body)
    RESULTS["search_memory_facts"].model_validate(current)
    assert [f["fact"] for f in current["facts"]] == ["Alice lives in Porto"]
    assert current["superseded_omitted"] == 1
    then = call(client, "search_memory_facts", body | {"as_of": "2025-06-01T00:00:00Z"})
    assert [f["fact"] for f in then["facts"]] == ["Alice lives in Lisbon"]
    both = call(client, "search_memory", body | {"kinds": ["fact"], "include_superseded": True})
    RESULTS["search_memory"].model_validate(both)
    old = next(f for f in both["results"] if f["fact"] == "Alice lives in Lisbon")
    new = next(f for f in both["results"] if f["fact"] == "Alice lives in Porto")
    assert old["superseded_by"] == new["uuid"] and both["superseded_omitted"] == 0
    window = call(client, "search_memory_nodes", {"query": "Alice", "after": "2025-01-01",
                                                  "before": "2025-02-01"})  # fmt: skip
    assert "Alice" in [n["name"] for n in window["nodes"]]


@pytest.mark.parametrize(("tool", "args", "fragment"), [
    ("search_memory", {"after": "next week"}, "'after' is not an ISO 8601"),
    ("search_memory", {"now": "2026-02-30"}, "'now' is not an ISO 8601"),
    ("search_memory_facts", {"as_of": "then"}, "'as_of' is not an ISO 8601"),
    ("search_memory_nodes", {"after": "2026-03-01", "before": "2026-02-01"},
     "'after' (2026-03-01T00:00:00+00:00) must be earlier than 'before'"),
])  # fmt: skip
def test_rest_bad_times_are_400s(client, tool, args, fragment):
    assert_error(call(client, tool, {"query": "garden"} | args, status=400), "invalid_input",
                 fragment)  # fmt: skip


@pytest.mark.anyio
async def test_mcp_takes_the_same_time_arguments(wb, server_thread):
    url = server_thread(create_app(wb, wb.settings)).url + "/mcp"
    async with Client(url) as client:
        said = await client.call_tool("search_memory", {"query": "garden last week",
                                                        "now": NOW.isoformat()})  # fmt: skip
        assert not said.is_error
        assert said.structured_content["time_window"]["text"] == "last week"
        facts = await client.call_tool("search_memory_facts", {
            "query": "where does Alice live", "as_of": "2025-06-01T00:00:00Z"})  # fmt: skip
        assert [f["fact"] for f in facts.structured_content["facts"]] == ["Alice lives in Lisbon"]
        bad = await client.call_tool("search_memory", {"query": "x", "before": "soon"})
        assert bad.is_error
