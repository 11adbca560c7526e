"""The real app in-process (Litestar's TestClient) on a real Workbench (DuckDB ``:memory:``,
the fake chat-completions server): every tool and every error path over REST."""

from __future__ import annotations

import contextlib
import logging

import pytest
from litestar.testing import TestClient
from pydantic import SecretStr

from service.api.access import TOKEN_SOURCES
from service.api.app import create_app, max_body_bytes
from serving.middleware import bearer_refusal
from tests.service.svc_helpers import BASE, Tick, assert_error, call, make_settings
from workbench.facade import Workbench
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import FakeReply
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics

MISSING = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def wb(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    workbench = Workbench.open(make_settings(fake_llm), embedder=hash_embedder, metrics=Metrics())
    yield workbench
    workbench.close()


@pytest.fixture
def client(wb):
    with TestClient(create_app(wb, wb.settings), base_url=BASE) as test_client:
        yield test_client


@pytest.fixture
def ingested(client, wb):
    out = call(
        client,
        "add_memory",
        {
            "name": "intro",
            "episode_body": "Maria Keller works at Acme. Maria Keller lives in Munich.",
            "group_id": "g1",
            "source_description": "test",
        },
    )
    assert wb.process_pending() == 1
    return out


# --- every tool ---------------------------------------------------------------------------
def test_add_memory_queues_and_get_episodes_lists_it(client):
    out = call(
        client,
        "add_memory",
        {"name": "n", "episode_body": "Tom uses Neovim.", "priority": "high", "group_id": "g2"},
    )
    assert out["status"] == "queued" and out["group_id"] == "g2"
    episodes = call(client, "get_episodes", {"group_ids": ["g2"]})["episodes"]
    assert [e["uuid"] for e in episodes] == [out["episode_uuid"]]
    assert call(client, "get_episodes")["episodes"]  # all optional: no body at all
    queue = call(client, "get_queue_status")
    assert queue["llm_configured"] is True


def test_search_tools_find_the_ingested_memories(client, ingested):
    nodes = call(
        client,
        "search_memory_nodes",
        {"query": "Maria Keller", "group_ids": ["g1"], "max_nodes": 5},
    )
    assert any(n["name"] == "Maria Keller" for n in nodes["nodes"])
    facts = call(
        client, "search_memory_facts", {"query": "where does Maria work", "group_ids": ["g1"]}
    )["facts"]
    assert facts and any("Acme" in f["fact"] for f in facts)
    assert call(client, "search_memory_nodes", {"query": "Acme", "entity_types": ["Organization"]})[
        "nodes"
    ]
    assert (
        call(
            client,
            "search_memory_facts",
            {"query": "Acme", "relation_types": ["LEADS"], "include_invalidated": True},
        )["facts"]
        == []
    )
    assert (
        call(
            client,
            "search_memory_nodes",
            {
                "query": "Maria",
                "states": ["EXPIRED"],
                "created_after": "2000-01-01T00:00:00Z",
                "include_weighted_scores": False,
            },
        )["nodes"]
        == []
    )


def test_search_memory_recalls_facts_and_what_was_said_in_one_list(client, ingested):
    from service.api.responses import RESULTS

    out = call(
        client, "search_memory", {"query": "where does Maria Keller work", "group_ids": ["g1"]}
    )
    RESULTS["search_memory"].model_validate(out)
    kinds = {r["kind"] for r in out["results"]}
    assert kinds == {"fact", "passage"}
    scores = [r["score"] for r in out["results"]]
    assert scores == sorted(scores, reverse=True)
    passage = next(r for r in out["results"] if r["kind"] == "passage")
    assert passage["episode_uuid"] == ingested["episode_uuid"] and "Acme" in passage["text"]
    fact = next(r for r in out["results"] if r["kind"] == "fact")
    assert fact["episodes"] == [ingested["episode_uuid"]]  # provenance
    only = call(client, "search_memory", {"query": "Acme", "kinds": ["passage"], "max_results": 1})
    assert [r["kind"] for r in only["results"]] == ["passage"]
    removed = call(client, "delete_episode", {"uuid": ingested["episode_uuid"]})
    assert removed["passages_removed"] == 1
    assert call(client, "search_memory", {"query": "Acme", "kinds": ["passage"]})["results"] == []


def test_entity_edge_get_and_delete(client, ingested):
    fact = call(client, "search_memory_facts", {"query": "Acme"})["facts"][0]
    got = call(client, "get_entity_edge", {"uuid": fact["uuid"]})
    assert got["uuid"] == fact["uuid"]
    call(client, "delete_entity_edge", {"uuid": fact["uuid"]})
    assert_error(call(client, "get_entity_edge", {"uuid": fact["uuid"]}, 404), "not_found")


def test_delete_episode_and_clear_graph(client, ingested, wb):
    call(client, "delete_episode", {"uuid": ingested["episode_uuid"]})
    assert_error(
        call(client, "delete_episode", {"uuid": ingested["episode_uuid"]}, 404),
        "not_found",
        ingested["episode_uuid"],
    )
    call(client, "add_memory", {"name": "x", "episode_body": "Tom uses Neovim.", "group_id": "g9"})
    cleared = call(client, "clear_graph", {"group_ids": ["g9"]})
    assert cleared["episodes_removed"] == 1
    assert_error(call(client, "clear_graph", {"group_ids": []}, 400), "invalid_input", "group_ids")
    assert_error(call(client, "clear_graph", {}, 400), "invalid_input", "group_ids")


def test_status_queue_retry_maintenance_health_classify(client, ingested):
    status = call(client, "get_status")
    assert status["llm"]["configured"] is True and status["graph"]
    assert call(client, "retry_failed_episodes", {})["episode_uuids"] == []
    report = call(client, "run_decay_maintenance", {"dry_run": True})
    assert isinstance(report, dict) and report
    health = call(client, "get_knowledge_health")
    assert {"status", "decay_enabled", "last_maintenance", "metrics_endpoint"} <= set(health)
    rated = call(client, "classify_memory", {"text": "Maria Keller is allergic to nuts."})
    assert rated and isinstance(rated, dict)
    assert_error(call(client, "recover_soft_deleted", {"uuid": MISSING}, 404), "not_found")


def test_tool_table_and_openapi_schema(plain):
    tools = plain.get("/tools").json()["tools"]
    assert len(tools) == 32  # 23, the 7 that browse a group (the memory browser),
    # and get_sources and get_timeline
    assert {t["name"] for t in tools if t["admin"]} == {
        "export_snapshot",
        "run_decay_maintenance",
        "add_token",
        "list_tokens",
        "revoke_token",
        "reextract",
    }
    schema = plain.get("/schema/openapi.json").json()
    for tool in tools:
        operation = schema["paths"][f"/tools/{tool['name']}"]["post"]
        assert operation["operationId"] == tool["name"]
        assert operation["description"] == tool["description"]
    assert "requestBody" in schema["paths"]["/tools/add_memory"]["post"]


# --- error paths --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tool", "body", "fragment"),
    [
        ("add_memory", {"name": "a"}, "episode_body"),
        ("add_memory", {"name": "a", "episode_body": "b", "priority": "urgent"}, "priority"),
        ("add_memory", {"name": "a", "episode_body": "b", "source": "xml"}, "source"),
        ("add_memory", {"name": "a", "episode_body": "b", "colour": "red"}, "colour"),
        (
            "add_memory",
            {"name": "a", "episode_body": "b", "reference_time": "yesterday"},
            "reference_time",
        ),
        ("add_memory", {"name": "a", "episode_body": "b", "group_id": "bad group!"}, "group_id"),
        ("add_memory", {"name": "a", "episode_body": "{not json", "source": "json"}, "JSON"),
        ("search_memory_facts", {"query": ""}, "query"),
        ("search_memory_facts", {"query": "x", "max_facts": 0}, "max_facts"),
        ("search_memory_nodes", {"query": "x", "max_nodes": "many"}, "max_nodes"),
        ("search_memory_nodes", {"query": "x", "group_ids": "g1"}, "group_ids"),
        ("search_memory_nodes", {"query": "x", "states": ["GONE"]}, "states"),
        ("search_memory_facts", {"query": "x", "created_after": "soon"}, "created_after"),
        ("search_memory", {"query": "x", "kinds": ["entity"]}, "kinds"),
        ("get_entity_edge", {"uuid": "not-a-uuid"}, "uuid"),
        ("delete_episode", {}, "uuid"),
        ("classify_memory", {"text": 5}, "text"),
    ],
    ids=[
        "missing-field",
        "bad-priority",
        "bad-source",
        "unknown-arg",
        "bad-time",
        "bad-group",
        "bad-json-episode",
        "empty-query",
        "zero-max",
        "non-int",
        "groups-not-list",
        "bad-state",
        "bad-after",
        "bad-kind",
        "bad-uuid",
        "no-uuid",
        "text-not-string",
    ],
)
def test_bad_arguments_are_400_with_a_useful_message(plain, tool, body, fragment):
    assert_error(call(plain, tool, body, 400), "invalid_input", fragment)


