"""/health/decay data, recovery of soft-deleted memories, the scheduler."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.decay.conftest import add_entity, add_fact, row_of, state_of
from workbench.decay.maintenance import (
    MaintenanceScheduler,
    decay_health,
    recover_soft_deleted,
    run_maintenance,
)
from workbench.errors import Conflict, InvalidInput, NotFound, StoreError
from workbench.store import maintenance as msql


def health(store, policy, clock, **kw):
    return decay_health(store, policy, clock, 24.0, **kw)


def test_health_has_the_spec_fields(store, policy, metrics, clock):
    run_maintenance(store, policy, metrics, clock)
    data = health(store, policy, clock)
    json.dumps(data)
    assert data["status"] == "healthy"
    assert data["decay_enabled"] is True
    assert data["metrics_endpoint"] == "/metrics"
    assert data["last_maintenance"].startswith("2026-01-01T00:00:00") and data[
        "last_maintenance"
    ].endswith("Z")
    assert data["next_scheduled"] == "2026-01-02T00:00:00Z"
    assert data["last_run"]["status"] == "success"
    assert set(data["memories_by_state"]) == {
        "ACTIVE",
        "DORMANT",
        "ARCHIVED",
        "EXPIRED",
        "SOFT_DELETED",
        "PERMANENT",
    }


def test_health_before_the_first_run(store, policy, clock):
    data = health(store, policy, clock)
    assert (data["status"], data["last_maintenance"], data["last_run"]) == ("healthy", None, None)
    started = clock()
    clock.advance(days=1, seconds=599)
    assert health(store, policy, clock, started_at=started)["status"] == "healthy"
    clock.advance(seconds=2)
    data = health(store, policy, clock, started_at=started)
    assert data["status"] == "degraded" and "no maintenance run" in data["reason"]


def test_health_becomes_degraded_when_overdue_and_healthy_again(store, policy, metrics, clock):
    run_maintenance(store, policy, metrics, clock)
    clock.advance(days=1, seconds=600)
    assert health(store, policy, clock)["status"] == "healthy"  # within the 10 min grace
    clock.advance(seconds=1)
    data = health(store, policy, clock)
    assert data["status"] == "degraded" and "overdue" in data["reason"]
    run_maintenance(store, policy, metrics, clock)
    assert health(store, policy, clock)["status"] == "healthy"


def test_health_is_degraded_after_a_run_over_ten_minutes(store, policy, clock):
    msql._insert_run(
        store, 7, clock(), {"duration": 601.0, "scores_updated": 1, "transitions": {}, "purged": 0}
    )
    data = health(store, policy, clock)
    assert data["status"] == "degraded" and "10 minutes" in data["reason"]


def test_health_is_unhealthy_after_a_failure_until_a_success(
    store, policy, metrics, clock, monkeypatch
):
    monkeypatch.setattr(msql, "_purge", lambda *a, **k: 1 / 0)
    with pytest.raises(StoreError):
        run_maintenance(store, policy, metrics, clock)
    data = health(store, policy, clock)
    assert data["status"] == "unhealthy" and "ZeroDivisionError" in data["reason"]
    assert data["last_run"]["status"] == "failure" and data["last_success"] is None
    monkeypatch.undo()
    clock.advance(seconds=5)
    run_maintenance(store, policy, metrics, clock)
    assert health(store, policy, clock)["status"] == "healthy"


def test_health_when_decay_is_disabled(store, policy, clock):
    data = health(store, policy, clock, enabled=False)
    assert (data["status"], data["decay_enabled"], data["next_scheduled"]) == (
        "healthy",
        False,
        None,
    )


def test_health_counts_by_state(store, policy, metrics, clock):
    add_entity(store, clock())
    add_entity(store, clock(), state="SOFT_DELETED", soft_deleted_days_ago=3)
    data = health(store, policy, clock)
    assert data["memories_by_state"]["ACTIVE"] == 1
    assert data["awaiting_purge"] == 1 and data["memories_total"] == 1


# --- recovery ---------------------------------------------------------------------------
def test_recover_soft_deleted_entity_and_fact(store, policy, metrics, clock):
    ent = add_entity(store, clock(), state="SOFT_DELETED", soft_deleted_days_ago=30, days_old=2000)
    fact = add_fact(store, clock(), ent, ent, state="SOFT_DELETED", soft_deleted_days_ago=1)
    out = recover_soft_deleted(store, ent, clock)
    assert out == {
        "uuid": ent,
        "kind": "entity",
        "from_state": "SOFT_DELETED",
        "to_state": "ARCHIVED",
        "recovered_at": "2026-01-01T00:00:00Z",
    }
    assert recover_soft_deleted(store, fact, clock)["kind"] == "fact"
    row = row_of(store, ent)
    assert (row["lifecycle_state"], row["soft_deleted"]) == ("ARCHIVED", False)
    # the decay clock restarts: the next run keeps it ARCHIVED instead of expiring it again
    clock.advance(days=1)
    run_maintenance(store, policy, metrics, clock)
    assert state_of(store, ent) == "ARCHIVED" and state_of(store, fact) == "ARCHIVED"


def test_recover_errors(store, clock):
    active = add_entity(store, clock())
    with pytest.raises(NotFound, match="no entity or fact with uuid 'nope'"):
        recover_soft_deleted(store, "nope", clock)
    with pytest.raises(InvalidInput, match="is ACTIVE, not SOFT_DELETED"):
        recover_soft_deleted(store, active, clock)
    with pytest.raises(InvalidInput, match="non-empty"):
        recover_soft_deleted(store, " ", clock)


def test_purged_memory_cannot_be_recovered(store, policy, metrics, clock):
    uuid = add_entity(store, clock(), state="SOFT_DELETED", soft_deleted_days_ago=91)
    run_maintenance(store, policy, metrics, clock)
    with pytest.raises(NotFound, match="purged"):
        recover_soft_deleted(store, uuid, clock)


# --- the scheduler ------------------------------------------------------------------------
def test_scheduler_runs_first_after_its_delay_and_stops(store, policy, metrics, clock):
    add_entity(store, clock(), days_old=40)
    sched = MaintenanceScheduler(
        store, policy, metrics, clock, interval_hours=1000, first_run_seconds=0
    )
    sched.start()
    try:
        assert sched.wait_for_runs(1, timeout=20)
        assert sched.last_report.status == "success"
        assert sched.next_scheduled == clock() + timedelta(hours=1000)
        assert sched.health()["status"] == "healthy"
    finally:
        sched.stop()
    assert not sched.running and sched.next_scheduled is None


def test_scheduler_run_now_and_disabled_schedule(store, policy, metrics, clock):
    sched = MaintenanceScheduler(store, policy, metrics, clock, enabled=False)
    sched.start()
    assert not sched.running
    assert sched.run_now(dry_run=True).dry_run is True
    report = sched.run_now()
    assert report.run_id is not None and sched.last_report is report
    assert sched.health()["decay_enabled"] is False


def test_scheduler_next_tick_reported_before_first_run(store, policy, metrics, clock):
    sched = MaintenanceScheduler(store, policy, metrics, clock, first_run_seconds=3600)
    sched.start()
    try:
        data = decay_health(store, policy, clock, 24.0, scheduler=sched)
        assert data["next_scheduled"] == "2026-01-01T01:00:00Z"
        assert data["status"] == "healthy"
    finally:
        sched.stop()


def test_scheduler_run_now_conflicts_with_a_run_in_progress(
    store, policy, metrics, clock, monkeypatch
):
    sched = MaintenanceScheduler(store, policy, metrics, clock)
    from workbench.decay import maintenance

    lock = maintenance._run_lock(store)
    lock.acquire()
    try:
        with pytest.raises(Conflict):
            sched.run_now()
        assert maintenance.maintenance_running(store)
    finally:
        lock.release()


def test_scheduler_from_settings(store, metrics, clock):
    from workbench.config import load_settings

    s = load_settings(
        environ={
            "SVC_KNOWLEDGE_MAINTENANCE_INTERVAL_HOURS": "6",
            "SVC_KNOWLEDGE_MAINTENANCE_FIRST_RUN_SECONDS": "5",
        },
        env_file=None,
    )
    sched = MaintenanceScheduler.from_settings(store, s, metrics, clock)
    assert (sched.interval_hours, sched.first_run_seconds, sched.enabled) == (6.0, 5.0, True)


def test_scheduler_start_sets_the_gauges_before_the_first_run(store, policy, metrics, clock):
    from tests.decay.conftest import sample

    add_entity(store, clock(), state="SOFT_DELETED", soft_deleted_days_ago=1)
    add_entity(store, clock(), importance=5)
    sched = MaintenanceScheduler(store, policy, metrics, clock, first_run_seconds=3600)
    sched.start()
    sched.stop()
    assert sample(metrics, "knowledge_memories_by_state", state="SOFT_DELETED") == 1.0
    assert sample(metrics, "knowledge_memories_total") == 1.0
    assert sample(metrics, "knowledge_importance_avg") == 5.0


def test_scheduler_hooks_run_around_real_runs(store, policy, metrics, clock):
    calls = []

    class Index:  # the search engine's side, as the Publisher offers it
        def __enter__(self):
            calls.append("gate")

        def __exit__(self, *exc):
            calls.append("ungate")

        def before_maintenance(self):
            calls.append("before")

        def states_changed(self):
            calls.append("after")
            raise RuntimeError("index gone")

    sched = MaintenanceScheduler(store, policy, metrics, clock, index=Index())
    sched.run_now(dry_run=True)
    assert calls == ["before", "gate", "ungate"]
    assert sched.run_now().status == "success"  # a failing update is logged, not raised
    assert calls[3:] == ["before", "gate", "after", "ungate"]
