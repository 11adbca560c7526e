"""CompatChatModel through the real ``openai`` client against the fake chat-completions server."""

from __future__ import annotations

import logging
import threading

import openai
import pytest
from pydantic import BaseModel, Field

from tests.fakes import FakeLLMServer, FakeReply
from tests.prom import sample_names, value
from workbench.clock import ManualClock
from workbench.config import load_settings
from workbench.errors import (
    LLMError,
    LLMRateLimited,
    LLMTimeout,
    LLMTransientError,
    SchemaEchoError,
    StructuredOutputError,
    TruncatedOutput,
)
from workbench.fakes.chat_server import chat_settings_env
from workbench.llm import CompatChatModel, PriceTable, build_chat_model
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store.llm_calls import cost_by_prompt, cost_summary, list_llm_calls


class Entity(BaseModel):
    name: str
    importance: int = Field(ge=1, le=5)


class ExtractedEntities(BaseModel):
    entities: list[Entity]


class Resolution(BaseModel):
    id: int
    duplicate_of: int


class NodeResolutions(BaseModel):
    entity_resolutions: list[Resolution]


ALICE = {"entities": [{"name": "Alice", "importance": 4}]}
MESSAGES = [
    {"role": "system", "content": "You extract entities."},
    {"role": "user", "content": "Alice met Bob."},
]


class Harness:
    def __init__(self, fake: FakeLLMServer, **kw):
        self.fake = fake
        self.metrics = kw.pop("metrics", None) or Metrics(enabled=True, cache_enabled=True)
        self.store = Store.open()
        self.sleeps: list[float] = []
        self.clock = ManualClock()
        options = {
            "base_url": fake.base_url,
            "api_key": "sk-secret-123",
            "model": fake.model,
            "metrics": self.metrics,
            "store": self.store,
            "requests_per_minute": 0,
            "sleep": self.sleeps.append,
            "clock": self.clock,
            **kw,
        }
        self.chat = CompatChatModel(**options)

    def complete(self, model=ExtractedEntities, **kw):
        return self.chat.complete("extract_entities", MESSAGES, model, **kw)

    def rows(self):
        return list(reversed(list_llm_calls(self.store)))

    @property
    def text(self):
        return self.metrics.exposition()


@pytest.fixture
def fake(fake_llm):
    fake_llm.model = "gpt-4o-mini"  # priced: 0.15 in / 0.60 out / 0.075 cached per 1M
    return fake_llm


@pytest.fixture
def h(fake):
    return Harness(fake)


# --- success and accounting --------------------------------------------------------------------
def test_successful_call_is_validated_priced_recorded_and_counted(h):
    h.fake.script(FakeReply.ok(ALICE, prompt_tokens=1000, completion_tokens=200))
    result = h.complete(episode_uuid="ep-1")
    assert result == ExtractedEntities.model_validate(ALICE)
    (row,) = h.rows()
    assert row["prompt_name"] == "extract_entities"
    assert row["model"] == "gpt-4o-mini"
    assert row["episode_uuid"] == "ep-1"
    assert (row["status"], row["attempt"], row["finish_reason"]) == ("success", 1, "stop")
    assert (row["prompt_tokens"], row["completion_tokens"]) == (1000, 200)
    assert row["input_cost"] == pytest.approx(0.00015)
    assert row["output_cost"] == pytest.approx(0.00012)
    assert row["total_cost"] == pytest.approx(0.00027)
    assert row["ts"] == h.clock.now
    assert row["latency_seconds"] > 0
    t = h.text
    assert value(t, "graph_prompt_tokens_total", model="gpt-4o-mini") == 1000
    assert value(t, "graph_completion_tokens_total", model="gpt-4o-mini") == 200
    assert value(t, "graph_total_tokens_all_models_total") == 1200
    assert value(t, "graph_api_cost_total", model="gpt-4o-mini") == pytest.approx(0.00027)
    assert value(t, "graph_api_input_cost_all_models_total") == pytest.approx(0.00015)
    assert value(t, "graph_llm_request_duration_seconds_count", model="gpt-4o-mini") == 1
    assert not {n for n in sample_names(t) if "errors" in n}


def test_response_cost_wins_over_the_table(h):
    h.fake.script(FakeReply.ok(ALICE, prompt_tokens=1000, completion_tokens=200, cost=0.0054))
    h.complete()
    (row,) = h.rows()
    assert row["total_cost"] == pytest.approx(0.0054)
    # split in the table's proportions (0.00015 : 0.00012)
    assert row["input_cost"] == pytest.approx(0.0054 * 15 / 27)
    assert value(h.text, "graph_api_cost_total", model="gpt-4o-mini") == pytest.approx(0.0054)