def test_body_that_is_not_json_or_not_an_object(plain):
    bad = plain.post(
        "/tools/add_memory", content=b"{nope", headers={"content-type": "application/json"}
    )
    assert bad.status_code == 400
    assert_error(bad.json(), "invalid_input")
    not_object = plain.post("/tools/search_memory_facts", json=["query"])
    assert not_object.status_code == 400
    assert_error(not_object.json(), "invalid_input")


def test_unknown_tool_and_wrong_method(plain):
    assert_error(call(plain, "forget_everything", {}, 404), "not_found", "add_memory")
    wrong = plain.get("/tools/add_memory")
    assert wrong.status_code == 405
    assert_error(wrong.json(), "method_not_allowed")
    assert plain.get("/nothing/here").status_code == 404


def test_oversized_body_is_413(plain, plain_wb):
    limit = max_body_bytes(plain_wb.settings)
    body = {"name": "big", "episode_body": "x" * (limit + 10)}
    response = plain.post("/tools/add_memory", json=body)
    assert response.status_code == 413
    assert_error(response.json(), "payload_too_large")


def test_episode_over_the_character_limit_is_400_not_413(plain, plain_wb):
    body = {"name": "long", "episode_body": "y" * (plain_wb.settings.max_episode_chars + 1)}
    assert_error(call(plain, "add_memory", body, 400), "invalid_input", "at most")


