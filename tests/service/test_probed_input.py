"""Holes a probe of the hardened service found in its input handling (issue #48, items 3-6, 9
and 12): a clear of many groups that stalled every endpoint, a rate limit escaped with random
tokens, 500s from times, numbers and import lines, group names one way in accepts and another
cannot name, forged text log lines, HEAD probes, slow clients, an unbounded queue and label
values with newlines."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
import time

import httpx
import pytest
from litestar.testing import TestClient
from mcp import Client
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from service.api.app import create_app
from service.control.cli import main
from service.control.runner import make_server
from service.sidecars.embed_server import create_embed_app
from serving.logs import remove_handlers, setup_logging
from tests.service.svc_helpers import BASE, Tick, assert_error, call, free_port, make_settings
from workbench.errors import ConfigError, InvalidInput
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics
from workbench.names import MAX_GROUP_IDS
from workbench.store.graph import CLEAR_STEP

BAD_TIMES = ("0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00")
BAD_GROUPS = ("../../etc", "a\nb", "x" * 10_000, "main\n", "")


@pytest.fixture
def fresh(hash_embedder):
    wb = Workbench.open(make_settings(), embedder=hash_embedder, chat=None, metrics=Metrics())
    with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
        yield wb, client
    wb.close()


def facts(group: str, n: int) -> list[dict]:
    return [
        {"type": "fact", "source": f"a{i}", "target": f"b{i}", "fact": f"a{i} knows b{i}"}
        | {"group_id": group}
        for i in range(n)
    ]


# --- 3. clear_graph: bounded names, a store not held for seconds ------------------------------
def test_clear_graph_takes_a_bounded_number_of_names(fresh):
    wb, client = fresh
    call(client, "add_memory", {"name": "e", "episode_body": "kept", "group_id": "g0"})
    names = [f"g{i}" for i in range(MAX_GROUP_IDS + 1)]
    response = client.post("/tools/clear_graph", json={"group_ids": names})
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "group_ids")
    with pytest.raises(InvalidInput, match=f"at most {MAX_GROUP_IDS}"):
        wb.clear_graph(names)
    assert len(wb.get_episodes()["episodes"]) == 1
    cleared = call(client, "clear_graph", {"group_ids": names[:MAX_GROUP_IDS]})
    assert cleared["episodes_removed"] == 1


def test_health_answers_within_a_second_while_a_large_clear_runs(hash_embedder, server_thread):
    """Clearing 24,000 facts and entities held the store for seconds in one transaction; in
    steps of at most CLEAR_STEP rows, /health (which asks the store) is answered between them."""
    wb = Workbench.open(make_settings(), embedder=hash_embedder, chat=None, metrics=Metrics())
    try:
        for group in ("big1", "big2"):
            wb.import_memories(facts(group, 4000))
        srv = server_thread(create_app(wb, wb.settings))
        transactions = []
        whole = wb.store.transaction

        def counted():
            transactions.append(1)
            return whole()

        wb.store.transaction = counted
        result: dict = {}

        def clear() -> None:
            result["r"] = httpx.post(
                f"{srv.url}/tools/clear_graph", json={"group_ids": ["big1", "big2"]}, timeout=120
            )

        worker = threading.Thread(target=clear)
        worker.start()
        waits = []
        while worker.is_alive():
            started = time.perf_counter()
            assert httpx.get(f"{srv.url}/health", timeout=30).status_code == 200
            waits.append(time.perf_counter() - started)
            time.sleep(0.05)
        worker.join()
        assert result["r"].status_code == 200
        assert result["r"].json()["facts_removed"] == 8000
        assert result["r"].json()["entities_removed"] == 16000
        assert len(transactions) >= 1 + 8000 // CLEAR_STEP + 16000 // CLEAR_STEP
        assert waits and max(waits) < 1.0, waits
        assert wb.store.fetchone("SELECT count(*) FROM entity_embeddings")[0] == 0
    finally:
        wb.close()


# --- 4. the rate limit counts verified tokens only ---------------------------------------------
def test_random_tokens_do_not_escape_the_rate_limit(plain_wb):
    token = "t0ken-with-enough-chars"
    settings = plain_wb.settings.model_copy(
        update={"rate_limit_per_minute": 3, "api_token": SecretStr(token)}
    )
    with TestClient(create_app(plain_wb, settings, rate_clock=Tick()), base_url=BASE) as client:
        statuses = [
            client.post(
                "/tools/get_status", headers={"Authorization": f"Bearer random-{i}"}
            ).status_code
            for i in range(6)
        ]
        assert statuses[:3] == [401, 401, 401] and statuses[3:] == [429, 429, 429]
        # the holder of the real token has its own bucket, untouched by them
        good = {"Authorization": f"Bearer {token}"}
        for _ in range(3):
            call(client, "get_status", headers=good)
        assert client.post("/tools/get_status", headers=good).status_code == 429


# --- 5. 400s, not 500s, from times, numbers and import lines ------------------------------------
@pytest.mark.parametrize("when", BAD_TIMES)
def test_times_out_of_range_are_a_400_naming_the_field(fresh, when):
    _, client = fresh
    for tool, body, field in (
        ("search_memory_facts", {"query": "x", "created_after": when}, "created_after"),
        ("search_memory_nodes", {"query": "x", "created_before": when}, "created_before"),
        (
            "add_memory",
            {"name": "e", "episode_body": "x", "reference_time": when},
            "reference_time",
        ),
    ):
        response = client.post(f"/tools/{tool}", json=body)
        assert response.status_code == 400, (tool, response.text)
        assert_error(response.json(), "invalid_input", field)


def test_a_json_episode_with_a_huge_integer_is_a_400(fresh):
    wb, client = fresh
    body = '{"n": ' + "9" * 5000 + "}"
    response = client.post(
        "/tools/add_memory", json={"name": "e", "episode_body": body, "source": "json"}
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "episode_body")
    assert wb.get_episodes()["episodes"] == []


def test_bad_import_lines_are_reported_with_their_number_and_field(fresh):
    wb, client = fresh
    good = {"type": "fact", "source": "Ann", "target": "Acme", "fact": "Ann works at Acme."}
    lines = [
        good,
        {**good, "fact": "f2", "valid_at": "garbage"},
        {**good, "fact": "f3", "invalid_at": BAD_TIMES[0]},
        '{"type": "entity", "name": "Bo", "importance": ' + "9" * 5000 + "}",
        {**good, "fact": "f5", "created_at": BAD_TIMES[1]},
    ]
    report = call(client, "import_memories", {"lines": lines, "first_line": 10})
    assert report["facts_created"] == 1 and report["error_count"] == 4
    errors = report["errors"]
    assert errors[0].startswith("line 11: valid_at:")
    assert errors[1].startswith("line 12: invalid_at: out of range")
    assert errors[2].startswith("line 13:") and "digits" in errors[2]
    assert errors[3].startswith("line 14: created_at:")


def test_the_cli_import_reports_a_bad_time_with_its_line(
    tmp_path, server_thread, monkeypatch, capsys
):
    embed = server_thread(create_embed_app(HashEmbedder()))
    for key, value in {
        "SVC_KNOWLEDGE_EMBEDDER_BASE_URL": f"{embed.url}/v1",
        "SVC_KNOWLEDGE_EMBEDDER_MODEL": "hash-bow",
        "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "384",
    }.items():
        monkeypatch.setenv(key, value)
    source = tmp_path / "facts.jsonl"
    lines = [
        facts("main", 3)[0],
        {**facts("main", 3)[1], "valid_at": "garbage"},
        facts("main", 3)[2],
    ]
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    try:
        code = main(["import", str(source), "--db", str(tmp_path / "kb.duckdb"), "--quiet"])
    finally:
        remove_handlers()
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["facts_created"] == 2
    assert report["errors"] == [
        "line 2: valid_at: not an ISO 8601 time such as 2025-03-01T12:00:00Z"
    ]


@pytest.mark.anyio
async def test_over_mcp_the_same_inputs_are_invalid_input(hash_embedder, server_thread):
    wb = Workbench.open(make_settings(), embedder=hash_embedder, chat=None, metrics=Metrics())
    try:
        url = server_thread(create_app(wb, wb.settings)).url + "/mcp"
        async with Client(url) as client:
            for tool, arguments in (
                ("search_memory_facts", {"query": "x", "created_after": BAD_TIMES[0]}),
                ("add_memory", {"name": "e", "episode_body": "x", "reference_time": BAD_TIMES[1]}),
                (
                    "add_memory",
                    {"name": "e", "episode_body": "[" + "7" * 5000 + "]", "source": "json"},
                ),
                ("get_episodes", {"group_ids": ["main\n"]}),
                ("get_episodes", {"group_id": ""}),
            ):
                result = await client.call_tool(tool, arguments)
                assert result.is_error, (tool, arguments)
                assert result.structured_content["error"]["type"] == "invalid_input"
    finally:
        wb.close()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- 6. one rule for group names ---------------------------------------------------------------
@pytest.mark.parametrize("group", BAD_GROUPS)
def test_no_way_in_accepts_a_group_name_add_memory_refuses(fresh, group):
    wb, client = fresh
    response = client.post(
        "/tools/add_memory", json={"name": "e", "episode_body": "x", "group_id": group}
    )
    assert response.status_code == 400
    line = {"type": "entity", "name": "Ann", "group_id": group}
    report = call(client, "import_memories", {"lines": [line]})
    assert report["entities_created"] == 0
    assert report["errors"][0].startswith("line 1: group_id: not a valid group name")
    for tool, body in (
        ("import_memories", {"lines": [{"type": "entity", "name": "Bo"}], "group_id": group}),
        ("get_episodes", {"group_ids": [group]}),
        ("search_memory_facts", {"query": "x", "group_ids": [group]}),
        ("search_memory_nodes", {"query": "x", "group_ids": [group]}),
        ("clear_graph", {"group_ids": [group]}),
        ("retry_failed_episodes", {"group_id": group}),
    ):
        response = client.post(f"/tools/{tool}", json=body)
        assert response.status_code == 400, (tool, response.text)
        assert_error(response.json(), "invalid_input", "group")
    assert wb.store.fetchone("SELECT count(*) FROM entities")[0] == 0


def test_an_empty_group_name_is_a_400_not_every_group(fresh):
    wb, client = fresh
    call(client, "add_memory", {"name": "e", "episode_body": "x", "group_id": "g1"})
    for body in ({"group_ids": [""]}, {"group_id": ""}, {"group_ids": [" "]}):
        response = client.post("/tools/get_episodes", json=body)
        assert response.status_code == 400, (body, response.text)
    with pytest.raises(InvalidInput):
        wb.get_episodes(group_ids=[""])
    with pytest.raises(InvalidInput):
        wb.search_memory_facts("x", group_ids=["g1\n"])  # the engine checks too


def test_the_cli_and_the_settings_apply_the_same_rule(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["import", str(tmp_path / "x.jsonl"), "--group-id", "../../etc"])
    assert exited.value.code == 2
    assert "not a valid group name" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="DEFAULT_GROUP_ID"):
        make_settings(SVC_KNOWLEDGE_DEFAULT_GROUP_ID="main\n")


# --- 9. text logs cannot be forged -------------------------------------------------------------
def test_a_newline_in_the_path_cannot_forge_a_text_log_line(plain_wb):
    stream = io.StringIO()
    setup_logging("INFO", fmt="text", stream=stream)
    try:
        forged = "2026-11-26 12:00:00,000 ERROR service.access [x] forged"
        with TestClient(create_app(plain_wb, plain_wb.settings), base_url=BASE) as client:
            # /tools/{name} matches any name: the path reaches the access log
            client.post("/tools/nope%0a" + forged.replace(" ", "%20") + "%1b[2J", json={})
    finally:
        remove_handlers()
    lines = stream.getvalue().splitlines()
    access = [line for line in lines if "service.access" in line and "nope" in line]
    assert len(access) == 1 and "nope\\n2026" in access[0] and "\\x1b[2J" in access[0]
    assert not any(line.startswith("2026-11-26 12:00:00,000") for line in lines)


def test_a_traceback_in_a_text_log_cannot_start_a_line(plain_wb):
    stream = io.StringIO()
    setup_logging("INFO", fmt="text", stream=stream)
    try:
        import logging

        try:
            raise ValueError("bad\n2026-11-26 12:00:00,000 INFO x [-] forged")
        except ValueError:
            logging.getLogger("t").exception("failed")
    finally:
        remove_handlers()
    first, *rest = stream.getvalue().splitlines()
    assert "failed" in first and rest and all(line.startswith("  | ") for line in rest)


def test_a_json_log_record_is_one_line_for_every_line_splitter():
    import logging

    stream = io.StringIO()
    setup_logging("INFO", fmt="json", stream=stream)
    try:
        logging.getLogger("t").info("path %s", "/x\u2028forged\x85again\nmore")
    finally:
        remove_handlers()
    lines = stream.getvalue().splitlines()  # splits at U+2028 and U+0085 too
    assert len(lines) == 1
    assert json.loads(lines[0])["msg"] == "path /x\u2028forged\x85again\nmore"


# --- 12. HEAD probes, slow clients, a bounded queue, clean label values ------------------------
def test_head_health_answers_like_get(plain_wb, server_thread):
    srv = server_thread(create_app(plain_wb, plain_wb.settings))
    head = httpx.head(f"{srv.url}/health", timeout=10)
    get = httpx.get(f"{srv.url}/health", timeout=10)
    assert head.status_code == get.status_code == 200
    assert head.content == b""


def serve_in_thread(server, sock):
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])))
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    return thread


def test_slow_clients_are_cut_off_after_the_read_timeouts(plain_wb):
    settings = plain_wb.settings.model_copy(
        update={"header_timeout_seconds": 0.5, "body_timeout_seconds": 1.0}
    )
    server = make_server(create_app(plain_wb, settings), name="tools server", settings=settings)
    sock = socket.socket()
    sock.bind(("127.0.0.1", free_port()))
    port = sock.getsockname()[1]
    thread = serve_in_thread(server, sock)
    try:
        silent = socket.create_connection(("127.0.0.1", port), timeout=5)
        started = time.monotonic()
        assert silent.recv(100).startswith(b"HTTP/1.1 408")
        assert time.monotonic() - started < 3
        slow_headers = socket.create_connection(("127.0.0.1", port), timeout=5)
        slow_headers.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert slow_headers.recv(100).startswith(b"HTTP/1.1 408")
        slow_body = socket.create_connection(("127.0.0.1", port), timeout=5)
        slow_body.sendall(
            b"POST /tools/get_episodes HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 20\r\n\r\n{"
        )
        started = time.monotonic()
        while slow_body.recv(1000):  # whatever answer, then the server closes
            pass
        assert time.monotonic() - started < 4
        # a client that sends its request at once is served
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
    finally:
        server.should_exit = True
        thread.join(10)


def test_add_memory_at_the_queue_cap_is_a_429_with_the_reason(hash_embedder):
    settings = make_settings(SVC_KNOWLEDGE_MAX_QUEUED_EPISODES="2")
    wb = Workbench.open(settings, embedder=hash_embedder, chat=None, metrics=Metrics())
    try:
        with TestClient(create_app(wb, settings), base_url=BASE) as client:
            first = {
                "name": "e1",
                "episode_body": "one",
                "uuid": "3a460868-7411-4c0e-99cf-570bf7f9a77d",
            }
            call(client, "add_memory", first)
            call(client, "add_memory", {"name": "e2", "episode_body": "two"})
            full = client.post("/tools/add_memory", json={"name": "e3", "episode_body": "three"})
            assert full.status_code == 429
            assert_error(full.json(), "queue_full", "SVC_KNOWLEDGE_MAX_QUEUED_EPISODES=2")
            assert full.headers["Retry-After"] == "60"  # the queue drains at extraction's pace
            assert call(client, "add_memory", first)["status"] == "queued"  # a retry: no new one
        assert len(wb.get_episodes()["episodes"]) == 2
    finally:
        wb.close()


def test_metric_label_values_never_hold_a_newline():
    metrics = Metrics()
    metrics.record_episode_processed("bad\ngroup")
    metrics.record_llm_call("model\nx", 1, 1, 0.0, 0.0, 0.1)
    labels = [
        value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for sample in family.samples
        for value in sample.labels.values()
    ]
    assert "bad_group" in labels and "model_x" in labels
    assert not any("\n" in value for value in labels)
