"""The notebooks run against a live service: before the first notebook cell, a
``workbench serve`` is started on a throw-away database holding the import example, with the
rule-based fake LLM (a real chat-completions server on loopback) extracting a few dated
episodes through it, so the live database has episodes, facts that changed over time and
priced LLM calls; ``SVC_KNOWLEDGE_DB_PATH`` points the notebooks' kernels (started after
this) at it, so ``lab.live_tables()`` and ``lab.live_search()`` go through the service as
they would on a user's machine.

Before the notebooks in ``WITHOUT_SERVICE`` the service is stopped (the database stays): they
run as a stdio-only user's do between sessions, when no service holds the database, so
``lab.live_tables()`` opens the file read-only and ``lab.live_search()`` searches it in the
kernel."""

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
# what the rule-based fake LLM understands (workbench/fakes/rule_llm.py), over two days
EPISODES = [
    ("Maria Keller works at Acme.", "work", "2026-01-05T09:00:00Z"),
    ("Maria Keller lives in Berlin.", "home", "2026-01-05T10:00:00Z"),
    ("Maria Keller uses Python.", "work", "2026-01-06T09:00:00Z"),
    ("Maria Keller moved to Munich.", "home", "2026-01-06T18:00:00Z"),
]


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start() -> None:
    folder = Path(tempfile.mkdtemp(prefix="notebook-live-"))
    db = folder / "live.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SVC_KNOWLEDGE_")}
    cli = [sys.executable, "-m", "service.control.cli"]
    subprocess.run(
        [*cli, "import", str(ROOT / "data" / "import_example.jsonl"), "--quiet", "--db", str(db)],
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    from workbench.fakes import rule_llm
    from workbench.fakes.chat_server import FakeLLMServer, chat_settings_env

    llm = FakeLLMServer(model="gpt-4o-mini").start()  # a priced model: the calls cost USD
    llm.set_responder(rule_llm.respond)
    port = _free_port()
    log = (folder / "serve.log").open("wb")
    proc = subprocess.Popen(
        [*cli, "serve", "--db", str(db), "--port", str(port), "--metrics-port", str(_free_port())],
        env={**env, **chat_settings_env(llm)},
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
    _add_episodes(f"http://127.0.0.1:{port}")
    _live.update(proc=proc, folder=folder, log=log, llm=llm)
    os.environ["SVC_KNOWLEDGE_DB_PATH"] = str(db)


def _add_episodes(url: str) -> None:
    """Each episode in its group, then wait until the queue has extracted them all."""
    with httpx.Client(base_url=url, timeout=30) as client:
        for number, (body, group, when) in enumerate(EPISODES):
            client.post(
                "/tools/add_memory",
                json={
                    "name": f"note {number + 1}",
                    "episode_body": body,
                    "group_id": group,
                    "reference_time": when,
                },
            ).raise_for_status()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            counts = client.post("/tools/get_queue_status").json()["counts"]
            if counts.get("done", 0) + counts.get("failed", 0) >= len(EPISODES):
                return
            time.sleep(0.3)
    raise RuntimeError(f"the live service did not extract the notebooks' episodes: {counts}")


WITHOUT_SERVICE = ("exploration.ipynb",)


def pytest_runtest_setup(item) -> None:
    path = str(item.fspath)
    if not _live and path.endswith(".ipynb"):
        _start()
    if path.endswith(WITHOUT_SERVICE) and _live.get("proc") is not None:
        _stop_service()


def _stop_service() -> None:
    """Stop the service (it removes its record); the database stays for the notebooks."""
    _live["proc"].send_signal(signal.SIGTERM)
    _live["proc"].wait(60)
    _live["proc"] = None


def pytest_sessionfinish(session) -> None:
    if _live:
        if _live["proc"] is not None:
            _stop_service()
        _live["log"].close()
        _live["llm"].stop()
        shutil.rmtree(_live["folder"], ignore_errors=True)
        os.environ.pop("SVC_KNOWLEDGE_DB_PATH", None)
        _live.clear()
