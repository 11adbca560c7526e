"""Maintenance runs on a real DuckDB store with a ManualClock (no sleeping)."""

from __future__ import annotations

import threading

import pytest

from tests.decay.conftest import (
    add_entity,
    add_fact,
    row_of,
    sample,
    snapshot,
    state_of,
)
from workbench.decay.maintenance import run_maintenance
from workbench.errors import Conflict, StoreError
from workbench.store import maintenance as msql


def run(store, policy, metrics, clock, **kw):
    return run_maintenance(store, policy, metrics, clock, **kw)


def test_a_memory_moves_through_every_state_as_time_passes(store, policy, metrics, clock):
    uuid = add_entity(store, clock())
    seen = []
    for days in (10, 20, 60, 600, 1, 89.9):
        clock.advance(days=days)
        run(store, policy, metrics, clock)
        seen.append(state_of(store, uuid))
    assert seen == ["ACTIVE", "DORMANT", "ARCHIVED", "EXPIRED", "SOFT_DELETED", "SOFT_DELETED"]
    clock.advance(days=0.1)  # 90 days after soft_deleted_at
    report = run(store, policy, metrics, clock)
    assert state_of(store, uuid) is None and report.purged == 1
    assert store.fetchone("SELECT count(*) FROM entity_embeddings WHERE uuid = ?", [uuid])[0] == 0


def test_one_run_takes_a_memory_as_far_as_its_age_implies(store, policy, metrics, clock):
    old = add_entity(store, clock(), days_old=1000)
    report = run(store, policy, metrics, clock)
    assert state_of(store, old) == "EXPIRED"
    assert report.transitions == {
        ("ACTIVE", "DORMANT"): 1,
        ("DORMANT", "ARCHIVED"): 1,
        ("ARCHIVED", "EXPIRED"): 1,
    }
    history = store.fetchall(
        "SELECT from_state, to_state, run_id FROM decay_history WHERE memory_uuid = ?", [old]
    )
    assert [(a, b) for a, b, _ in history] == [
        ("ACTIVE", "DORMANT"),
        ("DORMANT", "ARCHIVED"),
        ("ARCHIVED", "EXPIRED"),
    ]
    assert {r for _, _, r in history} == {report.run_id}
    for a, b in report.transitions:
        assert (
            sample(metrics, "knowledge_lifecycle_transitions_total", from_state=a, to_state=b)
            == 1.0
        )


def test_facts_decay_too(store, policy, metrics, clock):
    a, b = add_entity(store, clock()), add_entity(store, clock())
    fact = add_fact(store, clock(), a, b, days_old=100)
    run(store, policy, metrics, clock)
    assert state_of(store, fact) == "ARCHIVED"
    assert row_of(store, fact)["decay_score"] == pytest.approx(1 - 0.5 ** (100 / 180))


def test_last_access_counts_instead_of_creation(store, policy, metrics, clock):
    uuid = add_entity(store, clock(), days_old=400, accessed_days_ago=5)
    run(store, policy, metrics, clock)
    assert state_of(store, uuid) == "ACTIVE"
    assert row_of(store, uuid)["decay_score"] == pytest.approx(1 - 0.5 ** (5 / 180))


def test_permanent_memories_never_decay(store, policy, metrics, clock):
    uuid = add_entity(store, clock(), importance=5, stability=4, days_old=3000)
    report = run(store, policy, metrics, clock)
    assert report.transitions == {("ACTIVE", "PERMANENT"): 1}
    for _ in range(5):
        clock.advance(days=400)
        run(store, policy, metrics, clock)
        row = row_of(store, uuid)
        assert (row["lifecycle_state"], row["decay_score"]) == ("PERMANENT", 0.0)


