"""Scaled out on one throw-away PostgreSQL: two ``workbench serve`` replicas and a
``workbench worker`` as real processes. Episodes added through replica A are all processed
once although A is SIGKILLed half-way (the others take over its leases); what A wrote, and what
``workbench import`` writes beside them, is searchable on replica B."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from tests.pg import wait_for
from tests.service.svc_helpers import duplicate_counts, environ_without_settings
from tests.service.test_serve_subprocess import Service, env  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

PEOPLE = ("Tom", "Maria Keller")
TOOLS = ("Neovim", "Python", "VS Code")


def _episode(i: int) -> dict:
    text = f"{PEOPLE[i % 2]} uses {TOOLS[i % 3]}. Note {i}."
    return {"name": f"note {i}", "episode_body": text, "group_id": f"g{i % 10}"}


@pytest.fixture
def shared_env(env, pg_location):  # noqa: F811 - the fixture imported above
    return {
        **env,
        "SVC_KNOWLEDGE_DATABASE_URL": pg_location,
        "SVC_KNOWLEDGE_QUEUE_LEASE_SECONDS": "4",
        "SVC_KNOWLEDGE_DECAY_ENABLED": "false",
    }


def _duplicates(url: str) -> tuple[int, int]:
    with psycopg.connect(url) as con:
        return duplicate_counts(con)


def test_replicas_share_the_queue_and_the_memories(shared_env, pg_location, fake_llm, tmp_path):
    fake_llm.latency = 0.3  # slower than the posts: the kill lands while episodes are in flight
    a = Service(shared_env, tmp_path / "unused.duckdb", tmp_path / "a.log")
    b = Service(shared_env, tmp_path / "unused.duckdb", tmp_path / "b.log")
    try:
        a.wait_ready()
        b.wait_ready()
        for i in range(100):
            a.tool("add_memory", _episode(i))
        counts = b.wait_done(60, timeout=180)
        assert a.stop(signal.SIGKILL) == -signal.SIGKILL
        assert counts["done"] < 100, "A was killed after every episode was done"
        # B takes the dead replica's leases over once they run out
        counts = b.wait_done(100, timeout=180)
        assert counts == {"queued": 0, "processing": 0, "done": 100, "failed": 0}
        assert _duplicates(pg_location) == (0, 0)

        # what A wrote (the first episodes) is searchable on B
        hits = b.tool("search_memory_facts", {"query": "Tom uses Neovim", "group_ids": ["g0"]})[
            "facts"
        ]
        assert any(h["fact"].startswith("Tom uses Neovim") for h in hits), hits

        # `workbench import` beside the replicas: B finds its memory within a second or two
        lines = [
            {"type": "entity", "name": "Ada Lovelace", "entity_type": "Person"},
            {"type": "entity", "name": "Analytical Engine", "entity_type": "Project"},
            {
                "type": "fact",
                "source": "Ada Lovelace",
                "target": "Analytical Engine",
                "relation": "WORKS_ON",
                "fact": "Ada Lovelace programs the Analytical Engine",
            },
        ]
        file = tmp_path / "import.jsonl"
        file.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "service.control.cli",
                "import",
                str(file),
                "--group-id",
                "imported",
            ],
            env=environ_without_settings(**shared_env),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["facts_created"] == 1
        started = time.monotonic()

        def found() -> bool:
            facts = b.tool(
                "search_memory_facts",
                {"query": "who programs the Analytical Engine", "group_ids": ["imported"]},
            )["facts"]
            return any("Ada Lovelace" in f["fact"] for f in facts)

        assert wait_for(found, timeout=10, step=0.1)
        assert time.monotonic() - started < 5
    finally:
        for service in (a, b):
            if service.proc.poll() is None:
                service.stop()


def test_a_worker_processes_what_a_replica_accepts(shared_env, pg_location, tmp_path):
    api = Service(
        {**shared_env, "SVC_KNOWLEDGE_COMPAT_BASE_URL": ""},  # the API replica extracts nothing
        tmp_path / "unused.duckdb",
        tmp_path / "api.log",
    )
    with (tmp_path / "worker.log").open("ab") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "service.control.cli", "worker", "--metrics-port", "0"],
            env=environ_without_settings(**shared_env),
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        api.wait_ready()
        for i in range(6):
            api.tool("add_memory", _episode(i))
        counts = api.wait_done(6, timeout=120)
        assert counts["done"] == 6
        hits = api.tool("search_memory_nodes", {"query": "Neovim", "group_ids": ["g0"]})
        assert any(n["name"] == "Neovim" for n in hits["nodes"])
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, (tmp_path / "worker.log").read_text()[-2000:]
        api.stop()
    assert "worker stopped" in (tmp_path / "worker.log").read_text()
