"""The set-based maintenance SQL and the pure Python rules agree on a grid of cases."""

from __future__ import annotations

import itertools
import math
from datetime import timedelta

import pandas as pd
import pytest

from tests.decay.conftest import START
from workbench.decay.rules import STATES, DecayPolicy, plan_lifecycle
from workbench.store.maintenance import plan_rows

DAYS = [
    -3,
    0,
    1,
    29.999,
    30,
    30.5,
    89.999,
    90,
    120,
    180,
    180 * math.log2(10),
    200 * math.log2(10) + 0.001,
    599,
    1000,
    3000,
    20000,
]
SOFT_DAYS = [None, 0, 89.999, 90, 365]


def _grid():
    for n, (state, days, imp, stab) in enumerate(
        itertools.product(STATES, DAYS, range(1, 6), range(1, 6))
    ):
        soft = SOFT_DAYS[n % len(SOFT_DAYS)] if state == "SOFT_DELETED" else None
        accessed = n % 3 == 0  # sometimes last_accessed_at, else created_at
        yield f"m{n}", state, days, imp, stab, soft, accessed


def _insert(store, now, cases):
    rows = []
    for uuid, state, days, imp, stab, soft, accessed in cases:
        age = now - timedelta(days=days)
        created = now - timedelta(days=days + 50) if accessed else age
        deleted = None if soft is None else now - timedelta(days=soft)
        rows.append([uuid, created, imp, stab, state, age if accessed else None, deleted])
    frame = pd.DataFrame(
        rows,
        columns=[
            "uuid",
            "created_at",
            "importance",
            "stability",
            "lifecycle_state",
            "last_accessed_at",
            "soft_deleted_at",
        ],
    )
    for col in ("created_at", "last_accessed_at", "soft_deleted_at"):
        frame[col] = pd.to_datetime(frame[col], utc=True)
    with store.transaction():
        store.register("grid_rows", frame)
        store.execute(
            """INSERT INTO facts (uuid, group_id, source_uuid, target_uuid, fact, created_at,
                   importance, stability, lifecycle_state, last_accessed_at, soft_deleted_at)
               SELECT uuid, 'g', 's', 't', 'f', created_at, importance, stability,
                      lifecycle_state, last_accessed_at, soft_deleted_at FROM grid_rows"""
        )
        store.unregister("grid_rows")
    return {r[0]: r for r in rows}


@pytest.mark.parametrize(
    "policy",
    [
        DecayPolicy(),
        DecayPolicy(
            half_life_days=30,
            dormant_days=7,
            archived_days=20,
            expire_threshold=0.5,
            expire_max_importance=4,
            purge_days=30,
            permanent_min_importance=5,
            permanent_min_stability=5,
        ),
    ],
    ids=["default", "custom"],
)
def test_sql_plan_equals_python_rules(store, policy):
    now = START
    inserted = _insert(store, now, list(_grid()))
    planned = plan_rows(store, policy, now)
    assert len(planned) == len(inserted)
    mismatches = []
    for row in planned:
        _, created, imp, stab, state, accessed, deleted = inserted[row["uuid"]]
        days = (now - (accessed or created)) / timedelta(days=1)
        soft = None if deleted is None else (now - deleted) / timedelta(days=1)
        want = plan_lifecycle(state, days, imp, stab, policy, days_since_soft_delete=soft)
        got = (row["new_state"], row["steps"], row["new_decay"], row["purge"])
        if got != (want.state, want.steps, want.decay, want.purge):
            mismatches.append((row["uuid"], state, days, imp, stab, got, want))
    assert not mismatches, mismatches[:5]
