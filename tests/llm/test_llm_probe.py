"""The LLM's start-up probe: one small structured request whose outcome is the ``llm`` health
(against the fake chat-completions server, and an address where nothing listens)."""

from __future__ import annotations

import socket
import time

import pytest

from tests.fakes import FakeReply
from tests.llm.test_llm_client import ExtractedEntities, Harness
from workbench.errors import StructuredOutputError
from workbench.llm import CompatChatModel
from workbench.metrics import Metrics
from workbench.store.llm_calls import list_llm_calls


@pytest.fixture
def h(fake_llm):
    return Harness(fake_llm)


def test_a_usable_answer_is_ok_and_accounted(h):
    assert h.chat.probe() is True
    status = h.chat.health.status()
    assert status["state"] == "ok" and status["last_success_at"] is not None
    assert h.fake.structures() == ["ProbeReply"]
    assert h.fake.requests[0]["max_tokens"] <= 256
    rows = list_llm_calls(h.store)
    assert [(r["prompt_name"], r["status"]) for r in rows] == [("health_probe", "success")]


@pytest.mark.parametrize(
    ("reply", "error_type"),
    [
        (FakeReply.text("Sure! Here you go: ok"), "StructuredOutputError"),
        (FakeReply.schema_echo(), "SchemaEchoError"),
        (FakeReply.error(401, "invalid api key"), "AuthenticationError"),
        (FakeReply.server_error(), "InternalServerError"),
    ],
)
def test_an_unusable_answer_or_a_refusal_is_failing_at_once(h, reply, error_type):
    h.fake.script(reply)
    assert h.chat.probe() is False
    status = h.chat.health.status()
    assert status["state"] == "failing" and status["last_error_type"] == error_type
    assert len(h.fake.requests) == 1  # no retries: the probe only looks
    assert h.sleeps == []


def test_nothing_listening_is_failing_within_the_timeout():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    chat = CompatChatModel(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=None, model="m", metrics=Metrics()
    )
    started = time.monotonic()
    assert chat.probe(timeout=5) is False
    assert time.monotonic() - started < 5
    assert chat.health.status()["last_error_type"] == "APIConnectionError"


def test_a_structured_output_failure_of_a_real_call_counts_as_failing(h):
    h.fake.script(FakeReply.text("no JSON here"))
    with pytest.raises(StructuredOutputError):
        h.complete(ExtractedEntities)
    assert h.chat.health.status()["state"] == "failing"
    h.complete(ExtractedEntities)  # the next usable answer: ok again
    assert h.chat.health.status()["state"] == "ok"