def test_purge_removes_memory_embedding_and_an_entitys_facts(store, policy, metrics, clock):
    now = clock()
    gone = add_entity(store, now, state="SOFT_DELETED", soft_deleted_days_ago=90)
    kept = add_entity(store, now, state="SOFT_DELETED", soft_deleted_days_ago=89)
    other = add_entity(store, now)
    fact = add_fact(store, now, other, gone, importance=5, stability=5)
    loose = add_fact(store, now, other, kept)
    store.execute("INSERT INTO mentions VALUES ('ep1', ?), ('ep1', ?)", [gone, other])
    report = run(store, policy, metrics, clock)
    assert report.purged == 2 and report.purged_detail == {
        "entities": 1,
        "facts": 0,
        "cascaded_facts": 1,
    }
    assert state_of(store, gone) is None and state_of(store, fact) is None
    assert state_of(store, kept) == "SOFT_DELETED" and state_of(store, loose) == "ACTIVE"
    assert store.fetchall("SELECT entity_uuid FROM mentions") == [(other,)]
    assert store.fetchone("SELECT count(*) FROM fact_embeddings WHERE uuid = ?", [fact])[0] == 0
    assert store.fetchone("SELECT count(*) FROM entity_embeddings WHERE uuid = ?", [gone])[0] == 0
    assert sample(metrics, "knowledge_memories_purged_total") == 2.0
    purged_rows = store.fetchall(
        "SELECT memory_kind, memory_uuid FROM decay_history WHERE to_state = 'PURGED' ORDER BY 1, 2"
    )
    assert purged_rows == [("entity", gone), ("fact", fact)]


def test_soft_delete_sets_the_timestamp_and_the_purge_counts_from_it(store, policy, metrics, clock):
    uuid = add_entity(store, clock(), state="EXPIRED")
    run(store, policy, metrics, clock)
    assert row_of(store, uuid)["soft_deleted"] is True
    clock.advance(days=89.9)
    assert run(store, policy, metrics, clock).purged == 0
    clock.advance(days=0.1)
    assert run(store, policy, metrics, clock).purged == 1


def test_dry_run_changes_nothing_and_reports_the_same(store, policy, metrics, clock):
    now = clock()
    a = add_entity(store, now, days_old=1000)
    add_entity(store, now, days_old=40)
    add_fact(store, now, a, a, days_old=100)
    add_entity(store, now, state="SOFT_DELETED", soft_deleted_days_ago=100)
    add_entity(store, now, state="EXPIRED", importance=5, stability=5)
    before = snapshot(store)
    dry = run(store, policy, metrics, clock, dry_run=True)
    assert snapshot(store) == before
    assert dry.run_id is None and dry.dry_run
    assert sample(metrics, "knowledge_decay_maintenance_runs_total", status="success") is None
    real = run(store, policy, metrics, clock)
    for field in ("transitions", "purged", "purged_detail", "by_state", "total", "scores_updated"):
        assert getattr(dry, field) == getattr(real, field), field
    # averages are sums over a multi-threaded scan: equal up to float summation order
    for field in ("decay_avg", "importance_avg", "stability_avg"):
        assert getattr(dry, field) == pytest.approx(getattr(real, field), rel=1e-12), field
    assert real.transitions_total > 0 and real.purged == 1


def test_failed_run_changes_nothing_and_counts_as_failure(
    store, policy, metrics, clock, monkeypatch
):
    now = clock()
    add_entity(store, now, days_old=1000)
    add_entity(store, now, state="SOFT_DELETED", soft_deleted_days_ago=100)
    before = snapshot(store)

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(msql, "_purge", broken)  # fails after history and updates are written
    with pytest.raises(StoreError, match="changed nothing: disk on fire"):
        run(store, policy, metrics, clock)
    after = snapshot(store)
    runs = after.pop("maintenance_runs")
    before.pop("maintenance_runs")
    assert after == before
    assert len(runs) == 1 and "failure" in runs[0]
    last = msql.last_run(store)
    assert last["status"] == "failure" and "disk on fire" in last["error"]
    assert sample(metrics, "knowledge_decay_maintenance_runs_total", status="failure") == 1.0
    assert (
        sample(
            metrics,
            "knowledge_lifecycle_transitions_total",
            from_state="ACTIVE",
            to_state="DORMANT",
        )
        is None
    )
    monkeypatch.undo()
    assert run(store, policy, metrics, clock).status == "success"


