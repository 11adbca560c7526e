"""The files beside a database (#55.3), a killed background service (#55.5), private modes
(#55.9) and a joining client's model settings (#56.3)."""

from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.client.live import process_started, read_record, record_path, write_private
from service.control.joining import model_settings, warn_if_different
from service.control.shared import (
    ClientLease,
    IdleWatch,
    join_or_start,
    live_clients,
    start_background,
)
from tests.service.svc_helpers import environ_without_settings
from workbench.config import load_settings
from workbench.errors import StoreError

REPO = Path(__file__).resolve().parents[2]


def settings_of(db: Path, **env: str):
    return load_settings({"SVC_KNOWLEDGE_DB_PATH": str(db), **env}, env_file=None)


# --- planted links and files (#55.3) -------------------------------------------------------
def test_a_clients_link_to_another_folder_deletes_nothing_there(tmp_path):
    db, victim = tmp_path / "kb.duckdb", tmp_path / "ssh"
    victim.mkdir()
    for name in ("id_rsa", "4194000", "1"):  # names, and PIDs of no running process
        (victim / name).write_text("secret")
    Path(f"{db}.clients").symlink_to(victim)
    assert live_clients(db) == 0
    with ClientLease(db):  # refuses to register through the link (a warning)
        assert live_clients(db) == 0
    IdleWatch(db, 0, lambda: None).check()
    assert sorted(p.name for p in victim.iterdir()) == ["1", "4194000", "id_rsa"]
    assert all(p.read_text() == "secret" for p in victim.iterdir())


def test_a_subfolder_or_a_planted_file_does_not_stop_the_idle_watch(tmp_path):
    db = tmp_path / "kb.duckdb"
    folder = Path(f"{db}.clients")
    folder.mkdir()
    (folder / "4194001").mkdir()  # a folder named like a lease
    (folder / "notes").write_text("mine")
    (folder / "4194002").write_text("x" * 500)  # not what a client writes
    (folder / "4194003").symlink_to(tmp_path / "kb.duckdb.target")
    now = [0.0]
    stopped = []
    watch = IdleWatch(db, 5, lambda: stopped.append(True), clock=lambda: now[0])
    assert watch.check() is False
    now[0] = 10.0
    assert watch.check() is True  # no client: idle, whatever lies in the folder
    assert {p.name for p in folder.iterdir()} == {"4194001", "notes", "4194002", "4194003"}
    watch.interval = 0.05
    watch.start()
    deadline = time.monotonic() + 5
    while not stopped and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stopped, "the idle watch stopped looking"


def test_a_reused_pid_does_not_keep_the_service_alive(tmp_path):
    db = tmp_path / "kb.duckdb"
    with ClientLease(db):
        assert live_clients(db) == 1
        lease = Path(f"{db}.clients") / str(os.getpid())
        assert lease.read_text() == process_started(os.getpid())
        lease.write_text("12345")  # this PID, but another process's start time
        assert live_clients(db) == 0
        assert not lease.exists()  # a stale lease is the service's to remove


def test_the_log_and_the_lock_are_never_opened_through_a_link(tmp_path):
    db, target = tmp_path / "kb.duckdb", tmp_path / "bashrc"
    target.write_text("original\n")
    Path(f"{db}.start.lock").symlink_to(tmp_path / "created-through-a-link")
    with pytest.raises(StoreError, match="cannot start the shared service"):
        join_or_start(settings_of(db), timeout=5)
    assert not (tmp_path / "created-through-a-link").exists()
    Path(f"{db}.start.lock").unlink()
    Path(f"{db}.service.log").symlink_to(target)
    with pytest.raises(StoreError, match="cannot start the shared service"):
        join_or_start(settings_of(db), timeout=5)
    assert target.read_text() == "original\n"


def test_companion_files_are_private(tmp_path):
    db = tmp_path / "kb.duckdb"
    with ClientLease(db):
        folder = Path(f"{db}.clients")
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE((folder / str(os.getpid())).stat().st_mode) == 0o600