def test_rate_limit_answers_429_with_retry_after(plain_wb):
    settings = plain_wb.settings.model_copy(update={"rate_limit_per_minute": 3})
    tick = Tick()
    with TestClient(create_app(plain_wb, settings, rate_clock=tick), base_url=BASE) as client:
        for _ in range(3):
            call(client, "get_status")
        limited = client.post("/tools/get_status")
        assert limited.status_code == 429
        assert int(limited.headers["retry-after"]) == 20
        assert_error(limited.json(), "rate_limited", "retry in 20 s")
        assert client.get("/health").status_code == 200  # probes are never limited
        tick.now += 20
        call(client, "get_status")


def test_bearer_token_is_required_when_configured(plain_wb):
    token = SecretStr("t0ken-with-enough-chars")
    settings = plain_wb.settings.model_copy(update={"api_token": token})
    with TestClient(create_app(plain_wb, settings), base_url=BASE) as client:
        missing = client.post("/tools/get_status")
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert_error(missing.json(), "unauthorized", "SVC_KNOWLEDGE_API_TOKEN")
        # worded once, for the service and the voice server alike
        assert missing.json()["error"]["message"] == bearer_refusal(False, TOKEN_SOURCES)
        wrong = client.post("/tools/get_status", headers={"Authorization": "Bearer nope"})
        assert_error(wrong.json(), "unauthorized", "invalid")
        assert wrong.json()["error"]["message"] == bearer_refusal(True, TOKEN_SOURCES)
        assert client.post("/mcp", json={}).status_code == 401
        assert client.get("/schema/openapi.json").status_code == 401
        ok = client.post(
            "/tools/get_status", headers={"Authorization": "Bearer t0ken-with-enough-chars"}
        )
        assert ok.status_code == 200
        anonymous = client.get("/health")
        assert anonymous.status_code == 200 and set(anonymous.json()) == {"status", "live", "ready"}
        detailed = client.get(
            "/health", headers={"Authorization": "Bearer t0ken-with-enough-chars"}
        )
        assert "checks" in detailed.json()


