"""Pure decay and lifecycle rules (DESIGN.md), exhaustively at the boundaries."""

from __future__ import annotations

import math

import pytest

from workbench.config import load_settings
from workbench.decay.rules import (
    ACTIVE,
    ARCHIVED,
    DORMANT,
    EXPIRED,
    PERMANENT,
    SOFT_DELETED,
    STATES,
    DecayPolicy,
    chain_steps,
    decay_score,
    half_life_days,
    is_permanent,
    plan_lifecycle,
    purge_due,
    reactivated_state,
)

P = DecayPolicy()
# days for a 3/3 memory to reach decay 0.9: 180 * log2(10)
EXPIRY_DAYS_33 = 180 * math.log2(10)


def test_policy_from_settings_reads_every_number():
    s = load_settings(
        environ={
            "SVC_KNOWLEDGE_DECAY_HALF_LIFE_DAYS": "90",
            "SVC_KNOWLEDGE_DECAY_DORMANT_DAYS": "7",
            "SVC_KNOWLEDGE_DECAY_ARCHIVED_DAYS": "14",
            "SVC_KNOWLEDGE_DECAY_EXPIRE_THRESHOLD": "0.5",
            "SVC_KNOWLEDGE_DECAY_EXPIRE_MAX_IMPORTANCE": "2",
            "SVC_KNOWLEDGE_DECAY_PURGE_DAYS": "1",
            "SVC_KNOWLEDGE_DECAY_PERMANENT_MIN_IMPORTANCE": "5",
            "SVC_KNOWLEDGE_DECAY_PERMANENT_MIN_STABILITY": "3",
            "SVC_KNOWLEDGE_DECAY_ENABLED": "false",
        },
        env_file=None,
    )
    assert DecayPolicy.from_settings(s) == DecayPolicy(
        enabled=False,
        half_life_days=90,
        dormant_days=7,
        archived_days=14,
        expire_threshold=0.5,
        expire_max_importance=2,
        purge_days=1,
        permanent_min_importance=5,
        permanent_min_stability=3,
    )


def test_default_policy_matches_default_settings():
    assert DecayPolicy.from_settings(load_settings(environ={}, env_file=None)) == DecayPolicy()


@pytest.mark.parametrize(
    "kwargs", [{"half_life_days": 0}, {"expire_threshold": 1.5}, {"dormant_days": -1}]
)
def test_policy_rejects_bad_numbers(kwargs):
    with pytest.raises(ValueError):
        DecayPolicy(**kwargs)


@pytest.mark.parametrize(
    "importance,stability,expected",
    [
        (3, 3, 180.0),
        (1, 1, 20.0),
        (5, 5, 500.0),
        (1, 5, 100.0),
        (5, 1, 100.0),
        (4, 3, 240.0),
        (0, 3, 60.0),
        (9, 3, 300.0),  # clamped to 1..5
    ],
)
def test_half_life(importance, stability, expected):
    assert half_life_days(importance, stability, P) == pytest.approx(expected)


def test_decay_default_memory_is_half_decayed_at_180_days():
    assert decay_score(180, 3, 3, P) == pytest.approx(0.5)
    assert decay_score(360, 3, 3, P) == pytest.approx(0.75)


@pytest.mark.parametrize("days", [0, -5, -0.001])
def test_decay_is_zero_when_fresh_or_in_the_future(days):
    assert decay_score(days, 3, 3, P) == 0.0


def test_decay_is_monotonic_and_bounded():
    values = [decay_score(d, 3, 3, P) for d in range(0, 5000, 50)]
    assert values == sorted(values)
    assert all(0.0 <= v < 1.0 for v in values)
    assert decay_score(1e9, 1, 1, P) == 1.0


def test_higher_importance_or_stability_decays_slower():
    assert decay_score(100, 5, 3, P) < decay_score(100, 3, 3, P) < decay_score(100, 1, 3, P)
    assert decay_score(100, 3, 5, P) < decay_score(100, 3, 3, P) < decay_score(100, 3, 1, P)


def test_custom_half_life_is_used():
    assert decay_score(90, 3, 3, DecayPolicy(half_life_days=90)) == pytest.approx(0.5)


@pytest.mark.parametrize(
    "importance,stability,expected",
    [
        (4, 4, True),
        (5, 5, True),
        (4, 5, True),
        (3, 5, False),
        (5, 3, False),
        (3, 3, False),
    ],
)
def test_permanent_rule(importance, stability, expected):
    assert is_permanent(importance, stability, P) is expected


# --- lifecycle: one state per threshold, exactly at the boundaries -----------------------
@pytest.mark.parametrize(
    "days,expected",
    [
        (0, ACTIVE),
        (29.999, ACTIVE),
        (30, DORMANT),
        (89.999, DORMANT),
        (90, ARCHIVED),
        (EXPIRY_DAYS_33 - 0.01, ARCHIVED),
        (EXPIRY_DAYS_33 + 0.01, EXPIRED),
        (5000, EXPIRED),
    ],
)
def test_active_memory_reaches_the_state_its_age_implies(days, expected):
    assert plan_lifecycle(ACTIVE, days, 3, 3, P).state == expected


