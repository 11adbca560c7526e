"""``workbench reextract`` on a real DuckDB file: the dry run's last line, a run into a shadow
graph, the comparison with precision, recall and F1 on the labelled set, promote; a run killed
with SIGKILL resumes without duplicates; clear errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.sidecars.embed_server import create_embed_app
from tests.service.test_cli import cli  # noqa: F401 - the fixture
from workbench.config import load_settings
from workbench.facade import Workbench
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import FakeLLMServer, chat_settings_env, structure_name
from workbench.fakes.embedder import HashEmbedder
from workbench.fakes.replay_llm import LABELS, ReplayLLM, load
from workbench.store import Store

ROOT = Path(__file__).resolve().parents[2]


def degraded(replay):
    """The first model: the labelled replies without every second fact."""

    def answer(request):
        reply = replay(request)
        if structure_name(request) == "ExtractedEdges" and reply:
            reply = {**reply, "edges": reply["edges"][::2]}
        return reply

    return answer


@pytest.fixture
def llm():
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
def env(llm, server_thread):
    embed = server_thread(create_embed_app(HashEmbedder()))
    return chat_settings_env(
        llm,
        SVC_KNOWLEDGE_EMBEDDER_BASE_URL=f"{embed.url}/v1",
        SVC_KNOWLEDGE_EMBEDDER_MODEL="hash-bow",
        SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS="384",
    )


def build(env, db, episodes) -> None:
    settings = load_settings({**env, "SVC_KNOWLEDGE_DB_PATH": str(db)}, env_file=None)
    with Workbench.open(settings) as wb:
        for episode in episodes:
            wb.add_memory(**episode)
        assert wb.process_pending() == len(episodes)


def labelled_group(group: str) -> list[dict]:
    keys = ("name", "episode_body", "group_id", "reference_time", "source_description")
    return [{k: item[k] for k in keys if k in item} for item in load() if item["group_id"] == group]


def test_dry_run_run_compare_with_scores_and_promote(cli, llm, env, tmp_path):  # noqa: F811
    replay = ReplayLLM()
    llm.set_responder(lambda r: replay(r) if r.get("model") == "model-2" else degraded(replay)(r))
    db = tmp_path / "kb.duckdb"
    build(env, db, labelled_group("alex"))
    env2 = {**env, "SVC_KNOWLEDGE_MODEL_NAME": "model-2"}
    dry = cli("reextract", "--group", "alex", "--dry-run", "--db", str(db), env=env2)
    assert dry.returncode == 0, dry.stderr
    predicted = int(re.fullmatch(r"(\d+) calls", dry.stdout.strip().splitlines()[-1])[1])
    before = len(llm.requests)
    ran = cli("reextract", "--group", "alex", "--db", str(db), "--quiet", env=env2)
    assert ran.returncode == 0, ran.stderr
    made = len(llm.requests) - before
    assert predicted > 0 and abs(made - predicted) <= 0.1 * made, (predicted, made)
    run_id = re.fullmatch(r"run (\S+)", ran.stdout.strip().splitlines()[-1])[1]
    report = json.loads(ran.stdout[: ran.stdout.rindex("run ")])
    assert report["calls"]["calls"] == made and report["state"] == "built"
    compared = cli("reextract", "--compare", run_id, "--labelled", str(LABELS),
                   "--db", str(db), env=env2)  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    scores = {s["graph"]: s for s in json.loads(compared.stdout)["scores"]}
    assert scores["new"]["fact_recall"] > scores["old"]["fact_recall"]
    assert scores["new"]["episodes"] == 17
    promoted = cli("reextract", "--promote", run_id, "--db", str(db), env=env2)
    assert promoted.returncode == 0, promoted.stderr
    assert json.loads(promoted.stdout)["state"] == "promoted"
    again = cli("reextract", "--promote", run_id, "--db", str(db), env=env2)
    assert again.returncode == 1 and "is promoted" in again.stderr
    missing = cli("reextract", "--discard", "rx-nope", "--db", str(db), env=env2)
    assert missing.returncode == 1 and "no re-extraction run" in missing.stderr
    assert "Traceback" not in missing.stderr


def recorded_calls(db: Path, run_id: str | None = None) -> int:
    live = Store.open(str(db), dim=None)
    try:
        where, params = ("= ?", [run_id]) if run_id else ("IS NOT NULL", [])
        return live.fetchone(f"SELECT count(*) FROM llm_calls WHERE run_id {where}", params)[0]
    finally:
        live.close()


def test_a_run_killed_with_sigkill_resumes_without_duplicates(llm, env, tmp_path):
    """Issue 55, item 14: the episodes done before the kill are not extracted again, and
    every call the killed run made is on record under its id."""
    llm.set_responder(rule_llm.respond)
    db = tmp_path / "kb.duckdb"
    from tests.ingest.test_runs import history

    build(env, db, history(30))
    llm.latency = 0.05
    sub_env = {**os.environ, "PYTHONPATH": str(ROOT), **env, "SVC_KNOWLEDGE_MODEL_NAME": "model-2"}
    command = [sys.executable, "-m", "service.control.cli", "reextract", "--group", "tom",
               "--db", str(db), "--quiet"]  # fmt: skip
    before = len(llm.requests)
    proc = subprocess.Popen(command, env=sub_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while len(llm.requests) - before < 40 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = len(llm.requests) - before
    assert 40 <= killed_at < 70  # mid-run: 30 episodes take about 80 calls
    on_record = recorded_calls(db)  # written as they were made, not at the end
    assert killed_at - 8 <= on_record <= killed_at  # at most the calls in flight are missing
    llm.latency = 0.0
    resumed_from = len(llm.requests)
    done = subprocess.run(command, env=sub_env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    resumed = len(llm.requests) - resumed_from
    print(f"killed after {killed_at} calls ({on_record} on record), resumed with {resumed}")
    (shadow,) = (tmp_path / "kb.duckdb.reextract").glob("*.duckdb")
    store = Store.open(str(shadow), dim=None)
    try:
        assert store.fetchall("SELECT DISTINCT status FROM episodes") == [("done",)]
        assert store.fetchone("SELECT count(*) FROM episodes")[0] == 30
        assert store.fetchall("SELECT name FROM entities GROUP BY name HAVING count(*) > 1") == []
        facts = store.fetchall("SELECT fact, episode_uuid FROM facts")
        assert facts and len(facts) == len(set(facts))
    finally:
        store.close()
    run_id = done.stdout.strip().splitlines()[-1].split()[-1]
    # every call is in llm_calls once, under the run's id (but those cut off by the kill)
    assert on_record + resumed == recorded_calls(db, run_id)
    # the work done before the kill is not done again: the resume makes far fewer calls
    # than the whole run (a kill loses at most the runs of SHADOW_RUN episodes in flight)
    assert resumed < 0.75 * (on_record + resumed)


def test_the_admin_tool_runs_compares_and_promotes_over_rest(fake_llm, hash_embedder):
    from litestar.testing import TestClient

    from service.api.app import create_app
    from tests.service.svc_helpers import BASE, assert_error, call, make_settings
    from workbench.metrics import Metrics

    fake_llm.set_responder(rule_llm.respond)
    wb = Workbench.open(make_settings(fake_llm), embedder=hash_embedder, metrics=Metrics())
    try:
        with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
            for body in ("Tom lives in Berlin.", "Tom moved to Munich. Tom uses Python."):
                call(client, "add_memory", {"name": body[:8], "episode_body": body,
                                            "group_id": "tom"})  # fmt: skip
            assert wb.process_pending() == 2
            plan = call(client, "reextract", {"group_id": "tom", "dry_run": True})
            assert plan["calls"] >= 4 and plan["episodes"] == 2
            run = call(client, "reextract", {"group_id": "tom"})
            assert run["state"] == "built" and run["calls"]["calls"] >= 4
            diff = call(client, "reextract", {"compare": run["run_id"]})
            assert diff["facts"]["old"] == diff["facts"]["new"]  # the same model, same graph
            done = call(client, "reextract", {"promote": run["run_id"]})
            assert done["state"] == "promoted"
            both = call(client, "reextract", {"group_id": "tom", "promote": run["run_id"]}, 400)
            assert_error(both, "invalid_input", "exactly one")
            gone = call(client, "reextract", {"discard": "rx-000000000000"}, 404)
            assert_error(gone, "not_found", "no re-extraction run")
            call(client, "reextract", {"discard": "../etc"}, 400)
    finally:
        wb.close()
