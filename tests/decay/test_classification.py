"""Classification of importance/stability: statuses, defaults, batching, pending memories.

The chat model is a tiny in-test object implementing ``complete`` (the ChatModel protocol);
the client's wire behaviour is tested with the fake server in tests/llm.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.decay.conftest import add_entity, add_fact, row_of, sample
from workbench.decay.classification import classify_pending, classify_texts
from workbench.decay.maintenance import run_maintenance
from workbench.errors import LLMNotConfigured, LLMTimeout, StructuredOutputError
from workbench.prompts import classify_memories as prompt


class ScriptedChat:
    """Answers each call with ``answer(texts)`` or raises ``error``; remembers the calls."""

    def __init__(self, answer=None, error=None):
        self.answer = answer or (lambda texts: [(i, 4, 2) for i in range(1, len(texts) + 1)])
        self.error = error
        self.calls = []

    def complete(
        self, prompt_name, messages, response_model, *, episode_uuid=None, max_tokens=None
    ):
        lines = messages[-1]["content"].splitlines()
        self.calls.append((prompt_name, lines, response_model, episode_uuid))
        if self.error:
            raise self.error
        items = [
            {"index": i, "importance": imp, "stability": st} for i, imp, st in self.answer(lines)
        ]
        return response_model.model_validate({"classifications": items})


def test_success(metrics):
    chat = ScriptedChat()
    out = classify_texts(chat, ["User likes tea", "Meeting at 3"], metrics, episode_uuid="ep")
    assert [(c.importance, c.stability, c.status) for c in out] == [(4, 2, "success")] * 2
    assert len(chat.calls) == 1
    name, lines, model, ep = chat.calls[0]
    assert (name, model, ep) == ("classify_memories", prompt.MemoryClassifications, "ep")
    assert lines == ["MEMORY 1: User likes tea", "MEMORY 2: Meeting at 3"]
    assert sample(metrics, "knowledge_classification_requests_total", status="success") == 2.0
    assert sample(metrics, "knowledge_classification_latency_seconds_count") == 1.0


def test_fallback_without_an_llm(metrics):
    out = classify_texts(None, ["a", "b", "c"], metrics)
    assert [(c.importance, c.stability, c.status) for c in out] == [(3, 3, "fallback")] * 3
    assert sample(metrics, "knowledge_classification_requests_total", status="fallback") == 3.0
    assert sample(metrics, "knowledge_classification_latency_seconds_count") == 0.0


def test_not_configured_error_is_a_fallback(metrics):
    out = classify_texts(ScriptedChat(error=LLMNotConfigured("no LLM")), ["a"], metrics)
    assert (out[0].status, out[0].importance, out[0].stability) == ("fallback", 3, 3)


@pytest.mark.parametrize(
    "error", [LLMTimeout("slow"), StructuredOutputError("MemoryClassifications", "bad json")]
)
def test_failure_uses_defaults(metrics, error):
    out = classify_texts(ScriptedChat(error=error), ["a", "b"], metrics)
    assert [(c.importance, c.stability, c.status) for c in out] == [(3, 3, "failure")] * 2
    assert out[0].error and type(error).__name__ in out[0].error
    assert sample(metrics, "knowledge_classification_requests_total", status="failure") == 2.0
    assert sample(metrics, "knowledge_classification_latency_seconds_count") == 1.0


def test_a_memory_left_out_of_the_reply_fails_alone(metrics):
    chat = ScriptedChat(answer=lambda texts: [(2, 5, 5), (2, 1, 1), (9, 1, 1)])
    out = classify_texts(chat, ["a", "b"], metrics)
    assert [(c.importance, c.stability, c.status) for c in out] == [
        (3, 3, "failure"),
        (5, 5, "success"),
    ]


def test_batches(metrics):
    chat = ScriptedChat()
    out = classify_texts(chat, [f"t{i}" for i in range(45)], metrics, batch_size=20)
    assert len(out) == 45 and [len(c[1]) for c in chat.calls] == [20, 20, 5]
    assert all(c.status == "success" for c in out)


def test_schema_rejects_out_of_range_scores():
    with pytest.raises(ValidationError):
        prompt.MemoryClassifications.model_validate(
            {"classifications": [{"index": 1, "importance": 6, "stability": 3}]}
        )


def test_long_texts_are_clipped():
    lines = prompt.build_messages(["x" * 5000])[-1]["content"]
    assert len(lines) < prompt.MAX_TEXT_CHARS + 20


def test_classify_pending_writes_scores_and_the_run_makes_them_permanent(
    store, policy, metrics, clock
):
    now = clock()
    ent = add_entity(store, now, status=None, name="User")
    fact = add_fact(store, now, ent, ent, status=None, text="User is allergic to penicillin")
    done = add_entity(store, now, status="success", importance=2, stability=2)
    gone = add_entity(store, now, status=None, state="SOFT_DELETED", soft_deleted_days_ago=1)
    chat = ScriptedChat(answer=lambda texts: [(i, 5, 5) for i in range(1, len(texts) + 1)])
    counts = classify_pending(store, chat, metrics, limit=10)
    assert counts == {"success": 2, "failure": 0, "fallback": 0, "classified": 2}
    assert (row_of(store, fact)["importance"], row_of(store, fact)["classification_status"]) == (
        5,
        "success",
    )
    assert row_of(store, done)["importance"] == 2
    assert row_of(store, gone)["classification_status"] is None
    assert any("allergic to penicillin" in line for line in chat.calls[0][1])
    report = run_maintenance(store, policy, metrics, clock)
    assert report.transitions == {("ACTIVE", "PERMANENT"): 2}


def test_classify_pending_failure_keeps_values_and_is_retried(store, metrics, clock):
    ent = add_entity(store, clock(), status=None, importance=5, stability=1)
    counts = classify_pending(store, ScriptedChat(error=LLMTimeout("slow")), metrics)
    assert counts["failure"] == 1
    row = row_of(store, ent)
    assert (row["importance"], row["stability"], row["classification_status"]) == (5, 1, "failure")
    counts = classify_pending(store, ScriptedChat(), metrics)
    assert counts["success"] == 1 and row_of(store, ent)["classification_status"] == "success"


def test_classify_pending_without_an_llm_does_nothing(store, metrics, clock):
    ent = add_entity(store, clock(), status=None)
    assert classify_pending(store, None, metrics)["classified"] == 0
    assert row_of(store, ent)["classification_status"] is None


def test_classify_pending_respects_the_limit(store, metrics, clock):
    for _ in range(5):
        add_entity(store, clock(), status=None)
    chat = ScriptedChat()
    assert classify_pending(store, chat, metrics, limit=3, batch_size=2)["classified"] == 3
    assert [len(c[1]) for c in chat.calls] == [2, 1]
