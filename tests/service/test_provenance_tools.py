"""``get_sources``, ``get_timeline`` and every fact's ``sources`` over REST and MCP, within
the caller's token: a timeline of its own groups only, another group's uuid a 404."""

from __future__ import annotations

import anyio
import httpx2
import pytest
from litestar.testing import TestClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from service.api.app import create_app
from tests.ingest.test_pipeline import open_wb
from tests.service.svc_helpers import BASE, assert_error, call
from workbench.fakes import rule_llm

ADMIN = "admin-token-long-enough-123"
WHEN = ("2026-01-05T10:00:00+00:00", "2026-03-05T10:00:00+00:00")


@pytest.fixture
def wb(fake_llm, hash_embedder):
    """Two groups; in team-a one fact stated by two episodes; a token ``alice`` of team-a."""
    fake_llm.set_responder(rule_llm.respond)
    workbench = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_API_TOKEN=ADMIN)
    for group, who in (("team-a", "Maria Keller"), ("team-b", "Tom")):
        for i, when in enumerate(WHEN):
            workbench.add_memory(
                f"note {i}", f"{who} works at Acme.", group_id=group, reference_time=when
            )
    workbench.process_pending()
    workbench.token = workbench.add_token("alice", ["team-a"])["token"]
    yield workbench
    workbench.close()


@pytest.fixture
def client(wb):
    with TestClient(create_app(wb, wb.settings), base_url=BASE) as test_client:
        yield test_client


def alice(wb):
    return {"Authorization": f"Bearer {wb.token}"}


def test_sources_over_rest_within_a_token(client, wb):
    facts = call(client, "search_memory_facts", {"query": "works at Acme"}, headers=alice(wb))
    [fact] = facts["facts"]
    assert fact["group_id"] == "team-a"
    assert [e["episode_name"] for e in fact["sources"]["episodes"]] == ["note 0", "note 1"]
    assert fact["sources"]["first_said"] == WHEN[0] and fact["sources"]["last_said"] == WHEN[1]
    recall = call(client, "search_memory", {"query": "works at Acme"}, headers=alice(wb))
    assert all(len(r["sources"]["episodes"]) == 2 for r in recall["results"] if r["kind"] == "fact")
    full = call(client, "get_sources", {"uuid": fact["uuid"]}, headers=alice(wb))
    assert full["kind"] == "fact" and full["sources"]["episode_count"] == 2
    edge = call(client, "get_entity_edge", {"uuid": fact["uuid"]}, headers=alice(wb))
    assert edge["sources"]["episode_count"] == 2
    theirs = wb.search_memory_facts("works at Acme", ["team-b"])["facts"][0]["uuid"]
    hidden = call(client, "get_sources", {"uuid": theirs}, status=404, headers=alice(wb))
    assert_error(hidden, "not_found")


def test_a_timeline_over_rest_is_the_tokens_groups_in_order(client, wb):
    page = call(client, "get_timeline", {}, headers=alice(wb))
    assert {e["group_id"] for e in page["events"]} == {"team-a"}
    assert page["groups"] == ["team-a"]
    times = [e["at"] for e in page["events"]]
    assert times == sorted(times) and page["next"] is None
    assert [e["event"] for e in page["events"]][:1] == ["episode"]
    forbidden = call(
        client, "get_timeline", {"group_ids": ["team-b"]}, status=403, headers=alice(wb)
    )
    assert_error(forbidden, "forbidden", "alice")
    bruno = wb.search_memory_nodes("Tom", ["team-b"])["nodes"][0]["uuid"]
    hidden = call(client, "get_timeline", {"entity_uuid": bruno}, status=404, headers=alice(wb))
    assert_error(hidden, "not_found")
    bad = call(client, "get_timeline", {"cursor": "nope"}, status=400, headers=alice(wb))
    assert_error(bad, "invalid_input", "cursor")
    bad = call(client, "get_timeline", {"after": "soon"}, status=400, headers=alice(wb))
    assert_error(bad, "invalid_input", "after")


@pytest.mark.anyio
async def test_sources_and_the_timeline_over_mcp(wb, server_thread):
    url = server_thread(create_app(wb, wb.settings)).url + "/mcp"
    async with httpx2.AsyncClient(headers=alice(wb)) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            found = await client.call_tool("search_memory_facts", {"query": "works at Acme"})
            [fact] = found.structured_content["facts"]
            assert fact["sources"]["episode_count"] == 2
            got = await client.call_tool("get_sources", {"uuid": fact["uuid"]})
            assert not got.is_error and got.structured_content["kind"] == "fact"
            page = await client.call_tool("get_timeline", {"max_items": 2})
            assert not page.is_error and len(page.structured_content["events"]) == 2
            more = await client.call_tool(
                "get_timeline", {"max_items": 50, "cursor": page.structured_content["next"]}
            )
            events = page.structured_content["events"] + more.structured_content["events"]
            assert len({e["uuid"] + e["event"] for e in events}) == len(events)
            assert {e["group_id"] for e in events} == {"team-a"}
    await anyio.sleep(0)
