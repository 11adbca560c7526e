"""The daily LLM budget of a group: at its limit its episodes wait (saying "daily budget"),
other groups go on, and the next UTC day they are extracted."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from workbench.config import load_settings
from workbench.facade import Workbench
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import chat_settings_env
from workbench.metrics import Metrics


class Clock:
    def __init__(self, now: datetime):
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def spend(wb: Workbench, episode_uuid: str, usd: float, when: datetime) -> None:
    """One LLM call of ``usd`` for an episode (as the chat client records it)."""
    wb.store.execute(
        "INSERT INTO llm_calls (ts, prompt_name, model, episode_uuid, status, total_cost) "
        "VALUES (?, 'extract', 'm', ?, 'success', ?)",
        [when, episode_uuid, usd],
    )


def statuses(wb: Workbench, group: str) -> list[tuple[str, str | None]]:
    return [(e["status"], e["status_detail"]) for e in wb.get_episodes([group], 100)["episodes"]]


def test_a_group_at_its_daily_budget_waits_and_the_others_go_on(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    env = {**chat_settings_env(fake_llm), "SVC_KNOWLEDGE_DB_PATH": ":memory:"}
    settings = load_settings({**env, "SVC_KNOWLEDGE_GROUP_DAILY_BUDGET_USD": "0.5"}, env_file=None)
    clock = Clock(datetime(2026, 3, 2, 15, 0, tzinfo=UTC))
    metrics = Metrics()
    wb = Workbench.open(settings, embedder=hash_embedder, clock=clock, metrics=metrics)
    try:
        first = wb.add_memory("a", "Alice works at Acme.", group_id="spender")["episode_uuid"]
        spend(wb, first, 0.3, clock.now - timedelta(days=1))  # yesterday's cost does not count
        spend(wb, first, 0.6, clock.now - timedelta(hours=1))
        wb.add_memory("b", "Bob works at Beta.", group_id="spender")
        wb.add_memory("c", "Carol works at Gamma.", group_id="thrifty")
        assert wb.process_pending() == 1
        assert statuses(wb, "thrifty") == [("done", None)]
        waiting = statuses(wb, "spender")
        assert [s for s, _ in waiting] == ["queued", "queued"]
        assert all("daily budget" in detail for _, detail in waiting)
        assert metrics.groups_at_budget._value.get() == 1
        clock.now += timedelta(days=1)  # a new UTC day: the group resumes
        wb.queue.budget.every = 0
        assert wb.process_pending() == 2
        assert [s for s, _ in statuses(wb, "spender")] == ["done", "done"]
        assert metrics.groups_at_budget._value.get() == 0
    finally:
        wb.close()


def test_no_budget_no_hold(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    env = {**chat_settings_env(fake_llm), "SVC_KNOWLEDGE_DB_PATH": ":memory:"}
    wb = Workbench.open(load_settings(env, env_file=None), embedder=hash_embedder)
    try:
        episode = wb.add_memory("a", "Alice works at Acme.", group_id="g")["episode_uuid"]
        spend(wb, episode, 1000.0, wb.clock())
        assert wb.queue.budget is None and wb.process_pending() == 1
    finally:
        wb.close()
