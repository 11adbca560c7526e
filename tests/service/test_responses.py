"""Every tool's real answer matches the result model the OpenAPI schema publishes for it, and
every error status is declared with the one error body (a processed episode, so searches,
facts and episodes have content)."""

from __future__ import annotations

from typing import Annotated, NotRequired, TypedDict, get_type_hints

import pytest
from litestar.testing import TestClient
from pydantic import Field

from service.api.app import create_app
from service.api.responses import ERRORS, RESULTS, ErrorBody
from service.api.tools import TOOLS
from tests.service.svc_helpers import BASE, call, make_settings
from workbench.facade import Workbench
from workbench.fakes import rule_llm
from workbench.metrics import Metrics
from workbench.results import Timestamp, Uuid


@pytest.fixture
def client(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    workbench = Workbench.open(make_settings(fake_llm), embedder=hash_embedder, metrics=Metrics())
    with TestClient(create_app(workbench, workbench.settings), base_url=BASE) as test_client:
        test_client.workbench = workbench
        yield test_client
    workbench.close()


def _answers(client) -> dict[str, dict]:
    """One real answer of every tool, in an order where each has something to show."""
    wb = client.workbench
    out = {}
    body = "Maria Keller works at Acme. Maria Keller lives in Munich."
    out["add_memory"] = call(client, "add_memory", {"name": "intro", "episode_body": body})
    assert wb.process_pending() == 1
    lines = [{"type": "fact", "source": "Tom", "target": "Neovim", "fact": "Tom uses Neovim"}]
    out["import_memories"] = call(client, "import_memories", {"lines": [*lines, "not json"]})
    out["search_memory_nodes"] = call(client, "search_memory_nodes", {"query": "Maria"})
    out["search_memory_facts"] = call(client, "search_memory_facts", {"query": "works at"})
    out["search_memory"] = call(client, "search_memory", {"query": "Maria Keller works at"})
    out["get_episodes"] = call(client, "get_episodes", {})
    fact = out["search_memory_facts"]["facts"][0]["uuid"]
    out["get_entity_edge"] = call(client, "get_entity_edge", {"uuid": fact})
    out["get_sources"] = call(client, "get_sources", {"uuid": fact})
    out["get_timeline"] = call(client, "get_timeline", {"max_items": 3})
    assert out["get_timeline"]["next"] and out["get_sources"]["sources"]["episodes"]
    assert out["get_entity_edge"]["sources"]["episode_count"] == 1
    _browse(client, out)  # (its deletes last: the timeline above pages over what was added)
    for name in ("get_status", "get_queue_status", "get_knowledge_health", "export_snapshot"):
        out[name] = call(client, name)
    out["classify_memory"] = call(client, "classify_memory", {"text": "Maria is vegetarian"})
    out["retry_failed_episodes"] = call(client, "retry_failed_episodes", {})
    out["run_decay_maintenance"] = call(client, "run_decay_maintenance", {"dry_run": False})
    out["delete_entity_edge"] = call(client, "delete_entity_edge", {"uuid": fact})
    tom = call(client, "search_memory_facts", {"query": "Neovim"})["facts"][0]["uuid"]
    wb.store.execute(
        "UPDATE facts SET lifecycle_state = 'SOFT_DELETED', soft_deleted_at = now() WHERE uuid = ?",
        [tom],
    )
    out["recover_soft_deleted"] = call(client, "recover_soft_deleted", {"uuid": tom})
    out["reextract"] = call(client, "reextract", {"group_id": "main", "dry_run": True})
    out["delete_episode"] = call(
        client, "delete_episode", {"uuid": out["add_memory"]["episode_uuid"]}
    )
    out["list_groups"] = call(client, "list_groups", {})
    out["add_token"] = call(client, "add_token", {"name": "alice", "groups": ["main"]})
    out["list_tokens"] = call(client, "list_tokens")
    out["revoke_token"] = call(client, "revoke_token", {"name": "alice"})
    out["clear_graph"] = call(client, "clear_graph", {"group_ids": ["main"]})
    return out


def _browse(client, out: dict[str, dict]) -> None:
    main = {"group_id": "main"}
    out["get_group_stats"] = call(client, "get_group_stats", {})
    out["list_episodes"] = call(client, "list_episodes", main)
    episode = out["list_episodes"]["episodes"][0]["uuid"]
    out["get_episode"] = call(client, "get_episode", {"uuid": episode})
    out["list_facts"] = call(client, "list_facts", main)
    out["list_entities"] = call(client, "list_entities", main)
    tom = call(client, "list_entities", {**main, "name_contains": "neovim"})["entities"][0]
    out["get_entity"] = call(client, "get_entity", {"uuid": tom["uuid"]})
    out["delete_entity"] = call(client, "delete_entity", {"uuid": tom["uuid"]})
    for name in ("list_episodes", "get_episode", "list_facts", "list_entities", "get_entity"):
        assert any(out[name].values()), name  # something to check against the model


def test_every_tool_answers_with_its_published_result_model(client):
    answers = _answers(client)
    assert set(answers) == {t.name for t in TOOLS} == set(RESULTS)
    for name, answer in answers.items():
        model = RESULTS[name]
        model.model_validate(answer)  # raises naming the field that does not match
        required = {n for n, f in model.model_fields.items() if f.is_required()}
        assert required <= set(answer), (name, required - set(answer))
    assert answers["search_memory_nodes"]["nodes"] and answers["get_episodes"]["episodes"]
    assert {r["kind"] for r in answers["search_memory"]["results"]} == {"fact", "passage"}


def test_the_schema_names_each_result_and_the_error_body_for_every_error(client):
    spec = client.get("/schema/openapi.json").json()
    schemas = spec["components"]["schemas"]
    assert schemas["ErrorBody"]["properties"]["error"]["$ref"].endswith("/ErrorDetail")
    assert set(schemas["ErrorDetail"]["required"]) == {"type", "message", "request_id"}
    for tool in TOOLS:
        responses = spec["paths"][f"/tools/{tool.name}"]["post"]["responses"]
        ok = responses["200"]["content"]["application/json"]["schema"]["$ref"]
        assert ok.endswith(f"/{RESULTS[tool.name].__name__}"), tool.name
        assert {int(s) for s in responses} == {200, *ERRORS}, tool.name
        for status in ERRORS:
            schema = responses[str(status)]["content"]["application/json"]["schema"]
            assert schema["$ref"].endswith("/ErrorBody"), (tool.name, status)
    # the declared error body is what an error really looks like
    bad = call(client, "get_entity_edge", {"uuid": "nope"}, status=400)
    ErrorBody.model_validate(bad)
    assert "must be a uuid" in bad["error"]["message"]


def test_uuid_arguments_are_declared_and_checked_as_uuids(client):
    spec = client.get("/schema/openapi.json").json()["components"]["schemas"]
    assert spec["UuidArgs"]["properties"]["uuid"]["format"] == "uuid"
    # Litestar puts the format beside the oneOf of an optional field: it applies to the string
    # branch only (JSON Schema's format and items constrain strings and arrays, not null)
    center = spec["SearchFactsArgs"]["properties"]["center_node_uuid"]
    assert center["format"] == "uuid" and {"type": "null"} in center["oneOf"]
    retry = spec["RetryArgs"]["properties"]["episode_uuids"]
    assert retry["items"]["format"] == "uuid"
    assert spec["AddMemoryArgs"]["properties"]["uuid"]["format"] == "uuid"
    missing = "00000000-0000-4000-8000-000000000000"
    call(client, "get_entity_edge", {"uuid": missing.upper()}, status=404)  # canonicalised
    call(client, "retry_failed_episodes", {"episode_uuids": ["x"]}, status=400)


def test_each_published_result_is_the_type_the_facade_method_returns():
    """The core declares every answer once (``workbench.results``); the service publishes that
    type, adding at most the groups an answer covered."""
    from service.api.responses import ANSWERS
    from tests.service.test_tools_table import HELD
    from workbench.facade import Workbench

    for tool in TOOLS:
        owner, _, name = tool.method.rpartition(".")
        method = getattr(HELD.get(owner, Workbench), name)
        returned = get_type_hints(get_type_hints(method)["return"])
        published = get_type_hints(ANSWERS[tool.name])
        assert returned.items() <= published.items(), tool.name
        assert set(published) - set(returned) <= {"groups"}, tool.name


class _Inner(TypedDict):
    at: Timestamp | None


class _Answer(TypedDict):
    id: Uuid
    items: list[_Inner]
    note: NotRequired[Annotated[str | None, Field(description="Said when known.")]]


def test_a_result_type_becomes_a_model_with_its_formats_and_optional_keys():
    from service.api.responses import model_of

    schema = model_of(_Answer).model_json_schema()
    assert schema["required"] == ["id", "items"]
    assert schema["properties"]["id"] == {"format": "uuid", "title": "Id", "type": "string"}
    assert schema["properties"]["note"]["description"] == "Said when known."
    inner = schema["$defs"]["_Inner"]["properties"]["at"]["anyOf"][0]
    assert inner == {"format": "date-time", "type": "string"}
