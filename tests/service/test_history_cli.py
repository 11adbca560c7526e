"""``workbench import`` of a conversation export: on the database file (the summary as JSON,
``--extract`` priced on stderr first, ``--dry-run`` writing nothing) and through a running
service (whole conversations in chunks to ``import_memories``; the same episode uuids, errors by
position, the same file twice adding nothing)."""

from __future__ import annotations

import argparse
import json

import duckdb
import pytest

from service.api.app import create_app
from service.client.live import LiveService
from service.control import history
from service.sidecars.embed_server import create_embed_app
from tests.jobs.test_history import chatgpt_conversation
from tests.service.svc_helpers import make_settings
from tests.service.test_cli import cli  # noqa: F401 - the fixture
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.jobs.history import episode_uuid
from workbench.metrics import Metrics


def export(tmp_path, n=3, broken=False):
    conversations = [
        chatgpt_conversation(f"c-{i}", f"T{i}", [("user", f"note {i}")]) for i in range(n)
    ]
    if broken:
        conversations.insert(1, {"title": "no mapping", "id": "bad"})
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(conversations))
    return str(path)


@pytest.fixture
def env(server_thread):
    embed = server_thread(create_embed_app(HashEmbedder()))
    return {"SVC_KNOWLEDGE_EMBEDDER_BASE_URL": f"{embed.url}/v1",
            "SVC_KNOWLEDGE_EMBEDDER_MODEL": "hash-bow",
            "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "384"}  # fmt: skip


def test_the_command_imports_a_chatgpt_export_once(cli, env, tmp_path):  # noqa: F811
    db, path = str(tmp_path / "kb.duckdb"), export(tmp_path, broken=True)
    first = cli("import", path, "--db", db, "--quiet", env=env)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["format"] == "chatgpt" and summary["episodes_created"] == 3
    assert summary["errors"] == ["conversation 2: missing field 'mapping'; skipped"]
    again = json.loads(cli("import", path, "--db", db, "--quiet", env=env).stdout)
    assert again["episodes_created"] == 0 and again["episodes_existing"] == 3
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*), min(status) FROM episodes").fetchone() == (3, "stored")
        assert con.execute("SELECT count(*) FROM queue").fetchone() == (0,)


def test_extract_prints_the_estimate_first_and_dry_run_writes_nothing(cli, env, tmp_path):  # noqa: F811
    db, path = str(tmp_path / "kb.duckdb"), export(tmp_path)
    planned = cli("import", path, "--db", db, "--extract", "--dry-run", env=env)
    assert planned.returncode == 0, planned.stderr
    assert "3 new episodes" in planned.stderr and "~6 LLM calls" in planned.stderr
    assert json.loads(planned.stdout)["dry_run"] is True
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM episodes").fetchone() == (0,)
    done = cli("import", path, "--db", db, "--extract", "--quiet", env=env)
    assert "~6 LLM calls" in done.stderr
    assert json.loads(done.stdout)["extraction_queued"] == 3
    with duckdb.connect(db, read_only=True) as con:
        assert con.execute("SELECT DISTINCT priority FROM queue").fetchall() == [(2,)]


def test_the_facts_format_still_goes_to_the_entities_import(cli, env, tmp_path):  # noqa: F811
    source = tmp_path / "facts.jsonl"
    source.write_text(json.dumps({"type": "entity", "name": "Maria Keller"}) + "\n")
    out = cli("import", str(source), "--db", str(tmp_path / "kb.duckdb"), "--quiet", env=env)
    assert json.loads(out.stdout)["entities_created"] == 1


@pytest.fixture
def live(server_thread):
    workbench = Workbench.open(
        make_settings(), embedder=HashEmbedder(), chat=None, metrics=Metrics()
    )
    service = LiveService(server_thread(create_app(workbench, workbench.settings)).url)
    yield service, workbench
    service.close()
    workbench.close()


def arguments(path, **extra):
    values = {"file": path, "format": "auto", "group_id": None, "extract": False,
              "dry_run": False, "session_gap_hours": 6.0, "quiet": True}  # fmt: skip
    return argparse.Namespace(**{**values, **extra})


def test_through_a_running_service_the_same_episodes_and_errors(live, tmp_path):
    service, workbench = live
    path = export(tmp_path, n=5, broken=True)
    report = history.import_through(service, arguments(path))
    assert report["episodes_created"] == 5 and report["format"] == "chatgpt"
    assert report["errors"] == ["conversation 2: missing field 'mapping'; skipped"]
    uuid = episode_uuid("main", "c-0", 0)  # the uuid an import on the file would give it
    assert workbench.store.fetchone("SELECT count(*) FROM episodes WHERE uuid = ?", [uuid])[0]
    again = history.import_through(service, arguments(path))
    assert again["episodes_created"] == 0 and again["episodes_existing"] == 5


def test_through_a_running_service_conversations_go_whole_in_chunks(live, tmp_path, monkeypatch):
    service, workbench = live
    monkeypatch.setattr(history, "CHUNK_BYTES", 700)  # about two conversations a request
    monkeypatch.setattr(history, "CHUNK_LINES", 3)
    turns = [("user", "x" * 100), ("assistant", "y" * 100)]
    conversations = [chatgpt_conversation(f"c-{i}", f"T{i}", turns) for i in range(6)]
    conversations.append(chatgpt_conversation("huge", "Huge", [("user", "z" * 2000)]))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(conversations))
    report = history.import_through(service, arguments(str(path), extract=True))
    assert report["episodes_created"] == 6 and report["extraction_queued"] == 6
    assert report["errors"][0].startswith("conversation 7 (huge): larger than a request")
    bodies = [r[0] for r in workbench.store.fetchall("SELECT body FROM episodes")]
    assert all(b.count("\n") == 1 for b in bodies)  # each conversation whole: its two turns
