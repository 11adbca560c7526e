"""What a browser page, malformed bytes and a leaky upstream must not get from the service:
Host and Origin checks on every tool route, JSON required, UTF-8 and depth limits on bodies,
secrets scrubbed from stored and returned text, named groups only, a protected metrics port,
bounded group labels and rate limits per token."""

from __future__ import annotations

import json

import pytest
from litestar.testing import TestClient
from pydantic import SecretStr

from service.api.app import create_app
from service.sidecars.metrics_server import create_metrics_app
from serving.middleware import Exposure, client_key
from tests import prom
from tests.service.svc_helpers import BASE, Tick, assert_error, call, make_settings
from workbench.facade import Workbench
from workbench.fakes.chat_server import FakeReply
from workbench.metrics import Metrics

EVIL = "https://evil.example"
KEY = "sk-live-0123456789abcdef"  # the LLM key an upstream's error text echoes


@pytest.fixture
def fresh(hash_embedder):
    wb = Workbench.open(make_settings(), embedder=hash_embedder, chat=None, metrics=Metrics())
    with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
        yield wb, client
    wb.close()


def add_episode(client) -> str:
    return call(client, "add_memory", {"name": "e", "episode_body": "Maria works at Acme."})[
        "episode_uuid"
    ]


# --- 1. cross-site requests and DNS rebinding ---------------------------------------------------
def test_a_cross_site_post_cannot_delete_an_episode(fresh):
    wb, client = fresh
    uuid = add_episode(client)
    for headers in (
        {"Origin": EVIL, "Content-Type": "application/json"},
        {"Origin": EVIL, "Content-Type": "text/plain"},
    ):
        response = client.post(
            "/tools/delete_episode", content=json.dumps({"uuid": uuid}), headers=headers
        )
        assert response.status_code == 403
        assert_error(response.json(), "forbidden", "evil.example")
    assert len(wb.get_episodes()["episodes"]) == 1


def test_a_tool_call_must_be_json(fresh):
    wb, client = fresh
    uuid = add_episode(client)
    response = client.post(
        "/tools/delete_episode",
        content=json.dumps({"uuid": uuid}),
        headers={"Content-Type": "text/plain"},
    )
    assert response.status_code == 415
    assert_error(response.json(), "unsupported_media_type", "application/json")
    assert len(wb.get_episodes()["episodes"]) == 1
    assert client.post("/tools/get_status").status_code == 200  # no body: nothing to type


def test_a_foreign_host_name_is_refused_everywhere_but_the_own_origin_is_fine(fresh):
    _, client = fresh
    rebound = {"Host": "attacker.example:8000"}
    assert client.get("/tools", headers=rebound).status_code == 421
    assert client.post("/tools/get_status", headers=rebound).status_code == 421
    assert client.post("/mcp", json={}, headers=rebound).status_code == 421
    same = client.post("/tools/get_status", headers={"Origin": BASE})
    assert same.status_code == 200


def test_configured_hosts_and_origins_are_accepted(plain_wb):
    settings = plain_wb.settings.model_copy(
        update={"allowed_hosts": "memory.internal", "allowed_origins": "https://app.example/"}
    )
    with TestClient(create_app(plain_wb, settings), base_url=BASE) as client:
        assert client.get("/tools", headers={"Host": "memory.internal:8000"}).status_code == 200
        ok = client.post("/tools/get_status", headers={"Origin": "https://app.example"})
        assert ok.status_code == 200
        assert client.post("/tools/get_status", headers={"Origin": EVIL}).status_code == 403


@pytest.mark.parametrize(
    "bind, host, allowed, expected",
    [
        ("127.0.0.1", "127.0.0.1:8000", (), True),
        ("127.0.0.1", "localhost", (), True),
        ("127.0.0.1", "[::1]:8000", (), True),
        ("127.0.0.1", "evil.example", (), False),
        ("127.0.0.1", None, (), False),
        ("0.0.0.0", "memory.example.org", (), True),  # exposed (token required): any name
        ("0.0.0.0", "evil.example", ("memory.example.org",), False),
        ("0.0.0.0", "memory.example.org:443", ("memory.example.org",), True),
    ],
)
def test_host_rules(bind, host, allowed, expected):
    assert Exposure(bind, allowed).host_allowed(host) is expected