def test_response_cost_details_give_the_split(h):
    details = {
        "upstream_inference_prompt_cost": 0.001,
        "upstream_inference_completions_cost": 0.003,
    }
    h.fake.script(
        FakeReply.ok(
            ALICE, prompt_tokens=10, completion_tokens=10, cost=0.004, cost_details=details
        )
    )
    h.complete()
    (row,) = h.rows()
    assert (row["input_cost"], row["output_cost"]) == pytest.approx((0.001, 0.003))


def test_unknown_model_costs_nothing_and_warns_once(fake_llm, caplog):
    fake_llm.model = "mystery-model-7b"
    h = Harness(fake_llm)
    fake_llm.script(
        FakeReply.ok(ALICE, prompt_tokens=100, completion_tokens=10),
        FakeReply.ok(ALICE, prompt_tokens=100, completion_tokens=10),
    )
    with caplog.at_level(logging.WARNING, logger="workbench.llm"):
        h.complete()
        h.complete()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "mystery-model-7b" in warnings[0].getMessage()
    assert [r["total_cost"] for r in h.rows()] == [0.0, 0.0]
    assert value(h.text, "graph_prompt_tokens_total", model="mystery-model-7b") == 200


def test_cached_tokens_are_billed_at_the_cached_read_price(h):
    h.fake.script(FakeReply.ok(ALICE, prompt_tokens=1000, completion_tokens=0, cached_tokens=800))
    h.complete()
    (row,) = h.rows()
    assert row["cached_tokens"] == 800
    assert row["input_cost"] == pytest.approx((200 * 0.15 + 800 * 0.075) / 1e6)
    assert row["cache_cost_saved"] == pytest.approx(800 * (0.15 - 0.075) / 1e6)


def test_user_price_file_overrides_the_package_table(fake, tmp_path):
    path = tmp_path / "prices.json"
    path.write_text('{"models": {"gpt-4o-mini": {"input": 1.0, "output": 2.0}}}')
    h = Harness(fake, prices=PriceTable.load(path))
    fake.script(FakeReply.ok(ALICE, prompt_tokens=1_000_000, completion_tokens=1_000_000))
    h.complete()
    assert h.rows()[0]["total_cost"] == pytest.approx(3.0)


# --- transient errors --------------------------------------------------------------------------
def test_rate_limit_honours_retry_after_then_succeeds(h):
    h.fake.script(FakeReply.rate_limited(retry_after=7), FakeReply.ok(ALICE))
    assert h.complete().entities[0].name == "Alice"
    assert h.sleeps == [7.0]
    assert len(h.fake.requests) == 2
    assert [(r["status"], r["attempt"], r["error_type"]) for r in h.rows()] == [
        ("error", 1, "rate_limit"),
        ("success", 2, None),
    ]
    t = h.text
    assert value(t, "graph_llm_errors_total", model="gpt-4o-mini", error_type="rate_limit") == 1
    assert value(t, "graph_llm_errors_all_models_total") == 1


def test_rate_limit_exhausted_raises_llm_rate_limited(fake):
    h = Harness(fake, max_retries=2)
    fake.script(*[FakeReply.rate_limited(retry_after=1)] * 3)
    with pytest.raises(LLMRateLimited) as info:
        h.complete()
    assert info.value.error_type == "RateLimitError"
    assert "3 times" in str(info.value) and "rate_limit" in str(info.value)
    assert h.sleeps == [1.0, 1.0]
    assert len(h.rows()) == 3
    assert (
        value(h.text, "graph_llm_errors_total", model="gpt-4o-mini", error_type="rate_limit") == 3
    )


def test_server_error_is_retried_with_exponential_backoff(h):
    h.fake.script(FakeReply.server_error(), FakeReply.server_error(502), FakeReply.ok(ALICE))
    h.complete()
    assert len(h.sleeps) == 2
    assert 0.25 <= h.sleeps[0] <= 0.5 and 0.5 <= h.sleeps[1] <= 1.0
    assert (
        value(
            h.text, "graph_llm_errors_total", model="gpt-4o-mini", error_type="InternalServerError"
        )
        == 2
    )


