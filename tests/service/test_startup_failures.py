"""Every start-up failure of ``workbench serve`` on its database is one ``error:`` line and
exit 1, never an abort: a truncated, empty, locked, read-only or held database file, a folder
that cannot be made. Real processes with the real local embedding model (it loads in native
threads while the database opens: a process that exited meanwhile used to abort, exit 134)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.service.svc_helpers import environ_without_settings, free_port
from tests.service.test_serve_subprocess import Service

pytestmark = pytest.mark.slow


def serve(db: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "service.control.cli",
            "serve",
            "--port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
            "--db",
            str(db),
        ],
        env=environ_without_settings(),
        cwd=db.parent if db.parent.is_dir() else None,
        capture_output=True,
        text=True,
        timeout=300,
    )


def one_error_line(done: subprocess.CompletedProcess) -> str:
    """The process exited 1 with exactly one ``error:`` line, last, and no abort."""
    assert "terminate called" not in done.stderr and "Traceback" not in done.stderr
    assert done.returncode == 1, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == [lines[-1]], done.stderr[-2000:]
    return errors[0]


@pytest.mark.parametrize("content", [b"", os.urandom(5000)], ids=["empty", "truncated"])
def test_a_file_that_is_not_a_database(tmp_path, content):
    db = tmp_path / "kb.duckdb"
    db.write_bytes(content)
    line = one_error_line(serve(db))
    assert str(db) in line and "not a DuckDB database" in line


def test_a_file_another_process_locks_names_its_pid(tmp_path):
    db = tmp_path / "kb.duckdb"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys; c = duckdb.connect(sys.argv[1]); "
            "print('held', flush=True); sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        line = one_error_line(serve(db))
    finally:
        holder.communicate("", timeout=30)
    assert "locked" in line and f"PID {holder.pid}" in line


def test_a_file_a_running_service_holds_names_its_url_and_pid(tmp_path):
    db = tmp_path / "kb.duckdb"
    first = Service({}, db, tmp_path / "first.log")
    try:
        first.wait_ready()
        line = one_error_line(serve(db))
    finally:
        assert first.stop() == 0
    assert f"http://127.0.0.1:{first.port}" in line and f"PID {first.proc.pid}" in line


@contextlib.contextmanager
def read_only(path: Path):
    """``path`` unwritable even for root (immutable), else by its mode."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        yield
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root and chattr +i is not available here")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_read_only_file(tmp_path):
    db = tmp_path / "kb.duckdb"
    import duckdb

    duckdb.connect(str(db)).close()
    with read_only(db):
        line = one_error_line(serve(db))
    assert str(db) in line and "cannot open" in line


def test_a_folder_that_cannot_be_made(tmp_path):
    (tmp_path / "afile").write_text("not a folder")
    line = one_error_line(serve(tmp_path / "afile" / "kb.duckdb"))
    assert "cannot create the database folder" in line
