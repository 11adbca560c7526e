"""Error classification (real openai exceptions from the fake server), backoff, throttle,
caching rules."""

from __future__ import annotations

import random

import openai
import pytest

from tests.fakes import FakeReply
from workbench.errors import LLMRateLimited, LLMTimeout, LLMTransientError
from workbench.llm.caching import (
    cache_tokens,
    caching_applies,
    is_aggregator,
    is_caching_family,
    to_multipart,
)
from workbench.llm.retry import (
    ErrorInfo,
    RequestThrottle,
    backoff_delay,
    classify_error,
    exhausted_error,
)


def _error_from(fake_llm, reply: FakeReply, timeout: float = 5.0) -> openai.OpenAIError:
    fake_llm.script(reply)
    client = openai.OpenAI(base_url=fake_llm.base_url, api_key="k", max_retries=0, timeout=timeout)
    with pytest.raises(openai.OpenAIError) as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    return info.value


@pytest.mark.parametrize(
    ("reply", "error_type", "transient", "retry_after"),
    [
        (FakeReply.rate_limited(retry_after=3), "rate_limit", True, 3.0),
        (FakeReply.rate_limited(retry_after=None), "rate_limit", True, None),
        (FakeReply.rate_limited(retry_after=0.25), "rate_limit", True, 0.25),
        (FakeReply.error(429, headers={"retry-after-ms": "1500"}), "rate_limit", True, 1.5),
        (FakeReply.server_error(), "InternalServerError", True, None),
        (FakeReply.server_error(503), "InternalServerError", True, None),
        (FakeReply.error(408), "APIStatusError", True, None),
        (FakeReply.error(400), "BadRequestError", False, None),
        (FakeReply.error(401), "AuthenticationError", False, None),
        (FakeReply.error(404), "NotFoundError", False, None),
        (FakeReply.error(422), "UnprocessableEntityError", False, None),
    ],
)
def test_classify_status_errors(fake_llm, reply, error_type, transient, retry_after):
    info = classify_error(_error_from(fake_llm, reply))
    assert (info.error_type, info.transient, info.retry_after) == (
        error_type,
        transient,
        retry_after,
    )
    assert info.message.startswith(f"HTTP {reply.status}")


def test_classify_timeout(fake_llm):
    info = classify_error(_error_from(fake_llm, FakeReply.slow(2.0), timeout=0.1))
    assert (info.error_type, info.transient) == ("timeout", True)


def test_classify_connection_error(fake_llm):
    url = fake_llm.base_url
    fake_llm.stop()
    client = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
    with pytest.raises(openai.APIConnectionError) as exc:
        client.chat.completions.create(model="m", messages=[])
    assert classify_error(exc.value).error_type == "APIConnectionError"
    assert classify_error(exc.value).transient


def test_other_exceptions_are_final():
    assert classify_error(ValueError("x")) == ErrorInfo("ValueError", False, None, "x")


@pytest.mark.parametrize(
    ("error_type", "cls", "queue_category"),
    [
        ("rate_limit", LLMRateLimited, "RateLimitError"),
        ("timeout", LLMTimeout, "TimeoutError"),
        ("InternalServerError", LLMTransientError, "ConnectionError"),
        ("APIConnectionError", LLMTransientError, "ConnectionError"),
    ],
)
def test_exhausted_errors_carry_the_queue_category(error_type, cls, queue_category):
    err = exhausted_error(ErrorInfo(error_type, True, None, "m"), "detail")
    assert type(err) is cls and err.error_type == queue_category and str(err) == "detail"


def test_backoff_honours_retry_after_capped_at_a_minute():
    assert backoff_delay(1, 7.0) == 7.0
    assert backoff_delay(3, 0.0) == 0.0
    assert backoff_delay(1, 600.0) == 60.0


def test_backoff_is_exponential_with_equal_jitter():
    rng = random.Random(1)
    for retry, (low, high) in enumerate([(0.25, 0.5), (0.5, 1), (1, 2), (2, 4), (4, 8)], 1):
        for _ in range(50):
            assert low <= backoff_delay(retry, rng=rng) <= high
    assert 15 <= backoff_delay(20, rng=rng) <= 30  # capped


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def test_throttle_allows_a_burst_then_spaces_requests():
    t = FakeTime()
    throttle = RequestThrottle(60, sleep=t.sleep, monotonic=t.monotonic)
    assert throttle.capacity == 10
    waits = [throttle.acquire() for _ in range(13)]
    assert waits[:10] == [0.0] * 10
    assert waits[10:] == pytest.approx([1.0, 1.0, 1.0])
    assert t.now == pytest.approx(3.0)


def test_throttle_refills_over_time():
    t = FakeTime()
    throttle = RequestThrottle(120, sleep=t.sleep, monotonic=t.monotonic, burst=1)
    assert throttle.acquire() == 0.0
    assert throttle.acquire() == pytest.approx(0.5)
    t.now += 10
    assert throttle.acquire() == 0.0


def test_throttle_disabled():
    t = FakeTime()
    throttle = RequestThrottle(0, sleep=t.sleep, monotonic=t.monotonic)
    assert [throttle.acquire() for _ in range(1000)] == [0.0] * 1000 and not t.slept


# --- caching rules -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://openrouter.ai/api/v1", True),
        ("https://eu.openrouter.ai/api/v1", True),
        ("https://api.openai.com/v1", False),
        ("http://127.0.0.1:8080/v1", False),
        ("https://openrouter.ai.evil.example/v1", False),
        (None, False),
    ],
)
def test_is_aggregator(url, expected):
    assert is_aggregator(url) is expected


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("anthropic/claude-sonnet-4.5", True),
        ("claude-3-5-haiku", True),
        ("anthropic/claude-haiku-4.5", True),
        ("openai/gpt-4o", False),
        ("google/gemini-2.5-pro", False),
    ],
)
def test_is_caching_family(model, expected):
    assert is_caching_family(model) is expected


def test_caching_applies_only_with_all_three():
    url, model = "https://openrouter.ai/api/v1", "anthropic/claude-sonnet-4.5"
    assert caching_applies(True, url, model)
    assert not caching_applies(False, url, model)
    assert not caching_applies(True, "https://api.anthropic.com/v1", model)
    assert not caching_applies(True, url, "openai/gpt-4o")


def test_to_multipart_marks_the_last_part_and_the_system_prompt():
    msgs = [
        {"role": "system", "content": "Stable."},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    out = to_multipart(msgs)
    assert out[0]["content"] == [
        {"type": "text", "text": "Stable.", "cache_control": {"type": "ephemeral"}}
    ]
    assert out[1]["content"][0] == {"type": "text", "text": "a"}
    assert out[1]["content"][-1] == {
        "type": "text",
        "text": "b",
        "cache_control": {"type": "ephemeral"},
    }
    assert msgs[1]["content"][-1] == {"type": "text", "text": "b"}  # input untouched


def test_to_multipart_spec_only_marker():
    out = to_multipart(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], mark_system=False
    )
    assert "cache_control" not in out[0]["content"][0]
    assert out[1]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_cache_tokens_from_every_field():
    assert cache_tokens({}) == (0, 0)
    assert cache_tokens({"prompt_tokens_details": {"cached_tokens": 5}}) == (5, 0)
    assert cache_tokens({"cache_read_tokens": 7, "cache_write_tokens": 3}) == (7, 3)
    assert cache_tokens(
        {"prompt_tokens_details": {"cached_tokens": None, "cache_write_tokens": 9}}
    ) == (0, 9)