def test_server_error_exhausted_raises_transient_error_with_hint(fake):
    h = Harness(fake, max_retries=1)
    fake.script(FakeReply.server_error(), FakeReply.server_error())
    with pytest.raises(LLMTransientError) as info:
        h.complete()
    assert type(info.value) is LLMTransientError
    assert info.value.error_type == "ConnectionError"
    assert "json_object" in str(info.value)  # the llama.cpp hint


def test_timeout_counts_and_is_retried(fake):
    h = Harness(fake, timeout=0.2)
    fake.script(FakeReply.slow(3.0, ALICE), FakeReply.ok(ALICE))
    h.complete()
    assert [r["error_type"] for r in h.rows()] == ["timeout", None]
    assert value(h.text, "graph_llm_errors_total", model="gpt-4o-mini", error_type="timeout") == 1


def test_timeout_exhausted_raises_llm_timeout(fake):
    h = Harness(fake, timeout=0.2, max_retries=0)
    fake.script(FakeReply.slow(3.0, ALICE))
    with pytest.raises(LLMTimeout) as info:
        h.complete()
    assert info.value.error_type == "TimeoutError"


def test_connection_refused_is_transient(fake):
    with FakeLLMServer() as gone:
        url = gone.base_url
    h = Harness(fake, base_url=url, max_retries=1)
    with pytest.raises(LLMTransientError):
        h.complete()
    assert [r["error_type"] for r in h.rows()] == ["APIConnectionError"] * 2


def test_bad_request_is_not_retried(h):
    h.fake.script(FakeReply.error(400, "unknown parameter: foo"))
    with pytest.raises(LLMError) as info:
        h.complete()
    assert not isinstance(info.value, LLMTransientError)
    assert "unknown parameter" in str(info.value)
    assert len(h.fake.requests) == 1 and h.sleeps == []
    assert (
        value(h.text, "graph_llm_errors_total", model="gpt-4o-mini", error_type="BadRequestError")
        == 1
    )


def test_switches_to_max_completion_tokens_when_the_model_asks(h):
    h.fake.script(
        FakeReply.error(
            400, "Unsupported parameter: 'max_tokens'; use 'max_completion_tokens' instead."
        ),
        FakeReply.ok(ALICE),
    )
    h.complete()
    first, second = h.fake.requests
    assert first["max_tokens"] == 4096 and "max_tokens" not in second
    assert second["max_completion_tokens"] == 4096


# --- structured-output failures ----------------------------------------------------------------
def test_schema_echo_names_the_missing_required_field(h):
    h.fake.script(FakeReply.schema_echo())
    with pytest.raises(SchemaEchoError) as info:
        h.complete(NodeResolutions)
    assert info.value.structure == "NodeResolutions"
    assert "required field `entity_resolutions` of NodeResolutions" in str(info.value)
    (row,) = h.rows()
    assert (row["status"], row["error_type"]) == ("invalid", "SchemaEchoError")
    assert row["prompt_tokens"] > 0  # an answered call is billed
    assert (
        value(h.text, "graph_llm_errors_total", model="gpt-4o-mini", error_type="SchemaEchoError")
        == 1
    )


def test_non_conforming_output_names_the_structure(h):
    h.fake.script(FakeReply.ok({"entities": [{"name": "Alice", "importance": 9}]}))
    with pytest.raises(StructuredOutputError) as info:
        h.complete()
    assert info.value.structure == "ExtractedEntities"
    assert str(info.value).startswith("ExtractedEntities: ")
    assert "importance" in info.value.detail


def test_invalid_json_names_the_structure(h):
    h.fake.script(FakeReply.text("Sure! Here are the entities: Alice, Bob."))
    with pytest.raises(StructuredOutputError, match="ExtractedEntities: the reply is not valid"):
        h.complete()


@pytest.mark.parametrize(
    "body",
    [
        {"choices": []},
        {"choices": "none"},
        {"choices": [{"message": None, "finish_reason": "stop"}]},
        {"choices": [{"message": {"tool_calls": [{"function": None}]}}]},
        {"usage": "n/a", "model": 3},
        {},
    ],
    ids=[
        "no-choices",
        "choices-not-a-list",
        "no-message",
        "tool-call-without-function",
        "odd-usage",
        "empty",
    ],
)
def test_a_reply_of_an_unexpected_shape_fails_the_structure_not_the_client(h, body):
    h.fake.script(FakeReply(body=body))
    with pytest.raises(StructuredOutputError) as info:
        h.complete()
    assert info.value.structure == "ExtractedEntities"
    (row,) = h.rows()
    assert row["status"] == "invalid" and row["prompt_tokens"] == 0