# --- 2. secrets out of stored and returned text ------------------------------------------------
def test_an_echoed_api_key_is_stored_and_returned_nowhere(fake_llm, hash_embedder):
    echo = f"gateway rejected Authorization: Bearer {KEY} (key {KEY})"
    fake_llm.set_responder(lambda request: FakeReply.error(400, echo))
    settings = make_settings(
        fake_llm, SVC_KNOWLEDGE_COMPAT_API_KEY=KEY, SVC_KNOWLEDGE_QUEUE_MAX_ATTEMPTS="1"
    )
    wb = Workbench.open(settings, embedder=hash_embedder, metrics=Metrics())
    try:
        with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
            add_episode(client)
            wb.process_pending()
            returned = [
                call(client, "classify_memory", {"text": "Maria likes tea."}),
                call(client, "get_queue_status"),
                call(client, "get_episodes"),
            ]
        stored = [
            wb.store.fetchall(f"SELECT {column} FROM {table}")
            for table, column in (
                ("queue", "error_message"),
                ("llm_calls", "error_message"),
                ("episodes", "status_detail"),
            )
        ]
        text = json.dumps([returned, stored], default=str)
        assert KEY not in text
        assert "[REDACTED]" in text  # the errors are there, without the key
    finally:
        wb.close()


# --- 3. named groups only -------------------------------------------------------------------
@pytest.mark.parametrize("groups", [[""], ["  "], ["main", ""]])
def test_clear_graph_never_takes_an_empty_name_for_the_default_group(fresh, groups):
    wb, client = fresh
    add_episode(client)
    assert_error(
        call(client, "clear_graph", {"group_ids": groups}, 400), "invalid_input", "group_id"
    )
    assert len(wb.get_episodes()["episodes"]) == 1


def test_an_empty_group_id_is_an_error_not_the_default(fresh):
    _, client = fresh
    body = {"name": "e", "episode_body": "x", "group_id": ""}
    assert_error(call(client, "add_memory", body, 400), "invalid_input", "group_id")


# --- 4. malformed bytes ---------------------------------------------------------------------
@pytest.mark.parametrize("path", ["/tools/search_memory_facts", "/mcp"])
def test_a_body_that_is_not_utf8_is_a_400(plain, path):
    response = plain.post(
        path,
        content=b'{"query": "\xff"}',
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "UTF-8")


