"""What the LLM calls observed: ok, failing since when with what, or down."""

from datetime import timedelta

from workbench.clock import ManualClock
from workbench.llm.health import LLMHealth


def test_states_follow_the_outcomes_of_the_calls():
    clock = ManualClock()
    health = LLMHealth(clock)
    assert health.status()["state"] == "ok" and health.available
    health.failed("APIConnectionError", "Connection error.")
    started = clock()
    clock.advance(seconds=5)
    health.failed("APIConnectionError", "Connection refused by Bearer sk-abcdefghijklmnop")
    status = health.status()
    assert status["state"] == "failing" and status["consecutive_failures"] == 2
    assert status["failing_since"] == started.isoformat()
    assert status["last_error_type"] == "APIConnectionError"
    assert "sk-abcdefghijklmnop" not in status["last_error"]  # scrubbed
    health.succeeded()
    assert health.status()["state"] == "ok" and health.status()["last_error"] is None
    assert health.status()["last_success_at"] == (started + timedelta(seconds=5)).isoformat()


def test_down_wins_until_marked_up():
    health = LLMHealth()
    health.mark_down("the local model server exited with code -9; restarting it")
    assert not health.available and health.status()["state"] == "down"
    health.succeeded()
    assert health.status()["state"] == "down"
    health.mark_up()
    assert health.available and health.status()["state"] == "ok"