def test_a_tool_call_reply_is_read_from_its_arguments(h):
    import json

    h.fake.script(
        FakeReply(
            body={
                "model": "gpt-4o-mini",
                "choices": [
                    {
                        "finish_reason": "tool_calls",
                        "message": {"tool_calls": [{"function": {"arguments": json.dumps(ALICE)}}]},
                    }
                ],
                "usage": {
                    "prompt_tokens": 10,
                    "completion_tokens": 5,
                    "prompt_tokens_details": {"cached_tokens": 4},
                },
            }
        )
    )
    assert h.complete().entities[0].name == "Alice"
    (row,) = h.rows()
    assert (row["prompt_tokens"], row["completion_tokens"], row["cached_tokens"]) == (10, 5, 4)


@pytest.mark.parametrize(
    "message",
    [
        {
            "content": [
                {"type": "text", "text": '{"entities": [{"name": '},
                {"type": "text", "text": '"Alice", "importance": 4}]}'},
            ]
        },
        {"tool_calls": [{"function": {"arguments": ALICE}}]},  # arguments sent decoded
    ],
    ids=["content-parts", "decoded-arguments"],
)
def test_replies_in_other_common_shapes_are_read(h, message):
    h.fake.script(
        FakeReply(
            body={
                "model": "gpt-4o-mini",
                "choices": [{"finish_reason": "stop", "message": message}],
            }
        )
    )
    assert h.complete().entities[0].name == "Alice"