@pytest.mark.parametrize("path", ["/tools/search_memory_facts", "/mcp"])
def test_json_nested_a_thousand_deep_is_a_400(plain, path):
    deep = '{"query": ' + "[" * 1000 + "]" * 1000 + "}"
    response = plain.post(
        path,
        content=deep,
        headers={
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "deeper than")


def test_a_deep_json_episode_is_a_400(plain):
    body = {"name": "deep", "episode_body": "[" * 5000 + "]" * 5000, "source": "json"}
    assert_error(call(plain, "add_memory", body, 400), "invalid_input", "deeper than")


# --- 5. the metrics port -------------------------------------------------------------------
def test_the_metrics_port_binds_loopback_whatever_the_tools_host():
    settings = make_settings(SVC_KNOWLEDGE_HOST="0.0.0.0")
    assert settings.metrics_host == "127.0.0.1"


def test_a_metrics_token_protects_metrics_and_decay_health(plain_wb):
    with TestClient(create_metrics_app(plain_wb, "m-token-123456")) as client:
        for path in ("/metrics", "/health/decay"):
            refused = client.get(path)
            assert refused.status_code == 401
            assert_error(refused.json(), "unauthorized", "SVC_KNOWLEDGE_METRICS_TOKEN")
            allowed = client.get(path, headers={"Authorization": "Bearer m-token-123456"})
            assert allowed.status_code == 200


def test_group_labels_are_bounded():
    metrics = Metrics(max_group_labels=2)
    for group in ("a", "b", "c", "d", "a"):
        metrics.record_episode_processed(group)
    text = metrics.exposition().decode()
    assert prom.matching(text, "graph_episodes_processed_total", group_id="a") == 2
    assert prom.matching(text, "graph_episodes_processed_total", group_id="_other") == 2
    assert prom.matching(text, "graph_episodes_processed_total", group_id="c") is None


# --- 7. rate limits per client -------------------------------------------------------------------
def test_behind_a_trusted_proxy_each_client_has_its_own_bucket(plain_wb):
    settings = plain_wb.settings.model_copy(
        update={"rate_limit_per_minute": 2, "trusted_proxies": "testclient"}
    )
    with TestClient(create_app(plain_wb, settings, rate_clock=Tick()), base_url=BASE) as client:
        for _ in range(2):
            call(client, "get_status", headers={"X-Forwarded-For": "10.0.0.1"})
        assert (
            client.post("/tools/get_status", headers={"X-Forwarded-For": "10.0.0.1"}).status_code
            == 429
        )
        call(client, "get_status", headers={"X-Forwarded-For": "10.0.0.2"})


def test_a_forwarded_header_from_an_untrusted_address_is_ignored():
    scope = {"client": ("203.0.113.9", 1), "headers": [(b"x-forwarded-for", b"10.0.0.1")]}
    assert client_key(scope) == "203.0.113.9"
    assert client_key(scope, frozenset({"203.0.113.9"})) == "10.0.0.1"


def test_requests_with_a_token_count_against_the_token_not_the_address(plain_wb):
    token = "t0ken-with-enough-chars"
    settings = plain_wb.settings.model_copy(
        update={"rate_limit_per_minute": 2, "api_token": SecretStr(token)}
    )
    with TestClient(create_app(plain_wb, settings, rate_clock=Tick()), base_url=BASE) as client:
        for _ in range(3):  # unauthenticated requests drain their own bucket only
            client.post("/tools/get_status")
        good = {"Authorization": f"Bearer {token}"}
        call(client, "get_status", headers=good)
        call(client, "get_status", headers=good)
        assert client.post("/tools/get_status", headers=good).status_code == 429


# --- 7. idempotent add_memory, strict arguments ---------------------------------------------
def test_a_retried_add_memory_with_an_idempotency_key_returns_the_first_result(fresh):
    wb, client = fresh
    body = {"name": "e", "episode_body": "Maria works at Acme."}
    key = {"Idempotency-Key": "retry-7f3a"}
    first = call(client, "add_memory", body, headers=key)
    again = call(client, "add_memory", body, headers=key)
    assert again["episode_uuid"] == first["episode_uuid"]
    assert "added before" in again["message"]
    assert len(wb.get_episodes()["episodes"]) == 1
    other = call(client, "add_memory", {**body, "episode_body": "Tom likes tea."}, 409, headers=key)
    assert_error(other, "conflict", "other content")
    call(client, "add_memory", body, headers={"Idempotency-Key": "another-key"})
    assert len(wb.get_episodes()["episodes"]) == 2


def test_the_same_episode_under_its_uuid_is_a_safe_retry_for_clients_without_headers(fresh):
    wb, client = fresh
    body = {"name": "e", "episode_body": "x", "uuid": "0b0c8e6e-3f2a-4d0b-9a57-9f1f4b7c2d11"}
    assert call(client, "add_memory", body)["episode_uuid"] == body["uuid"]
    assert call(client, "add_memory", body)["episode_uuid"] == body["uuid"]
    assert len(wb.get_episodes()["episodes"]) == 1


@pytest.mark.parametrize(
    "tool, body, fragment",
    [
        ("search_memory_facts", {"query": "q", "max_facts": "10"}, "max_facts"),
        (
            "search_memory_facts",
            {"query": "q", "include_invalidated": "yes"},
            "include_invalidated",
        ),
        ("get_episodes", {"max_episodes": 2.5}, "max_episodes"),
        ("get_status", {"verbose": True}, "verbose"),
        ("get_queue_status", {"x": 1}, "Extra inputs"),
    ],
)
def test_arguments_are_strict_and_unknown_ones_are_refused(plain, tool, body, fragment):
    assert_error(call(plain, tool, body, 400), "invalid_input", fragment)


def test_a_missing_body_says_so(plain):
    response = plain.post("/tools/add_memory")
    assert response.status_code == 400
    assert_error(response.json(), "invalid_input", "no body")
