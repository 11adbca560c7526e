"""The LLM profiles: the pure parts (budgets, prompts, the timeout model) and the local profile
through the real ``openai`` client against the fake chat-completions server."""

from __future__ import annotations

import threading
import time

import pytest

from tests.fakes import FakeReply
from workbench.config import load_settings
from workbench.fakes.chat_server import chat_settings_env
from workbench.llm import build_chat_model
from workbench.llm.profile import HOSTED, LOCAL, PROFILES, TimeoutModel
from workbench.metrics import Metrics
from workbench.prompts import compact, extract_edges, extract_entities
from workbench.store import Store

EPISODE = {
    "source": "text",
    "reference_time": __import__("datetime").datetime(2025, 3, 10),
    "name": "n",
    "source_description": "",
    "body": "Maria Keller works at Acme.",
}


# --- pure parts --------------------------------------------------------------------------
def test_profiles_are_named_and_hosted_changes_nothing():
    assert set(PROFILES) == {"hosted", "local"}
    messages = extract_entities.build_messages(EPISODE, [])
    assert HOSTED.messages(extract_entities.PROMPT_NAME, messages) is messages
    assert HOSTED.budget(extract_entities.PROMPT_NAME, 4096) == 4096


def test_local_profile_swaps_in_the_short_system_prompt_and_keeps_the_episode():
    for name, messages in (
        (extract_entities.PROMPT_NAME, extract_entities.build_messages(EPISODE, [])),
        (extract_edges.PROMPT_NAME, extract_edges.build_messages(EPISODE, [], [])),
    ):
        short = LOCAL.messages(name, messages)
        assert short[0] == {"role": "system", "content": compact.SYSTEMS[name]}
        assert short[1:] == messages[1:]
        assert len(short[0]["content"]) < len(messages[0]["content"]) / 3


def test_prompts_without_a_short_version_are_left_alone():
    messages = [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]
    assert LOCAL.messages("resolve_nodes", messages) == messages
    assert LOCAL.messages(extract_entities.PROMPT_NAME, messages[1:]) == messages[1:]


def test_local_budget_is_bounded_by_the_longest_valid_answer():
    bound = compact.ANSWER_TOKENS[extract_entities.PROMPT_NAME]
    assert LOCAL.budget(extract_entities.PROMPT_NAME, 4096) == bound
    assert LOCAL.budget(extract_entities.PROMPT_NAME, 100) == 100  # the setting still caps it
    assert LOCAL.budget("classify_memories", 4096) == 4096


def test_the_short_prompts_examples_are_valid_answers():
    """Each short prompt's example answer validates against its response model."""
    import json
    import re

    for name, model in (
        (extract_entities.PROMPT_NAME, extract_entities.ExtractedEntities),
        (extract_edges.PROMPT_NAME, extract_edges.ExtractedEdges),
    ):
        example = compact.SYSTEMS[name].split("->", 1)[1]
        parsed = json.loads(re.sub(r"\s+", " ", example))
        assert model.model_validate(parsed)


def test_timeout_model_starts_at_the_floor_and_grows_with_the_shown_speed():
    model = TimeoutModel(floor=60.0)
    assert model.timeout(768) == 60.0
    model.observe(latency=20.0, completion_tokens=100)  # 0.2 s a token
    assert model.timeout(768) == pytest.approx(2 * 768 * 0.2)
    assert model.timeout(10) == 60.0  # never below the floor
    model.observe(latency=1.0, completion_tokens=100)  # faster now: the average moves
    assert model.timeout(768) < 2 * 768 * 0.2
    model.observe(latency=5.0, completion_tokens=0)  # nothing to learn from
    before = model.timeout(768)
    model.timed_out(latency=before, budget=768)
    assert model.timeout(768) >= 2 * before


# --- through the wire ----------------------------------------------------------------------
def local_chat(fake_llm, **env):
    settings = load_settings(
        chat_settings_env(
            fake_llm,
            SVC_KNOWLEDGE_LLM_PROFILE="local",
            SVC_KNOWLEDGE_LLM_REQUESTS_PER_MINUTE="0",
            **env,
        ),
        env_file=None,
    )
    return build_chat_model(settings, metrics=Metrics(enabled=True), store=Store.open())


def test_local_profile_sends_the_short_prompt_with_a_bounded_budget(fake_llm):
    chat = local_chat(fake_llm)
    fake_llm.script(FakeReply.ok({"entities": []}))
    chat.complete(
        extract_entities.PROMPT_NAME,
        extract_entities.build_messages(EPISODE, []),
        extract_entities.ExtractedEntities,
    )
    (request,) = fake_llm.requests
    assert request["messages"][0]["content"] == compact.EXTRACT_ENTITIES
    assert "Maria Keller works at Acme." in request["messages"][1]["content"]
    assert request["max_tokens"] == compact.ANSWER_TOKENS[extract_entities.PROMPT_NAME]


def peak_in_flight(chat, fake_llm, calls: int, seconds: float) -> int:
    """The most requests the fake server held at once while ``calls`` threads called
    ``chat`` together (each answered after ``seconds``)."""
    inflight, peak, lock = [0], [0], threading.Lock()

    def respond(request):
        with lock:
            inflight[0] += 1
            peak[0] = max(peak[0], inflight[0])
        time.sleep(seconds)
        with lock:
            inflight[0] -= 1
        return {"entities": []}

    fake_llm.set_responder(respond)
    messages = extract_entities.build_messages(EPISODE, [])
    threads = [
        threading.Thread(
            target=chat.complete,
            args=(extract_entities.PROMPT_NAME, messages, extract_entities.ExtractedEntities),
        )
        for _ in range(calls)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(fake_llm.requests) == calls
    return peak[0]


def test_local_profile_sends_one_request_at_a_time(fake_llm):
    """Four threads call at once: a single-slot server sees them one after another."""
    assert peak_in_flight(local_chat(fake_llm), fake_llm, calls=4, seconds=0.15) == 1


def test_hosted_profile_sends_requests_in_parallel(fake_llm):
    settings = load_settings(
        chat_settings_env(fake_llm, SVC_KNOWLEDGE_LLM_REQUESTS_PER_MINUTE="0"), env_file=None
    )
    chat = build_chat_model(settings, metrics=Metrics(enabled=True), store=Store.open())
    assert peak_in_flight(chat, fake_llm, calls=3, seconds=0.3) > 1
    assert fake_llm.requests[0]["messages"][0]["content"] == extract_entities.SYSTEM


def test_local_profile_waits_longer_for_a_server_that_has_shown_it_is_slow(fake_llm):
    """A fixed 1 s timeout would cut the second call (1.5 s); the first one showed 0.01 s a
    token, so the local profile waits up to 2 x budget x 0.01 s."""
    chat = local_chat(
        fake_llm, SVC_KNOWLEDGE_LLM_TIMEOUT_SECONDS="1", SVC_KNOWLEDGE_LLM_MAX_RETRIES="0"
    )
    fake_llm.script(
        FakeReply.slow(0.5, {"entities": []}, completion_tokens=50),
        FakeReply.slow(1.5, {"entities": []}, completion_tokens=50),
    )
    messages = extract_entities.build_messages(EPISODE, [])
    for _ in range(2):
        chat.complete(extract_entities.PROMPT_NAME, messages, extract_entities.ExtractedEntities)
    assert len(fake_llm.requests) == 2
