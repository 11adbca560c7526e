"""MCP with the SDK's own client: streamable HTTP against the real app on uvicorn, and stdio
against ``workbench mcp`` as a subprocess. Same tools, names and schemas as REST."""

from __future__ import annotations

import os
import sys

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from pydantic import SecretStr

from service.api.app import create_app
from service.api.tools import TOOLS
from workbench.config import load_settings
from workbench.facade import Workbench
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import chat_settings_env
from workbench.metrics import Metrics

pytestmark = pytest.mark.anyio


@pytest.fixture
def wb(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    settings = load_settings(
        {**chat_settings_env(fake_llm), "SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None
    )
    workbench = Workbench.open(settings, embedder=hash_embedder, metrics=Metrics())
    yield workbench
    workbench.close()


@pytest.fixture
def mcp_url(wb, server_thread):
    return server_thread(create_app(wb, wb.settings)).url + "/mcp"


async def test_lists_the_tool_table(mcp_url):
    async with Client(mcp_url) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
    assert list(listed) == [t.name for t in TOOLS]
    for tool in TOOLS:
        assert listed[tool.name].description == tool.description
        assert (
            listed[tool.name].input_schema["properties"].keys()
            == tool.input_schema()["properties"].keys()
        )
    assert listed["search_memory_facts"].annotations.read_only_hint is True
    assert listed["clear_graph"].annotations.destructive_hint is True
    writes = listed["export_snapshot"].annotations  # it writes files: no auto-approval
    assert writes.read_only_hint is False and writes.idempotent_hint is False


async def test_calls_tools_and_gets_structured_results(mcp_url, wb):
    async with Client(mcp_url) as client:
        added = await client.call_tool(
            "add_memory",
            {"name": "intro", "episode_body": "Maria Keller works at Acme.", "group_id": "g1"},
        )
        assert not added.is_error
        assert added.structured_content["status"] == "queued"
        # what was said is found before extraction
        said = await client.call_tool("search_memory", {"query": "Maria Keller Acme"})
        assert not said.is_error
        [passage] = said.structured_content["results"]
        assert passage["kind"] == "passage" and passage["text"] == "Maria Keller works at Acme."
        await anyio.to_thread.run_sync(wb.process_pending)
        found = await client.call_tool("search_memory_facts", {"query": "Maria Keller Acme"})
        assert not found.is_error
        assert any("Acme" in f["fact"] for f in found.structured_content["facts"])
        episodes = await client.call_tool("get_episodes", {"group_id": "g1", "last_n": 5})
        assert len(episodes.structured_content["episodes"]) == 1


async def test_errors_are_tool_results_with_the_error_body(mcp_url):
    async with Client(mcp_url) as client:
        missing = await client.call_tool("add_memory", {"name": "x"})
        assert missing.is_error
        assert missing.structured_content["error"]["type"] == "invalid_input"
        assert "episode_body" in missing.structured_content["error"]["message"]
        absent = await client.call_tool(
            "get_entity_edge", {"uuid": "00000000-0000-4000-8000-000000000000"}
        )
        assert absent.is_error and absent.structured_content["error"]["type"] == "not_found"
        unknown = await client.call_tool("nope", {})
        assert unknown.is_error


async def test_bearer_token_protects_mcp(wb, server_thread):
    settings = wb.settings.model_copy(update={"api_token": SecretStr("mcp-token-long-enough")})
    url = server_thread(create_app(wb, settings)).url + "/mcp"
    headers = {"Authorization": "Bearer mcp-token-long-enough"}
    async with httpx2.AsyncClient(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            assert len((await client.list_tools()).tools) == len(TOOLS)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the SDK wraps the 401 its own way
        with anyio.fail_after(20):
            async with Client(url) as client:
                await client.list_tools()


@pytest.mark.slow
async def test_stdio_subprocess(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    env.update(
        {
            "SVC_KNOWLEDGE_DB_PATH": str(tmp_path / "kb.duckdb"),
            "LOG_LEVEL": "WARNING",
            "SVC_KNOWLEDGE_MCP_IDLE_SECONDS": "1",  # its shared service stops after the test
        }
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "service.control.cli", "mcp"],
        env=env,
        cwd=str(tmp_path),
    )
    with anyio.fail_after(90):
        async with Client(params) as client:
            tools = (await client.list_tools()).tools
            assert len(tools) == len(TOOLS)
            added = await client.call_tool(
                "add_memory", {"name": "n", "episode_body": "Tom uses Python."}
            )
            assert not added.is_error and "no LLM" in added.structured_content["detail"]
            status = await client.call_tool("get_status", {})
            assert status.structured_content["queue"]