def test_a_json_reply_sent_with_another_content_type_is_read(h):
    import json

    from workbench.llm.client import _Call

    body = json.dumps(
        {
            "model": "gpt-4o-mini",
            "choices": [{"finish_reason": "stop", "message": {"content": json.dumps(ALICE)}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3},
        }
    )
    reply = h.chat._reply(_Call("extract_entities", None, "ExtractedEntities"), body, 0.1)
    assert reply.text == json.dumps(ALICE) and reply.finish_reason == "stop"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (7, 3)
    assert h.chat._reply(_Call("x", None, "X"), "not json", 0.1).text is None


def test_truncation_is_retried_once_with_a_larger_budget(h):
    h.fake.script(FakeReply.truncated(ALICE), FakeReply.ok(ALICE))
    assert h.complete(max_tokens=100).entities[0].name == "Alice"
    assert [r["max_tokens"] for r in h.fake.requests] == [100, 200]
    assert [(r["status"], r["finish_reason"]) for r in h.rows()] == [
        ("truncated", "length"),
        ("success", "stop"),
    ]


def test_truncation_twice_raises_truncated_output(h):
    h.fake.script(FakeReply.truncated(ALICE), FakeReply.truncated(ALICE))
    with pytest.raises(TruncatedOutput) as info:
        h.complete()
    assert info.value.structure == "ExtractedEntities"
    assert "cut off" in str(info.value)
    assert (
        value(h.text, "graph_llm_errors_total", model="gpt-4o-mini", error_type="TruncatedOutput")
        == 2
    )


def test_code_fences_and_reasoning_are_stripped(h):
    h.fake.script(
        FakeReply.text(
            "<think>Alice is a person.</think>\n```json\n"
            '{"entities": [{"name": "Alice", "importance": 4}]}\n```'
        )
    )
    assert h.complete().entities[0].name == "Alice"


# --- structured-output modes -------------------------------------------------------------------
def test_json_schema_mode_request(h):
    h.fake.script(FakeReply.ok(ALICE))
    h.complete()
    (req,) = h.fake.requests
    fmt = req["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "ExtractedEntities"
    assert fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"]["additionalProperties"] is False
    assert req["messages"] == MESSAGES
    assert h.fake.structures() == ["ExtractedEntities"]


def test_json_object_mode_request_carries_the_schema(fake):
    h = Harness(fake, structured_output="json_object")
    fake.script(FakeReply.ok(ALICE))
    assert h.complete().entities[0].importance == 4
    (req,) = fake.requests
    schema = req["response_format"]["schema"]
    assert req["response_format"]["type"] == "json_object"
    assert schema["title"] == "ExtractedEntities"
    item = schema["properties"]["entities"]["items"]
    assert item["properties"]["importance"]["enum"] == [1, 2, 3, 4, 5]  # grammar-friendly
    system = req["messages"][0]["content"]
    assert system.startswith("You extract entities.") and "ExtractedEntities" in system
    assert fake.structures() == ["ExtractedEntities"]


def test_tool_mode_forces_a_tool_call_and_reads_its_arguments(fake):
    h = Harness(fake, structured_output="tool")
    fake.script(FakeReply.ok(ALICE))
    assert h.complete().entities[0].name == "Alice"
    (req,) = fake.requests
    assert req["tool_choice"] == {"type": "function", "function": {"name": "ExtractedEntities"}}
    assert req["tools"][0]["function"]["name"] == "ExtractedEntities"
    assert "response_format" not in req
    assert h.rows()[0]["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "tool"])
def test_every_mode_accepts_the_fakes_default_reply(fake, mode):
    h = Harness(fake, structured_output=mode)
    assert h.complete(NodeResolutions) == NodeResolutions(entity_resolutions=[])


# --- prompt caching ----------------------------------------------------------------------------
def caching_harness(fake, model="anthropic/claude-sonnet-4.5", enabled=True, **kw):
    fake.model = model
    client = openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0)
    return Harness(
        fake,
        base_url="https://openrouter.ai/api/v1",
        model=model,
        cache_enabled=enabled,
        client=client,
        **kw,
    )


def test_caching_marks_the_last_content_part_and_counts_hits(fake):
    h = caching_harness(fake)
    fake.script(
        FakeReply.ok(ALICE, prompt_tokens=2000, completion_tokens=100, cache_write_tokens=1800),
        FakeReply.ok(
            ALICE,
            prompt_tokens=2000,
            completion_tokens=100,
            cached_tokens=1800,
            cache_read_tokens=1800,
        ),
    )
    h.complete()
    h.complete()
    msgs = fake.requests[0]["messages"]
    assert all(isinstance(m["content"], list) for m in msgs)
    assert msgs[-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert msgs[-1]["content"][-1]["text"] == "Alice met Bob."
    model = "anthropic/claude-sonnet-4.5"
    t = h.text
    assert value(t, "graph_cache_misses_total", model=model) == 1
    assert value(t, "graph_cache_hits_total", model=model) == 1
    assert value(t, "graph_cache_hit_rate") == 50.0
    assert value(t, "graph_cache_tokens_saved_total", model=model) == 1800
    assert value(t, "graph_cache_write_tokens_total", model=model) == 1800
    saved = 1800 * (3.00 - 0.30) / 1e6
    assert value(t, "graph_cache_cost_saved_total", model=model) == pytest.approx(saved)
    first, second = h.rows()
    assert first["cache_write_tokens"] == 1800
    assert first["input_cost"] == pytest.approx((200 * 3.0 + 1800 * 3.75) / 1e6)
    assert second["input_cost"] == pytest.approx((200 * 3.0 + 1800 * 0.30) / 1e6)
    assert second["cache_cost_saved"] == pytest.approx(saved)


@pytest.mark.parametrize(
    ("model", "enabled", "aggregator"),
    [
        ("anthropic/claude-sonnet-4.5", False, True),  # disabled
        ("openai/gpt-4o-mini", True, True),  # not the caching family
        ("anthropic/claude-sonnet-4.5", True, False),  # not the hosted aggregator
    ],
)
def test_caching_does_not_apply(fake, model, enabled, aggregator):
    if aggregator:
        h = caching_harness(fake, model=model, enabled=enabled)
    else:
        fake.model = model
        h = Harness(fake, model=model, cache_enabled=enabled)
    fake.script(FakeReply.ok(ALICE, cached_tokens=100))
    h.complete()
    assert fake.requests[0]["messages"] == MESSAGES
    assert not {n for n in sample_names(h.text) if n.startswith("graph_cache_hits")}
    assert not h.chat.caching


# --- logging, secrets, settings, disabled metrics ----------------------------------------------
def test_debug_line_per_request(fake, caplog):
    h = Harness(fake, log_requests=True)
    fake.script(FakeReply.ok(ALICE, prompt_tokens=1000, completion_tokens=200))
    with caplog.at_level(logging.DEBUG, logger="workbench.llm"):
        h.complete()
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    for part in (
        "prompt_tokens=1000",
        "completion_tokens=200",
        "cost=$0.00027000",
        "input_cost=$0.00015000",
        "output_cost=$0.00012000",
    ):
        assert part in line


def test_no_debug_line_without_log_requests(h, caplog):
    h.fake.script(FakeReply.ok(ALICE))
    with caplog.at_level(logging.DEBUG, logger="workbench.llm"):
        h.complete()
    assert not [r for r in caplog.records if r.levelno == logging.DEBUG]


def test_api_key_is_sent_but_never_shown(fake, caplog):
    h = Harness(fake, log_requests=True, max_retries=1)
    fake.script(FakeReply.error(500), FakeReply.ok(ALICE))
    with caplog.at_level(logging.DEBUG):
        h.complete()
    assert fake.received[0].headers.get("authorization") == "Bearer sk-secret-123"
    assert "sk-secret-123" not in repr(h.chat)
    assert "sk-secret-123" not in caplog.text
    assert "sk-secret-123" not in str(vars(h.chat))


def test_build_chat_model_from_settings(fake):
    assert build_chat_model(load_settings({}, env_file=None), metrics=Metrics()) is None
    env = chat_settings_env(
        fake, SVC_KNOWLEDGE_LLM_STRUCTURED_OUTPUT="tool", SVC_KNOWLEDGE_LLM_MAX_TOKENS="512"
    )
    chat = build_chat_model(load_settings(env, env_file=None), metrics=Metrics())
    assert isinstance(chat, CompatChatModel)
    assert (chat.model, chat.structured_output, chat.max_tokens) == ("gpt-4o-mini", "tool", 512)
    fake.script(FakeReply.ok(ALICE))
    assert chat.complete("p", MESSAGES, ExtractedEntities).entities[0].name == "Alice"
    assert fake.received[0].headers.get("authorization") == "Bearer test-key"


def test_metrics_disabled_records_rows_but_no_series(fake):
    h = Harness(fake, metrics=Metrics(enabled=False))
    fake.script(FakeReply.rate_limited(retry_after=0), FakeReply.ok(ALICE))
    h.complete()
    assert not {n for n in sample_names(h.text) if n.startswith("graph_")}
    assert len(h.rows()) == 2


def test_cost_summary_per_episode(h):
    h.fake.script(
        FakeReply.ok(ALICE, prompt_tokens=1000, completion_tokens=200),
        FakeReply.error(503),
        FakeReply.ok(ALICE, prompt_tokens=1000, completion_tokens=200),
    )
    h.complete(episode_uuid="ep-1")
    h.complete(episode_uuid="ep-2")
    summary = cost_summary(h.store, episode_uuid="ep-2")
    assert summary["calls"] == 2 and summary["failed_attempts"] == 1
    assert summary["total_cost"] == pytest.approx(0.00027)
    assert cost_summary(h.store)["prompt_tokens"] == 2000


def test_public_api_is_small_sorted_and_satisfies_the_protocol(h):
    import workbench.llm as llm

    assert llm.__all__ == sorted(llm.__all__)
    assert all(hasattr(llm, name) for name in llm.__all__)
    assert isinstance(h.chat, llm.ChatModel)


def test_requests_per_minute_throttle_uses_the_injected_sleep(fake):
    now, slept = [0.0], []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    h = Harness(fake, requests_per_minute=6, sleep=sleep, monotonic=lambda: now[0])
    for _ in range(3):
        h.complete()
    assert slept == pytest.approx([10.0, 10.0])  # burst of one, then one per 10 s


def test_concurrent_calls_are_all_counted_and_recorded(fake):
    h = Harness(fake)
    fake.set_responder(lambda req: FakeReply.ok(ALICE, prompt_tokens=10, completion_tokens=2))
    errors: list[BaseException] = []

    def work():
        try:
            for _ in range(5):
                h.complete()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert value(h.text, "graph_prompt_tokens_total", model="gpt-4o-mini") == 200
    assert cost_summary(h.store)["calls"] == 20


def test_cost_by_prompt(h):
    h.fake.script(
        FakeReply.ok(ALICE, prompt_tokens=1000, completion_tokens=0),
        FakeReply.ok(ALICE, prompt_tokens=1000, completion_tokens=0),
    )
    h.complete()
    h.chat.complete("classify", MESSAGES, ExtractedEntities)
    rows = {r["prompt_name"]: r for r in cost_by_prompt(h.store)}
    assert set(rows) == {"extract_entities", "classify"}
    assert rows["classify"]["calls"] == 1
    assert rows["classify"]["total_cost"] == pytest.approx(0.00015)
