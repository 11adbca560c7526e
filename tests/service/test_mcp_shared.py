"""Many stdio clients, one memory: two ``workbench mcp`` processes driven by the official SDK
client share the background service the first one starts, which stops once both are gone."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from service.client.live import record_path
from service.control.shared import ClientLease, IdleWatch, join_or_start, live_clients
from service.sidecars.embed_server import create_embed_app
from tests.service.svc_helpers import environ_without_settings
from workbench.fakes.embedder import HashEmbedder

REPO = Path(__file__).resolve().parents[2]


def fact(source: str, target: str, text: str) -> str:
    return json.dumps({"type": "fact", "source": source, "target": target, "fact": text})


async def facts_found(client, query: str) -> list[str]:
    result = await client.call_tool("search_memory_facts", {"query": query})
    assert not result.is_error, result.content
    return [f["fact"] for f in result.structured_content["facts"]]


@pytest.mark.slow
@pytest.mark.anyio
async def test_two_stdio_clients_write_and_search_one_memory(tmp_path, server_thread):
    embed = server_thread(create_embed_app(HashEmbedder()))
    data, elsewhere = tmp_path / "xdg", tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = environ_without_settings(
        PYTHONPATH=str(REPO),
        XDG_DATA_HOME=str(data),
        SVC_KNOWLEDGE_EMBEDDER_BASE_URL=f"{embed.url}/v1",
        SVC_KNOWLEDGE_EMBEDDER_MODEL="hash-bow",
        SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS="384",
        SVC_KNOWLEDGE_MCP_IDLE_SECONDS="1",
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "service.control.cli", "mcp"],
        env=env,
        cwd=str(elsewhere),
    )
    database = data / "knowledge-workbench" / "knowledge.duckdb"
    with anyio.fail_after(120):
        async with Client(params) as first, Client(params) as second:
            one = await first.call_tool(
                "import_memories", {"lines": [fact("Maria", "Acme", "Maria works at Acme")]}
            )
            two = await second.call_tool(
                "import_memories", {"lines": [fact("Tom", "Berlin", "Tom lives in Berlin")]}
            )
            assert not one.is_error and not two.is_error, (one.content, two.content)
            assert "Tom lives in Berlin" in await facts_found(first, "Tom Berlin")
            assert "Maria works at Acme" in await facts_found(second, "Maria Acme")
            record = json.loads(record_path(database).read_text())
    assert database.is_file() and not (elsewhere / "data").exists()
    deadline = time.monotonic() + 30
    while record_path(database).exists() and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    assert not record_path(database).exists(), "the shared service outlived its clients"
    with pytest.raises(ProcessLookupError):
        for _ in range(100):  # the record goes first, the process right after
            os.kill(record["pid"], 0)
            time.sleep(0.1)


def test_a_client_counts_while_its_process_lives(tmp_path):
    db = tmp_path / "kb.duckdb"
    assert live_clients(db) == 0
    with ClientLease(db):
        assert live_clients(db) == 1
        with ClientLease(db, pid=2**22 + 12345):  # no such process: a killed client
            assert live_clients(db) == 1
    assert live_clients(db) == 0


def test_the_service_stops_only_after_a_grace_period_without_clients(tmp_path):
    db, now = tmp_path / "kb.duckdb", [0.0]
    watch = IdleWatch(db, 10, lambda: None, clock=lambda: now[0])
    with ClientLease(db):
        assert watch.check() is False
    assert watch.check() is False  # idle from now
    now[0] = 9.0
    assert watch.check() is False
    with ClientLease(db):  # a client came back: the grace starts again when it leaves
        assert watch.check() is False
    now[0] = 15.0
    assert watch.check() is False
    now[0] = 25.0
    assert watch.check() is True


def test_a_folder_that_cannot_be_made_is_a_clear_error_not_a_crash(tmp_path):
    from workbench.config import load_settings
    from workbench.errors import StoreError

    blocker = tmp_path / "a-file"
    blocker.write_text("")  # the database's folder would be inside a file
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": str(blocker / "kb.duckdb")}, env_file=None)
    with ClientLease(settings.db_location()):  # only a warning
        with pytest.raises(StoreError, match="cannot start the shared service"):
            join_or_start(settings, timeout=5)


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_killed_background_service_is_replaced_for_every_client(tmp_path, server_thread):
    """SIGKILL to the shared service: its starter reaps it (no zombie whose record looks
    valid), and both the starter and a client that joins afterwards get a new service."""
    import signal

    embed = server_thread(create_embed_app(HashEmbedder()))
    data = tmp_path / "xdg"
    env = environ_without_settings(
        PYTHONPATH=str(REPO),
        XDG_DATA_HOME=str(data),
        SVC_KNOWLEDGE_EMBEDDER_BASE_URL=f"{embed.url}/v1",
        SVC_KNOWLEDGE_EMBEDDER_MODEL="hash-bow",
        SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS="384",
        SVC_KNOWLEDGE_MCP_IDLE_SECONDS="2",
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "service.control.cli", "mcp"],
        env=env,
        cwd=str(tmp_path),
    )
    database = data / "knowledge-workbench" / "knowledge.duckdb"
    with anyio.fail_after(180):
        async with Client(params) as first:
            one = await first.call_tool("import_memories", {"lines": [fact("A", "B", "A likes B")]})
            assert not one.is_error, one.content
            killed = json.loads(record_path(database).read_text())["pid"]
            os.kill(killed, signal.SIGKILL)
            async with Client(params) as second:  # joins after the kill: starts a new one
                assert "A likes B" in await facts_found(second, "A B")
            assert "A likes B" in await facts_found(first, "A likes")
            assert json.loads(record_path(database).read_text())["pid"] != killed
        assert not Path(f"/proc/{killed}").exists(), "the killed service stayed a zombie"


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_scoped_token_stays_scoped_through_the_background_service(tmp_path, server_thread):
    """The first `workbench mcp` starts the service with its environment: a read-only token
    there must not become the service's admin token (no write, no token minted)."""
    from workbench.config import load_settings
    from workbench.facade import Workbench
    from workbench.metrics import Metrics

    embed = server_thread(create_embed_app(HashEmbedder()))
    db = tmp_path / "kb.duckdb"
    embedder_env = {
        "SVC_KNOWLEDGE_EMBEDDER_BASE_URL": f"{embed.url}/v1",
        "SVC_KNOWLEDGE_EMBEDDER_MODEL": "hash-bow",
        "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "384",
    }
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": str(db), **embedder_env}, env_file=None)
    with Workbench.open(settings, embedder=HashEmbedder(), metrics=Metrics()) as wb:
        reader = wb.add_token("reader", ["alpha"], read_only=True)["token"]
    env = environ_without_settings(
        PYTHONPATH=str(REPO),
        SVC_KNOWLEDGE_DB_PATH=str(db),
        SVC_KNOWLEDGE_API_TOKEN=reader,
        SVC_KNOWLEDGE_MCP_IDLE_SECONDS="1",
        **embedder_env,
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "service.control.cli", "mcp"],
        env=env,
        cwd=str(tmp_path),
    )
    with anyio.fail_after(120):
        async with Client(params) as client:
            write = await client.call_tool(
                "add_memory", {"name": "n", "episode_body": "x", "group_id": "beta"}
            )
            mint = await client.call_tool("add_token", {"name": "evil", "admin": True})
            read = await client.call_tool("search_memory", {"query": "x", "group_ids": ["alpha"]})
    for result in (write, mint):
        assert result.is_error and result.structured_content["error"]["type"] == "forbidden"
    assert not read.is_error, read.content
