"""The notebooks run against a live service: before the first notebook cell, a
``workbench serve`` is started on a throw-away database holding the import example, and
``SVC_KNOWLEDGE_DB_PATH`` points the notebooks' kernels (started after this) at it, so
``lab.live_tables()`` reads through the service as it would on a user's machine."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
_live: dict = {}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start() -> None:
    folder = Path(tempfile.mkdtemp(prefix="notebook-live-"))
    db = folder / "live.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    cli = [sys.executable, "-m", "service.cli"]
    subprocess.run(
        [*cli, "import", str(ROOT / "data" / "import_example.jsonl"), "--quiet", "--db", str(db)],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    port = _free_port()
    log = (folder / "serve.log").open("wb")
    proc = subprocess.Popen(
        [*cli, "serve", "--db", str(db), "--port", str(port), "--metrics-port", str(_free_port())],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.3)
    while not (db.parent / (db.name + ".service.json")).exists():  # ready() writes it
        time.sleep(0.1)
    _live.update(proc=proc, folder=folder, log=log)
    os.environ["SVC_KNOWLEDGE_DB_PATH"] = str(db)


def pytest_runtest_setup(item) -> None:
    if not _live and str(item.fspath).endswith(".ipynb"):
        _start()


def pytest_sessionfinish(session) -> None:
    if _live:
        _live["proc"].send_signal(signal.SIGTERM)
        _live["proc"].wait(60)
        _live["log"].close()
        shutil.rmtree(_live["folder"], ignore_errors=True)
        os.environ.pop("SVC_KNOWLEDGE_DB_PATH", None)
        _live.clear()