# --- a killed background service (#55.5) ---------------------------------------------------
def test_a_killed_service_left_as_a_zombie_is_stale(tmp_path):
    """A service killed while its starter has not reaped it keeps its PID (a zombie): its
    record must read as stale so that the next client starts a new service."""
    db = tmp_path / "kb.duckdb"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        body = {
            "url": "http://127.0.0.1:9",
            "pid": child.pid,
            "started": process_started(child.pid),
            "token_required": False,
            "database": str(db.resolve()),
        }
        write_private(record_path(db), json.dumps(body))
        assert read_record(settings_of(db)) is not None
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child.pid}/stat").read_text().split(")")[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert read_record(settings_of(db)) is None  # a zombie is gone
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_the_starting_client_reaps_its_service(tmp_path, monkeypatch):
    """A background service that ends (here: a setting stops it at once) is reaped by the
    client that started it, not left as its zombie."""
    settings = settings_of(tmp_path / "kb.duckdb")
    monkeypatch.setenv("SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS", "many")  # its environment
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    process = start_background(settings)
    deadline = time.monotonic() + 60
    while Path(f"/proc/{process.pid}").exists():
        assert time.monotonic() < deadline, "the ended service stayed a zombie"
        time.sleep(0.1)


# --- private modes (#55.9) -----------------------------------------------------------------
@pytest.mark.slow
def test_a_new_database_and_its_folder_are_private_whatever_the_umask(tmp_path, server_thread):
    from service.sidecars.embed_server import create_embed_app
    from workbench.fakes.embedder import HashEmbedder

    embed = server_thread(create_embed_app(HashEmbedder()))
    folder = tmp_path / "data" / "knowledge-workbench"
    env = environ_without_settings(
        PYTHONPATH=str(REPO),
        XDG_DATA_HOME=str(tmp_path / "data"),
        SVC_KNOWLEDGE_EMBEDDER_BASE_URL=f"{embed.url}/v1",
        SVC_KNOWLEDGE_EMBEDDER_MODEL="hash-bow",
        SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS="384",
    )
    done = subprocess.run(
        ["sh", "-c", f"umask 022 && exec {sys.executable} -m service.control.cli status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    made = [folder, *folder.rglob("*")]
    assert (folder / "knowledge.duckdb").is_file()
    for path in made:
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {mode:o}"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


# --- a joining client's model settings (#56.3) ---------------------------------------------
def test_a_client_with_an_llm_joining_a_service_without_one_is_told(caplog, tmp_path):
    service = model_settings(settings_of(tmp_path / "kb.duckdb"))
    client = settings_of(
        tmp_path / "kb.duckdb",
        SVC_KNOWLEDGE_COMPAT_BASE_URL="http://127.0.0.1:8080/v1",
        SVC_KNOWLEDGE_MODEL_NAME="qwen",
        SVC_KNOWLEDGE_COMPAT_API_KEY="sk-secret-key",
    )
    with caplog.at_level(logging.WARNING, logger="service.shared"):
        assert warn_if_different(client, service, 4242) is True
    text = caplog.text
    assert "LLM qwen" in text and "kill 4242" in text and "sk-secret-key" not in text
    caplog.clear()
    same = model_settings(client)
    assert warn_if_different(client, same, 4242) is False
    plain = settings_of(tmp_path / "kb.duckdb")
    assert warn_if_different(plain, same, 1) is False  # a client without an LLM: nothing to say
    other = settings_of(
        tmp_path / "kb.duckdb",
        SVC_KNOWLEDGE_EMBEDDER_BASE_URL="http://127.0.0.1:9/v1",
        SVC_KNOWLEDGE_EMBEDDER_MODEL="e5",
        SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS="384",
    )
    assert warn_if_different(other, service, 1) is True  # another embedder
    assert "secret" not in str(model_settings(client))


def test_serve_closes_an_earlier_database_to_others(tmp_path):
    from service.control.runner import close_to_others

    db = tmp_path / "kb.duckdb"
    db.write_bytes(b"")
    wal = tmp_path / "kb.duckdb.wal"
    wal.write_bytes(b"")
    os.chmod(db, 0o644)
    os.chmod(wal, 0o640)
    close_to_others(settings_of(db))
    assert stat.S_IMODE(db.stat().st_mode) == 0o600
    assert stat.S_IMODE(wal.stat().st_mode) == 0o600
