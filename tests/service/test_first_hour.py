"""A new user's first hour: the per-user database, a backup and its restore through the
command, and an LLM that cannot answer shown by ``/health`` before the first episode."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from service.sidecars.embed_server import create_embed_app
from tests.service.svc_helpers import environ_without_settings, free_port
from tests.service.test_serve_subprocess import Service
from workbench.fakes.chat_server import FakeReply, chat_settings_env
from workbench.fakes.embedder import HashEmbedder

REPO = Path(__file__).resolve().parents[2]
RECORDS = [
    {"type": "entity", "name": "Maria Keller", "entity_type": "Person"},
    {"type": "fact", "source": "Maria Keller", "target": "Acme", "fact": "Maria works at Acme"},
    {"type": "fact", "source": "Tom", "target": "Berlin", "fact": "Tom lives in Berlin"},
]


@pytest.fixture
def embed_env(server_thread) -> dict[str, str]:
    """The compat embedder against a real embeddings server (no model to load)."""
    embed = server_thread(create_embed_app(HashEmbedder()))
    return {
        "SVC_KNOWLEDGE_EMBEDDER_BASE_URL": f"{embed.url}/v1",
        "SVC_KNOWLEDGE_EMBEDDER_MODEL": "hash-bow",
        "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "384",
    }


def workbench(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """``workbench ARGS`` as a process in ``cwd`` (anywhere but the clone)."""
    return subprocess.run(
        [sys.executable, "-m", "service.control.cli", *args],
        env=environ_without_settings(PYTHONPATH=str(REPO), **env),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_with_nothing_configured_the_memory_is_the_users_own(embed_env, tmp_path):
    data, elsewhere = tmp_path / "xdg", tmp_path / "somewhere"
    elsewhere.mkdir()
    source = tmp_path / "memories.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    env = {**embed_env, "XDG_DATA_HOME": str(data)}
    imported = workbench("import", str(source), "--quiet", env=env, cwd=elsewhere)
    assert imported.returncode == 0, imported.stderr
    database = data / "knowledge-workbench" / "knowledge.duckdb"
    assert database.is_file() and not (elsewhere / "data").exists()
    assert f"database {database}" in imported.stderr  # the process says what it opened
    status = workbench("status", env=env, cwd=tmp_path)  # another folder, the same memory
    assert json.loads(status.stdout)["graph"]["facts"] == 2, status.stderr


def test_export_then_import_restores_every_table(embed_env, tmp_path):
    import duckdb

    from workbench.store import TABLES

    source = tmp_path / "memories.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    old, new, backup = tmp_path / "old.duckdb", tmp_path / "new.duckdb", tmp_path / "backup"
    env = dict(embed_env)
    assert workbench("import", str(source), "--db", str(old), env=env, cwd=tmp_path).returncode == 0
    assert workbench("export", str(backup), "--db", str(old), env=env, cwd=tmp_path).returncode == 0
    restored = workbench("import", str(backup), "--db", str(new), env=env, cwd=tmp_path)
    assert restored.returncode == 0, restored.stderr
    assert json.loads(restored.stdout)["restored"]["facts"] == 2

    def contents(path: Path) -> dict[str, list]:
        with duckdb.connect(str(path), read_only=True) as con:
            return {
                t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in TABLES
            }

    exported = contents(old)  # as it was when exported: the export's own audit row came after
    exported["audit_log"] = [row for row in exported["audit_log"] if "'cli:export'" not in row]
    assert contents(new) == exported
    again = workbench("import", str(backup), "--db", str(new), env=env, cwd=tmp_path)
    assert again.returncode == 1 and "not empty" in again.stderr
    assert "Traceback" not in again.stderr


def wait_llm_state(service: Service, started: float, limit: float = 20.0) -> dict:
    """The ``llm`` check of /health once the probe has an outcome (within ``limit`` s)."""
    while time.monotonic() - started < limit:
        try:
            check = service.http.get("/health").json()["checks"]["llm"]
        except (httpx.TransportError, ValueError):
            check = {}
        if check.get("state") == "failing":
            return check
        time.sleep(0.2)
    raise AssertionError(f"no failing LLM in /health after {limit} s: {check}")


@pytest.mark.slow
def test_an_llm_where_nothing_listens_is_in_health_within_20_s(embed_env, tmp_path):
    env = {
        **embed_env,
        "SVC_KNOWLEDGE_COMPAT_BASE_URL": f"http://127.0.0.1:{free_port()}/v1",
        "SVC_KNOWLEDGE_MODEL_NAME": "absent-model",
    }
    started = time.monotonic()
    service = Service(env, tmp_path / "kb.duckdb", tmp_path / "serve.log")
    try:
        check = wait_llm_state(service, started)
        assert check["last_error_type"] == "APIConnectionError"
        assert service.tool("get_queue_status")["counts"].get("queued", 0) == 0  # no episode
    finally:
        service.stop()


@pytest.mark.slow
def test_an_llm_that_cannot_answer_in_the_structured_mode_is_failing(embed_env, fake_llm, tmp_path):
    fake_llm.set_responder(lambda request: FakeReply.text("I am a chatty model, no JSON."))
    env = chat_settings_env(fake_llm, **embed_env)
    started = time.monotonic()
    service = Service(env, tmp_path / "kb.duckdb", tmp_path / "serve.log")
    try:
        check = wait_llm_state(service, started)
        assert check["last_error_type"] == "StructuredOutputError"
        assert service.http.get("/health").json()["status"] == "degraded"
    finally:
        service.stop()


def test_logs_are_readable_lines_at_a_terminal_and_json_elsewhere(monkeypatch):
    import io

    from service.control.cli import default_log_format

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    assert default_log_format() == "text"
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert default_log_format() == "json"


def test_embed_server_help_names_the_engine_it_runs():
    from service.control.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    description = sub.choices["embed-server"].description
    assert "ONNX Runtime" in description and "sentence-transformers model;" not in description


def test_the_import_progress_counts_records(tmp_path, capsys):
    from workbench.config import load_settings
    from workbench.facade import Workbench

    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=HashEmbedder(), chat=None) as wb:
        wb.import_jsonl([json.dumps(r) for r in RECORDS], progress=True)
    assert "record" in capsys.readouterr().err
