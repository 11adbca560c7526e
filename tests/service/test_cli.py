"""The ``workbench`` command: documented subcommands, one-line start-up errors, the one-shot
commands on a real DuckDB file."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass

import duckdb
import pytest

from service.control.cli import build_parser, main
from service.sidecars.embed_server import create_embed_app
from serving.logs import remove_handlers
from tests.service.svc_helpers import free_port
from workbench.fakes.embedder import HashEmbedder

COMMANDS = (
    "serve",
    "worker",
    "mcp",
    "embed-server",
    "maintenance",
    "import",
    "export",
    "status",
    "reembed",
    "tokens",
    "reextract",
)


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(monkeypatch, tmp_path, capsys):
    """Run ``workbench ARGS`` in this process, in an empty folder, with a clean environment."""
    for key in list(os.environ):
        if key.startswith("SVC_KNOWLEDGE_") or key == "LOG_LEVEL":
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)

    def run(*args: str, env: dict[str, str] | None = None) -> Result:
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        try:
            code = main(list(args))
        finally:
            remove_handlers()
            for key in env or {}:
                monkeypatch.delenv(key)
        out = capsys.readouterr()
        return Result(code, out.out, out.err)

    return run


def one_error_line(result) -> str:
    assert result.returncode != 0
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_every_command_is_documented(capsys):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == set(COMMANDS)
    for name, command in sub.choices.items():
        assert command.description, name
        for action in command._actions:
            assert action.help, f"{name} {action.dest}"
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "--metrics-port" in capsys.readouterr().out


def test_non_loopback_without_token_is_refused_by_the_real_command(tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SVC_KNOWLEDGE_") and k != "LOG_LEVEL"
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "service.control.cli",
            "serve",
            "--host",
            "0.0.0.0",
            "--db",
            str(tmp_path / "x.duckdb"),
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = one_error_line(result)
    assert "SVC_KNOWLEDGE_API_TOKEN" in line and result.returncode == 2


def test_a_short_token_is_refused_off_loopback(cli):
    short = cli("serve", "--host", "0.0.0.0", env={"SVC_KNOWLEDGE_API_TOKEN": "short"})
    assert "at least 16" in one_error_line(short)


def test_bad_setting_is_one_line_naming_the_variable(cli):
    result = cli("status", env={"SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "many"})
    assert "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS" in one_error_line(result)
    url = cli("status", env={"SVC_KNOWLEDGE_COMPAT_BASE_URL": "localhost:1234"})
    assert "SVC_KNOWLEDGE_COMPAT_BASE_URL" in one_error_line(url)


def test_port_in_use_is_one_line(cli, tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli(
            "serve",
            "--port",
            str(port),
            "--metrics-port",
            str(free_port()),
            "--db",
            str(tmp_path / "x.duckdb"),
        )
    line = one_error_line(result)
    assert f"port {port}" in line and "in use" in line and "--port" in line


def test_unreachable_embedder_names_its_url(cli, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = cli(
        "serve",
        "--port",
        str(free_port()),
        "--metrics-port",
        str(free_port()),
        "--db",
        str(tmp_path / "x.duckdb"),
        env={
            "SVC_KNOWLEDGE_EMBEDDER_BASE_URL": url,
            "SVC_KNOWLEDGE_EMBEDDER_MODEL": "all-MiniLM-L6-v2",
            "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "384",
        },
    )
    line = one_error_line(result)
    assert f"{url}/embeddings" in line and "refused" in line


def test_locked_database_names_the_file(cli, tmp_path):
    db = tmp_path / "held.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb,sys,time; c=duckdb.connect({str(db)!r}); print('ok', flush=True); "
            "sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        line = one_error_line(cli("status", "--db", str(db)))
        assert str(db) in line and "locked" in line
    finally:
        holder.communicate("", timeout=10)


def test_import_status_maintenance_export(cli, tmp_path, server_thread):
    db = tmp_path / "kb.duckdb"
    records = [
        {"type": "entity", "name": "Maria Keller", "entity_type": "Person"},
        {
            "type": "fact",
            "source": "Maria Keller",
            "target": "Acme",
            "relation": "WORKS_AT",
            "fact": "Maria Keller works at Acme.",
        },
    ]
    source = tmp_path / "facts.jsonl"
    source.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    # the hybrid wiring: the compat embedder against a real embeddings server on loopback
    embed = server_thread(create_embed_app(HashEmbedder()))
    env = {
        "SVC_KNOWLEDGE_EMBEDDER_BASE_URL": f"{embed.url}/v1",
        "SVC_KNOWLEDGE_EMBEDDER_MODEL": "hash-bow",
        "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "384",
    }
    imported = cli("import", str(source), "--db", str(db), "--quiet", env=env)
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)
    status = cli("status", "--db", str(db), env=env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["graph"]
    maintenance = cli("maintenance", "--dry-run", "--db", str(db), env=env)
    assert maintenance.returncode == 0, maintenance.stderr
    assert json.loads(maintenance.stdout)
    exported = cli("export", str(tmp_path / "snap"), "--db", str(db), env=env)
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "snap" / "facts.parquet").is_file()
    with duckdb.connect() as con:
        count = con.execute(
            f"SELECT count(*) FROM '{tmp_path / 'snap' / 'facts.parquet'}'"
        ).fetchone()[0]
    assert count == 1
    with duckdb.connect(str(db), read_only=True) as con:  # the trail of the file's import/export
        trail = con.execute("SELECT token_name, tool, groups, outcome FROM audit_log").fetchall()
    assert trail == [("local", "cli:import", "main", "ok"), ("local", "cli:export", "", "ok")]


def test_import_of_a_missing_file_is_one_line(cli, tmp_path):
    result = cli("import", str(tmp_path / "nope.jsonl"), "--db", str(tmp_path / "k.duckdb"))
    assert "nope.jsonl" in one_error_line(result)


def test_both_commands_print_the_package_version():
    import subprocess
    import sys
    from importlib.metadata import version

    expected = version("knowledge-workbench")
    for module, prog in (("service.control.cli", "workbench"), ("voice.server", "voice-server")):
        out = subprocess.run(
            [sys.executable, "-m", module, "--version"], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0 and out.stdout.strip() == f"{prog} {expected}", out


def test_the_package_ships_a_license_a_changelog_and_type_markers():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert "Apache License" in (root / "LICENSE").read_text()
    assert (root / "CHANGELOG.md").is_file()
    for package in ("workbench", "service", "serving", "voice"):
        assert (root / package / "py.typed").is_file()


def test_only_a_process_that_would_process_episodes_warns_that_no_llm_is_configured(
    tmp_path, caplog
):
    import logging

    from workbench.config import load_settings
    from workbench.facade import Workbench
    from workbench.fakes.embedder import HashEmbedder

    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with caplog.at_level(logging.WARNING, logger="workbench"):
        wb = Workbench.open(settings, embedder=HashEmbedder(), chat=None)
        wb.get_status()  # what status, export and import do
        assert "no LLM configured" not in caplog.text
        wb.start()  # what serve and mcp do
        wb.close()
    assert "no LLM configured" in caplog.text


# --- tokens ---------------------------------------------------------------------------------
TOKENS_ADMIN = "admin-token-long-enough-123"


@pytest.fixture
def embed_env(server_thread):
    embed = server_thread(create_embed_app(HashEmbedder()))
    return {
        "SVC_KNOWLEDGE_EMBEDDER_BASE_URL": f"{embed.url}/v1",
        "SVC_KNOWLEDGE_EMBEDDER_MODEL": "hash-bow",
        "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "384",
    }


def test_tokens_commands_on_the_file(cli, tmp_path, embed_env, monkeypatch):
    for key, value in embed_env.items():
        monkeypatch.setenv(key, value)
    db = str(tmp_path / "kb.duckdb")
    made = cli("tokens", "add", "alice", "--groups", "team-a,team-b", "--read-only", "--db", db)
    assert made.returncode == 0, made.stderr
    token = made.stdout.split()[-1]
    assert token.startswith("wbt_") and "read-only" in made.stdout
    assert "first scoped token" in made.stderr  # the owner's admin token came first
    listed = cli("tokens", "list", "--db", db)
    assert token not in listed.stdout
    assert json.loads(listed.stdout)["tokens"][0]["groups"] == ["team-a", "team-b"]
    assert cli("tokens", "add", "alice", "--groups", "x", "--db", db).returncode != 0
    assert "error:" in cli("tokens", "add", "bob", "--db", db).stderr  # no groups, no admin
    assert cli("tokens", "revoke", "alice", "--db", db).returncode == 0
    listed = json.loads(cli("tokens", "list", "--db", db).stdout)["tokens"]
    assert [(t["name"], t["admin"]) for t in listed] == [("owner", True)]
    with duckdb.connect(db, read_only=True) as con:
        audit = con.execute(
            "SELECT token_name, tool, uuids, outcome FROM audit_log ORDER BY id"
        ).fetchall()
    assert audit == [
        ("local", "add_token", "token:owner", "ok"),
        ("local", "add_token", "token:alice", "ok"),
        ("local", "add_token", "token:alice", "conflict"),
        ("local", "add_token", "token:bob", "invalid_input"),
        ("local", "revoke_token", "token:alice", "ok"),
    ]


def test_tokens_commands_through_the_running_service(cli, tmp_path, server_thread):
    from pydantic import SecretStr

    from service.api.app import create_app
    from service.client.live import write_record
    from tests.service.svc_helpers import make_settings
    from workbench.facade import Workbench
    from workbench.metrics import Metrics

    db = tmp_path / "kb.duckdb"
    settings = make_settings(SVC_KNOWLEDGE_DB_PATH=str(db))
    settings = settings.model_copy(update={"api_token": SecretStr(TOKENS_ADMIN)})
    wb = Workbench.open(settings, embedder=HashEmbedder(), chat=None, metrics=Metrics())
    try:
        srv = server_thread(create_app(wb, settings))
        write_record(str(db), srv.url, token_required=True)
        env = {"SVC_KNOWLEDGE_API_TOKEN": TOKENS_ADMIN}
        made = cli("tokens", "add", "alice", "--groups", "team-a", "--db", str(db), env=env)
        assert made.returncode == 0, made.stderr
        assert wb.tenancy.caller(made.stdout.split()[-1]).name == "alice"
        assert cli("tokens", "revoke", "alice", "--db", str(db), env=env).returncode == 0
        rows = wb.store.fetchall("SELECT token_name, tool, uuids FROM audit_log ORDER BY id")
        assert rows == [  # no stored admin token: the owner's is made first
            ("admin", "add_token", "token:owner"),
            ("admin", "add_token", "token:alice"),
            ("admin", "revoke_token", "token:alice"),
        ]
    finally:
        wb.close()
