"""One database, every client: with ``workbench serve`` holding the file, the CLI, stdio MCP
and notebooks go through its tools; without it they open the file. Real processes, the real
official MCP client."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from service.client.live import find_live, record_path
from service.sidecars.embed_server import create_embed_app
from tests.service.test_serve_subprocess import Service
from workbench.config import load_settings
from workbench.fakes.embedder import HashEmbedder

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
IMPORT = [
    {
        "type": "fact",
        "source": "Maria Keller",
        "target": "Acme",
        "relation": "WORKS_AT",
        "fact": "Maria Keller works at Acme as a data engineer.",
    },
    {
        "type": "fact",
        "source": "Tom",
        "target": "Neovim",
        "relation": "USES",
        "fact": "Tom writes his code in Neovim.",
    },
    {"type": "entity", "name": "Atlas", "entity_type": "Project", "summary": "A search tool."},
]


@pytest.fixture
def env(server_thread):
    embed = server_thread(create_embed_app(HashEmbedder()))
    return {
        "SVC_KNOWLEDGE_EMBEDDER_BASE_URL": f"{embed.url}/v1",
        "SVC_KNOWLEDGE_EMBEDDER_MODEL": "hash-bow",
        "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "384",
    }


def workbench_cli(env: dict, db: Path, *args: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    return subprocess.run(
        [sys.executable, "-m", "service.control.cli", *args, "--db", str(db)],
        env={**clean, **env},
        cwd=db.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


def import_file(tmp_path: Path, bad: bool = False) -> Path:
    lines = [json.dumps(item) for item in IMPORT]
    if bad:
        lines.insert(1, '{"type": "fact", "source": "X"')  # line 2: not JSON
    path = tmp_path / "facts.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def settings_for(env: dict, db: Path):
    return load_settings({**env, "SVC_KNOWLEDGE_DB_PATH": str(db)}, env_file=None)


@contextlib.asynccontextmanager
async def stdio_mcp(env: dict, db: Path):
    """A session of the official MCP client with ``workbench mcp`` spawned over stdio."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    clean = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "service.control.cli", "mcp", "--db", str(db)],
        env={**clean, **env},
        cwd=str(db.parent),
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def mcp_session(env: dict, db: Path) -> tuple[list[str], dict]:
    async with stdio_mcp(env, db) as session:
        tools = [tool.name for tool in (await session.list_tools()).tools]
        found = await session.call_tool("search_memory_facts", {"query": "where does Maria work"})
        return tools, found.structured_content


@pytest.mark.anyio
async def test_every_client_works_while_the_service_holds_the_database(env, tmp_path):
    db = tmp_path / "kb.duckdb"
    service = Service(env, db, tmp_path / "serve.log")
    try:
        service.wait_ready()
        assert json.loads(record_path(db).read_text())["pid"] == service.proc.pid
        assert find_live(settings_for(env, db)) is not None

        imported = workbench_cli(env, db, "import", str(import_file(tmp_path, bad=True)), "--quiet")
        assert imported.returncode == 0, imported.stderr
        report = json.loads(imported.stdout)
        assert report["facts_created"] == 2 and report["entities_created"] == 5
        assert report["error_count"] == 1 and report["errors"][0].startswith("line 2:")

        status = workbench_cli(env, db, "status")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["graph"]["facts"] == 2
        assert json.loads(status.stdout)["ui"] == f"http://127.0.0.1:{service.port}/ui"
        dry = workbench_cli(env, db, "maintenance", "--dry-run")
        assert dry.returncode == 0, dry.stderr
        exported = workbench_cli(env, db, "export", str(tmp_path / "snap"))
        assert exported.returncode == 0, exported.stderr
        facts = json.loads(exported.stdout)["facts"]
        assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{facts}')").fetchone()[0] == 2

        hits = service.tool("search_memory_facts", {"query": "where does Maria work"})["facts"]
        assert "Acme" in hits[0]["fact"]  # the running service sees what the CLI imported

        tools, found = await mcp_session(env, db)
        assert "search_memory_facts" in tools and "import_memories" in tools
        assert "Acme" in found["facts"][0]["fact"]

        sys.path.insert(0, str(ROOT / "notebooks"))
        try:
            import lab

            con = lab.live_tables(str(db))  # a notebook cell on the live tables
            assert con.sql("SELECT count(*) FROM facts").fetchone()[0] == 2
        finally:
            sys.path.remove(str(ROOT / "notebooks"))
    finally:
        assert service.stop() == 0
    assert not record_path(db).exists()  # a clean stop removes the record


@pytest.mark.anyio
async def test_the_same_commands_work_with_no_service_running(env, tmp_path):
    db = tmp_path / "kb.duckdb"
    imported = workbench_cli(env, db, "import", str(import_file(tmp_path)), "--quiet")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["facts_created"] == 2
    for args in (("status",), ("maintenance", "--dry-run"), ("export", str(tmp_path / "snap"))):
        done = workbench_cli(env, db, *args)
        assert done.returncode == 0, (args, done.stderr)
    _, found = await mcp_session(env, db)
    assert "Acme" in found["facts"][0]["fact"]


def test_a_record_left_by_a_killed_service_is_stale(env, tmp_path):
    db = tmp_path / "kb.duckdb"
    record_path(db).write_text(
        json.dumps({"url": "http://127.0.0.1:9", "pid": 2**22 + 12345, "token_required": False})
    )
    assert find_live(settings_for(env, db)) is None
    done = workbench_cli(env, db, "status")
    assert done.returncode == 0, done.stderr


@pytest.mark.anyio
async def test_stdio_mcp_reports_a_database_it_cannot_open_as_a_tool_error(env, tmp_path):
    db = tmp_path / "kb.duckdb"
    holder = duckdb.connect(str(db))  # another process's lock, no service record
    try:
        async with stdio_mcp(env, db) as session:
            result = await session.call_tool("get_status", {})
            assert result.is_error
            assert "locked" in result.content[0].text
    finally:
        holder.close()
