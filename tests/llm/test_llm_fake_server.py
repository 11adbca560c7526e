"""The shared fake chat-completions server, driven by the real ``openai`` client."""

from __future__ import annotations

import json
import time

import openai
import pytest
from pydantic import BaseModel, Field

from tests.fakes import FakeReply, message_text, minimal_instance, structure_name
from workbench.llm.structured import model_schema, request_options


class Item(BaseModel):
    label: str = Field(min_length=3)
    score: int = Field(ge=2, le=9)
    tags: list[str] = Field(min_length=1)


class Items(BaseModel):
    items: list[Item] = Field(min_length=2)
    note: str | None = None


def client(fake):
    return openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0, timeout=5)


def ask(fake, mode="json_schema", model=Items, text="hello"):
    msgs, extra = request_options(mode, [{"role": "user", "content": text}], model)
    return client(fake).chat.completions.create(model="m", messages=msgs, **extra)


def test_base_url_and_models_endpoint(fake_llm):
    assert fake_llm.base_url.startswith("http://127.0.0.1:")
    assert fake_llm.base_url.endswith("/v1")
    models = client(fake_llm).models.list()
    assert [m.id for m in models.data] == [fake_llm.model]


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "tool"])
def test_default_reply_is_valid_minimal_data_in_every_mode(fake_llm, mode):
    reply = ask(fake_llm, mode)
    msg = reply.choices[0].message
    text = msg.tool_calls[0].function.arguments if mode == "tool" else msg.content
    Items.model_validate_json(text)
    assert reply.choices[0].finish_reason == ("tool_calls" if mode == "tool" else "stop")
    assert fake_llm.structures() == ["Items"]


def test_minimal_instance_honours_bounds_refs_and_enums():
    data = minimal_instance(Items.model_json_schema())
    assert Items.model_validate(data).items[0].score == 2
    assert minimal_instance({"enum": ["b", "a"]}) == "b"
    assert minimal_instance({"anyOf": [{"type": "null"}, {"type": "integer"}]}) == 0
    assert minimal_instance(model_schema(Items))["items"][0]["label"] == "xxx"


def test_usage_fields(fake_llm):
    fake_llm.script(
        FakeReply.ok(
            {"items": []},
            prompt_tokens=120,
            completion_tokens=30,
            cached_tokens=100,
            cache_read_tokens=100,
            cache_write_tokens=20,
            cost=0.5,
        )
    )
    usage = ask(fake_llm).usage.model_dump()
    assert usage["prompt_tokens"] == 120 and usage["completion_tokens"] == 30
    assert usage["total_tokens"] == 150
    assert usage["prompt_tokens_details"]["cached_tokens"] == 100
    assert (usage["cache_read_tokens"], usage["cache_write_tokens"], usage["cost"]) == (
        100,
        20,
        0.5,
    )


def test_default_usage_is_deterministic(fake_llm):
    first, second = ask(fake_llm).usage, ask(fake_llm).usage
    assert first == second and first.prompt_tokens > 0 and first.completion_tokens > 0


def test_script_queue_then_responder_then_structure_then_default(fake_llm):
    seen = []

    def responder(request):
        seen.append(structure_name(request))
        return {"items": [], "note": "responder"} if "respond" in message_text(request) else None

    fake_llm.on_structure("Items", lambda req: {"items": [], "note": "structure"})
    fake_llm.set_responder(responder)
    fake_llm.script({"items": [], "note": "queued"})
    assert fake_llm.pending == 1
    notes = [
        json.loads(ask(fake_llm, text=t).choices[0].message.content)["note"]
        for t in ("respond", "respond", "other")
    ]
    assert notes == ["queued", "responder", "structure"]
    assert seen == ["Items", "Items"]
    fake_llm.reset()
    assert fake_llm.requests == [] and fake_llm.pending == 0
    assert Items.model_validate_json(ask(fake_llm).choices[0].message.content).note is None


def test_records_every_request(fake_llm):
    ask(fake_llm, text="first")
    ask(fake_llm, "tool", text="second")
    assert [message_text(r) for r in fake_llm.requests] == ["first", "second"]
    assert [r.path for r in fake_llm.received] == ["/v1/chat/completions"] * 2
    assert fake_llm.requests_for("Items") == fake_llm.requests


def test_error_replies_are_real_http_errors(fake_llm):
    fake_llm.script(FakeReply.rate_limited(retry_after=2))
    with pytest.raises(openai.RateLimitError) as info:
        ask(fake_llm)
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.body["message"] == "Rate limit exceeded"
    fake_llm.script(FakeReply.server_error())
    with pytest.raises(openai.InternalServerError):
        ask(fake_llm)


def test_truncated_and_schema_echo_replies(fake_llm):
    fake_llm.script(
        FakeReply.truncated({"items": [{"label": "long label"}]}, keep_chars=12),
        FakeReply.schema_echo(),
    )
    cut = ask(fake_llm).choices[0]
    assert (cut.finish_reason, cut.message.content) == ("length", '{"items": [{')
    echo = ask(fake_llm).choices[0].message.content
    assert '"properties"' in echo and '"items"' in echo


def test_fixed_latency_and_slow_replies(fake_llm):
    fake_llm.latency = 0.1
    start = time.perf_counter()
    ask(fake_llm)
    assert time.perf_counter() - start >= 0.1
    fake_llm.latency = 0
    fake_llm.script(FakeReply.slow(2.0))
    quick = openai.OpenAI(base_url=fake_llm.base_url, api_key="k", max_retries=0, timeout=0.2)
    with pytest.raises(openai.APITimeoutError):
        quick.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])


def test_raw_body_override(fake_llm):
    fake_llm.script(
        FakeReply(
            body={"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": []}
        )
    )
    assert ask(fake_llm).choices == []