def test_steps_are_counted_one_by_one_in_a_single_run():
    out = plan_lifecycle(ACTIVE, 1000, 3, 3, P)
    assert out.steps == ((ACTIVE, DORMANT), (DORMANT, ARCHIVED), (ARCHIVED, EXPIRED))
    assert out.decay == pytest.approx(decay_score(1000, 3, 3, P))
    assert plan_lifecycle(DORMANT, 100, 3, 3, P).steps == ((DORMANT, ARCHIVED),)
    assert plan_lifecycle(ACTIVE, 10, 3, 3, P).steps == ()


def test_expiry_needs_both_decay_and_low_importance():
    # importance 4 (stability 3, not permanent) never expires, however old
    assert plan_lifecycle(ARCHIVED, 1e6, 4, 3, P).state == ARCHIVED
    # importance 2 stability 5: half-life 200 d; decay 0.9 at 200*log2(10) d
    limit = 200 * math.log2(10)
    assert plan_lifecycle(ARCHIVED, limit - 0.01, 2, 5, P).state == ARCHIVED
    assert plan_lifecycle(ARCHIVED, limit + 0.01, 2, 5, P).state == EXPIRED


def test_expiry_threshold_is_inclusive():
    pol = DecayPolicy(expire_threshold=0.5)
    assert plan_lifecycle(ARCHIVED, 180, 3, 3, pol).state == EXPIRED  # decay exactly 0.5
    assert plan_lifecycle(ARCHIVED, 179.99, 3, 3, pol).state == ARCHIVED


def test_expired_is_soft_deleted_by_the_next_run_not_the_same_one():
    first = plan_lifecycle(ACTIVE, 5000, 3, 3, P)
    assert first.state == EXPIRED and (EXPIRED, SOFT_DELETED) not in first.steps
    second = plan_lifecycle(EXPIRED, 5000, 3, 3, P)
    assert second.state == SOFT_DELETED and second.steps == ((EXPIRED, SOFT_DELETED),)
    assert not second.purge


@pytest.mark.parametrize("state", [ACTIVE, DORMANT, ARCHIVED, EXPIRED])
def test_high_importance_and_stability_become_permanent_from_any_non_deleted_state(state):
    out = plan_lifecycle(state, 5000, 4, 4, P)
    assert (out.state, out.steps, out.decay) == (PERMANENT, ((state, PERMANENT),), 0.0)


def test_permanent_never_decays_and_never_moves():
    for days in (0, 30, 90, 10_000):
        out = plan_lifecycle(PERMANENT, days, 1, 1, P)  # even if importance was lowered
        assert (out.state, out.steps, out.decay, out.purge) == (PERMANENT, (), 0.0, False)


def test_soft_deleted_is_not_rescued_by_importance():
    assert plan_lifecycle(SOFT_DELETED, 10, 5, 5, P, days_since_soft_delete=1).state == SOFT_DELETED


@pytest.mark.parametrize(
    "days,expected", [(None, False), (0, False), (89.999, False), (90, True), (400, True)]
)
def test_purge_after_the_recovery_period(days, expected):
    assert purge_due(days, P) is expected
    assert plan_lifecycle(SOFT_DELETED, 10, 3, 3, P, days_since_soft_delete=days).purge is expected


def test_purge_days_zero_purges_at_the_run_after_soft_delete():
    pol = DecayPolicy(purge_days=0)
    assert not plan_lifecycle(EXPIRED, 10, 3, 3, pol).purge
    assert plan_lifecycle(SOFT_DELETED, 10, 3, 3, pol, days_since_soft_delete=0).purge


def test_maintenance_never_moves_backwards():
    # recently accessed (e.g. last_accessed_at set without a reactivation) stays put
    assert plan_lifecycle(ARCHIVED, 1, 3, 3, P).state == ARCHIVED
    assert plan_lifecycle(DORMANT, 1, 3, 3, P).state == DORMANT


def test_unknown_state_is_rejected():
    with pytest.raises(ValueError, match="unknown lifecycle state"):
        plan_lifecycle("ZOMBIE", 1, 3, 3, P)


@pytest.mark.parametrize(
    "state,expected",
    [
        (DORMANT, ACTIVE),
        (ARCHIVED, ACTIVE),
        (ACTIVE, None),
        (PERMANENT, None),
        (EXPIRED, None),
        (SOFT_DELETED, None),
    ],
)
def test_reactivation(state, expected):
    assert reactivated_state(state) == expected


def test_chain_steps():
    assert chain_steps(ACTIVE, ACTIVE) == ()
    assert chain_steps(DORMANT, EXPIRED) == ((DORMANT, ARCHIVED), (ARCHIVED, EXPIRED))
    assert chain_steps(ACTIVE, PERMANENT) == ((ACTIVE, PERMANENT),)


def test_states_are_the_schema_states():
    from workbench.store.schema import LIFECYCLE_STATES

    assert set(STATES) == set(LIFECYCLE_STATES)