def test_request_ids_are_echoed_and_generated(plain):
    given = plain.post("/tools/get_status", headers={"X-Request-ID": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"
    fresh = plain.post("/tools/get_status", headers={"X-Request-ID": "bad id\n!"})
    assert fresh.headers["x-request-id"] != "bad id\n!" and len(fresh.headers["x-request-id"])
    error = call(
        plain, "delete_episode", {"uuid": MISSING}, 404, headers={"X-Request-ID": "trace-7"}
    )
    assert error["error"]["request_id"] == "trace-7"


def test_a_real_fault_is_a_500_with_a_request_id_and_a_logged_traceback(caplog):
    wb = Workbench.open(make_settings(), embedder=HashEmbedder(), chat=None, metrics=Metrics())
    try:
        with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
            # the database connection dies under the service
            if wb.store.backend == "postgres":
                wb.store._pool.close()
            else:
                wb.store._con.close()
            with caplog.at_level(logging.ERROR, logger="service.errors"):
                response = client.post("/tools/get_status", headers={"X-Request-ID": "fault-1"})
    finally:
        with contextlib.suppress(Exception):
            wb.close()
    assert response.status_code in (500, 503)
    body = response.json()
    assert body["error"]["request_id"] == "fault-1"
    assert "Traceback" not in response.text
    assert "duckdb" not in response.text.lower() and "psycopg" not in response.text.lower()
    if response.status_code == 500:
        assert any(r.exc_info for r in caplog.records)


# --- health ---------------------------------------------------------------------------------
def test_health_reports_store_embedder_and_llm(client):
    body = client.get("/health").json()
    assert body["status"] == "ok" and body["live"] and body["ready"]
    assert body["checks"]["llm"]["configured"] is True


def test_health_reports_the_search_indexes(client, ingested, wb):
    search = client.get("/health").json()["checks"]["search"]
    entities = wb.store.fetchone("SELECT count(*) FROM entities")[0]
    facts = wb.store.fetchone("SELECT count(*) FROM facts")[0]
    assert entities >= 3 and facts >= 2
    assert search == {
        "ok": True,
        "entity": {"memories": entities, "vector_index": "exact"},
        "fact": {"memories": facts, "vector_index": "exact"},
        "passage": {"memories": 1, "vector_index": "exact"},  # the episode's one paragraph
    }


def test_health_without_an_llm_says_how_to_configure_one(plain):
    body = plain.get("/health").json()
    assert body["status"] == "degraded" and body["ready"] is True
    assert "SVC_KNOWLEDGE_COMPAT_BASE_URL" in body["checks"]["llm"]["detail"]
    out = call(plain, "add_memory", {"name": "n", "episode_body": "Tom uses Python."})
    assert "no LLM" in out["detail"]
    rated = call(plain, "classify_memory", {"text": "something"})
    assert "fallback" in str(rated)


def test_health_is_503_when_the_embedder_fails(wb):
    class Broken:
        model, dimensions = "broken", 384

        def embed(self, texts):
            from workbench.errors import EmbedderError

            raise EmbedderError("connection refused by the embedder at http://127.0.0.1:9/v1")

    wb.embedder = Broken()
    with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
        response = client.get("/health")
        assert response.status_code == 503
        assert "127.0.0.1:9" in response.json()["checks"]["embedder"]["detail"]


def test_health_shows_an_llm_whose_calls_fail(fake_llm, hash_embedder):
    """Configured is not enough: a backend that refuses every call shows as failing, with
    since when and the error type, and the service as degraded."""
    fake_llm.set_responder(lambda request: FakeReply.server_error())
    settings = make_settings(
        fake_llm, SVC_KNOWLEDGE_LLM_MAX_RETRIES="0", SVC_KNOWLEDGE_QUEUE_MAX_ATTEMPTS="1"
    )
    wb = Workbench.open(settings, embedder=hash_embedder, metrics=Metrics())
    try:
        with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
            assert client.get("/health").json()["checks"]["llm"]["state"] == "ok"
            call(client, "add_memory", {"name": "e", "episode_body": "Tom uses Python."})
            wb.process_pending()
            body = client.get("/health").json()
            llm = body["checks"]["llm"]
            assert (body["status"], llm["state"], llm["ok"]) == ("degraded", "failing", False)
            assert llm["last_error_type"] == "InternalServerError" and llm["failing_since"]
            fake_llm.set_responder(rule_llm.respond)
            call(client, "add_memory", {"name": "f", "episode_body": "Maria uses Go."})
            wb.process_pending()
            assert client.get("/health").json()["checks"]["llm"]["state"] == "ok"
    finally:
        wb.close()


def test_the_root_sends_a_browser_to_the_api_reference(plain):
    response = plain.get("/", follow_redirects=False)
    assert response.status_code in (301, 302, 307, 308)
    assert response.headers["location"] == "/schema"
    assert plain.get("/").status_code == 200  # followed: the reference itself
