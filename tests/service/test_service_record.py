"""``<db>.service.json`` is trusted only when it is private, ours, live and on loopback: a
record planted beside a database (a cloned folder, another user) gets neither the API token
nor the import data, and no file it names is moved or deleted. The record itself is written
0600 and never through a planted symlink."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from litestar import Litestar, Request, post

from service.client.live import (
    LiveService,
    find_live,
    process_started,
    read_record,
    record_path,
    remove_record,
    write_record,
)
from service.control.cli import moved_snapshot
from tests.service.svc_helpers import environ_without_settings
from workbench.config import load_settings
from workbench.errors import StoreError

TOKEN = "a-secret-token-of-32-characters!"


class Impostor:
    """A "service" at the URL a planted record names: it records what reaches it and answers
    ``export_snapshot`` with files that are not a snapshot."""

    def __init__(self, server_thread, answer: dict | None = None):
        self.seen: list[tuple[str, str | None]] = []

        @post("/tools/{name:str}", status_code=200)
        async def tool(request: Request) -> dict:
            self.seen.append((request.url.path, request.headers.get("authorization")))
            return answer or {"graph": {"facts": 0}}

        self.server = server_thread(Litestar([tool]))
        self.url = self.server.url


def settings_for(db: Path, **extra: str):
    env = {"SVC_KNOWLEDGE_DB_PATH": str(db), "SVC_KNOWLEDGE_API_TOKEN": TOKEN, **extra}
    return load_settings(env, env_file=None)


def plant(db: Path, mode: int = 0o600, **fields) -> Path:
    body = {
        "url": "http://127.0.0.1:9",
        "pid": os.getpid(),
        "started": process_started(os.getpid()),
        "token_required": True,
        "database": str(db.resolve()),
        **fields,
    }
    path = record_path(db)
    path.write_text(json.dumps(body))
    path.chmod(mode)
    return path


def test_a_record_of_this_live_process_is_trusted(tmp_path):
    db = tmp_path / "kb.duckdb"
    plant(db, url="http://127.0.0.1:8123")
    record = read_record(settings_for(db))
    assert record is not None and record.url == "http://127.0.0.1:8123"
    assert find_live(settings_for(db)).url == "http://127.0.0.1:8123"


@pytest.mark.parametrize(
    "planted",
    [
        {"mode": 0o644},  # a cloned folder's file: open to others
        {"mode": 0o620},
        {"pid": 1, "started": "1"},  # alive, but not this record's process
        {"started": "12345"},  # this PID, another start: a reused PID
        {"started": None},
        {"pid": 2**22 + 12345},  # gone
        {"url": "http://203.0.113.7:8000"},  # not loopback
        {"url": "file:///etc/passwd"},
        {"database": "/elsewhere/kb.duckdb"},  # copied from another database
    ],
    ids=str,
)
def test_a_record_that_is_not_private_ours_live_and_local_is_ignored(tmp_path, planted):
    db = tmp_path / "kb.duckdb"
    plant(db, **planted)
    assert read_record(settings_for(db)) is None
    assert find_live(settings_for(db)) is None


def test_a_non_loopback_url_is_trusted_only_on_the_configured_host(tmp_path):
    db = tmp_path / "kb.duckdb"
    plant(db, url="http://203.0.113.7:8000")
    assert read_record(settings_for(db, SVC_KNOWLEDGE_HOST="203.0.113.7")) is not None


def test_a_symlinked_or_foreign_record_is_ignored(tmp_path):
    db = tmp_path / "kb.duckdb"
    real = tmp_path / "elsewhere.json"
    plant(db).rename(real)
    record_path(db).symlink_to(real)
    assert read_record(settings_for(db)) is None
    record_path(db).unlink()
    fifo = record_path(db)
    os.mkfifo(fifo, 0o600)  # would block a reader that opens it without O_NONBLOCK
    assert read_record(settings_for(db)) is None
    fifo.unlink()
    if os.geteuid() == 0:  # only root can give a file away
        os.chown(plant(db), 65534, 65534)
        assert read_record(settings_for(db)) is None


def cli(db: Path, *args: str) -> subprocess.CompletedProcess:
    env = environ_without_settings(SVC_KNOWLEDGE_API_TOKEN=TOKEN)
    return subprocess.run(
        [sys.executable, "-m", "service.control.cli", *args, "--db", str(db)],
        env=env,
        cwd=db.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_planted_record_gets_no_token_no_data_and_moves_no_file(tmp_path, server_thread):
    """The attack of a cloned folder: a record (pid 1, any URL) beside the database."""
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "facts.parquet").write_text("precious")
    impostor = Impostor(
        server_thread,
        {"directory": str(victim), "tables": {"facts": str(victim / "facts.parquet")}},
    )
    db = tmp_path / "kb.duckdb"
    plant(db, mode=0o644, url=impostor.url, pid=1, started=None)
    lines = tmp_path / "facts.jsonl"
    lines.write_text(json.dumps({"type": "entity", "name": "Atlas"}) + "\n")
    for args in (("status",), ("import", str(lines), "--quiet"), ("export", str(tmp_path / "out"))):
        done = cli(db, *args)
        assert done.returncode == 0, (args, done.stderr)
    assert impostor.seen == []  # not one request, so neither the token nor the data
    assert (victim / "facts.parquet").read_text() == "precious"
    assert json.loads(cli(db, "status").stdout)["graph"]["entities"] == 1  # imported locally


def test_export_moves_only_files_of_the_snapshot_folder_the_record_names(tmp_path, server_thread):
    """Even a trusted service's answer is checked: files outside its snapshot folder, or a
    folder outside it, are refused; nothing is moved or deleted."""
    snapshots = tmp_path / "snapshots"
    snapshots.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "facts.parquet").write_text("precious")
    answers = [
        {"directory": str(victim), "tables": {"facts": str(victim / "facts.parquet")}},
        {"directory": str(snapshots / ".."), "tables": {}},
        {"directory": str(snapshots / "s1"), "tables": {"facts": str(victim / "facts.parquet")}},
        {"directory": str(snapshots / "s1"), "tables": {"../x": str(snapshots / "s1/x.parquet")}},
    ]
    (snapshots / "s1").mkdir()
    (snapshots / "s1" / "x.parquet").symlink_to(victim / "facts.parquet")
    for answer in answers:
        impostor = Impostor(server_thread, answer)
        live = LiveService(impostor.url, snapshots=str(snapshots))
        with pytest.raises(StoreError):
            moved_snapshot(live, tmp_path / "out")
        live.close()
    assert (victim / "facts.parquet").read_text() == "precious"
    assert not (tmp_path / "out").exists()


def test_the_record_is_private_and_never_written_through_a_symlink(tmp_path):
    db = tmp_path / "kb.duckdb"
    target = tmp_path / "target"
    target.write_text("untouched")
    record = record_path(db)
    record.with_name(record.name + ".tmp").symlink_to(target)
    record.symlink_to(target)
    write_record(str(db), "http://127.0.0.1:8000", True)
    assert target.read_text() == "untouched"
    info = record.lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert not record.with_name(record.name + ".tmp").exists()
    assert read_record(settings_for(db)).url == "http://127.0.0.1:8000"
    remove_record(str(db))
    assert not record.exists()


def test_a_running_service_keeps_two_snapshots_and_removes_them_at_stop(tmp_path):
    from tests.service.test_serve_subprocess import Service

    db = tmp_path / "kb.duckdb"
    service = Service({}, db, tmp_path / "serve.log")
    try:
        service.wait_ready()
        record = json.loads(record_path(db).read_text())
        assert stat.S_IMODE(record_path(db).stat().st_mode) == 0o600
        folders = {service.tool("export_snapshot")["directory"] for _ in range(4)}
        assert len(folders) == 4
        assert len(list(Path(record["snapshots"]).iterdir())) == 2
    finally:
        assert service.stop() == 0
    assert not Path(record["snapshots"]).exists()