def test_metric_values_after_a_run(store, policy, metrics, clock):
    now = clock()
    add_entity(store, now, importance=1, stability=2)  # ACTIVE
    add_entity(store, now, days_old=40, importance=3, stability=3)  # -> DORMANT
    add_entity(store, now, importance=5, stability=5)  # -> PERMANENT
    add_entity(store, now, state="SOFT_DELETED", soft_deleted_days_ago=1, importance=2)
    report = run(store, policy, metrics, clock)
    m = lambda name, **labels: sample(metrics, name, **labels)  # noqa: E731
    assert m("knowledge_decay_maintenance_runs_total", status="success") == 1.0
    assert m("knowledge_decay_scores_updated_total") == 4.0 == report.scores_updated
    assert m("knowledge_maintenance_duration_seconds_count") == 1.0
    assert m("knowledge_memories_by_state", state="ACTIVE") == 1.0
    assert m("knowledge_memories_by_state", state="DORMANT") == 1.0
    assert m("knowledge_memories_by_state", state="PERMANENT") == 1.0
    assert m("knowledge_memories_by_state", state="SOFT_DELETED") == 1.0
    assert m("knowledge_memories_by_state", state="EXPIRED") == 0.0
    assert m("knowledge_memories_total") == 3.0  # soft-deleted excluded
    assert m("knowledge_importance_avg") == pytest.approx((1 + 3 + 5) / 3)
    assert m("knowledge_stability_avg") == pytest.approx((2 + 3 + 5) / 3)
    assert m("knowledge_decay_score_avg") == pytest.approx((1 - 0.5 ** (40 / 180)) / 3)
    row = msql.last_run(store)
    assert (row["status"], row["scores_updated"], row["transitions"], row["purged"]) == (
        "success",
        4,
        2,
        0,
    )


def test_an_empty_store_runs_fine(store, policy, metrics, clock):
    report = run(store, policy, metrics, clock)
    assert (report.scores_updated, report.transitions_total, report.purged, report.total) == (
        0,
        0,
        0,
        0,
    )
    assert report.as_dict()["memories_by_state"]["ACTIVE"] == 0


def test_report_as_dict_is_jsonable(store, policy, metrics, clock):
    import json

    add_entity(store, clock(), days_old=100)
    data = run(store, policy, metrics, clock).as_dict()
    json.dumps(data)
    assert data["transitions"] == [
        {"from_state": "ACTIVE", "to_state": "DORMANT", "count": 1},
        {"from_state": "DORMANT", "to_state": "ARCHIVED", "count": 1},
    ]
    assert data["started_at"].endswith("Z")


def test_never_two_runs_at_once(store, policy, metrics, clock, monkeypatch):
    entered, release = threading.Event(), threading.Event()
    real = msql.apply_maintenance

    def slow(*args, **kwargs):
        entered.set()
        release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(msql, "apply_maintenance", slow)
    results = []
    worker = threading.Thread(target=lambda: results.append(run(store, policy, metrics, clock)))
    worker.start()
    assert entered.wait(10)
    with pytest.raises(Conflict, match="already in progress"):
        run(store, policy, metrics, clock)
    release.set()
    worker.join(10)
    assert results and results[0].status == "success"


def test_an_entity_stays_as_fresh_as_its_accessed_live_facts(store, clock, metrics, policy):
    now = clock()
    maria = add_entity(store, now, days_old=400)  # never accessed itself
    acme = add_entity(store, now, days_old=400)
    lonely = add_entity(store, now, days_old=700)  # decay 0.93: expires
    add_fact(store, now, maria, acme, days_old=700, accessed_days_ago=2)
    stale = add_entity(store, now, days_old=700)
    add_fact(
        store, now, stale, lonely, days_old=700, accessed_days_ago=1, state="EXPIRED"
    )  # an expired fact keeps nobody
    run_maintenance(store, policy, metrics, clock)
    assert state_of(store, maria) == "ACTIVE" and state_of(store, acme) == "ACTIVE"
    assert row_of(store, maria)["decay_score"] < 0.01
    assert state_of(store, lonely) == "EXPIRED" and state_of(store, stale) == "EXPIRED"
