"""Fixtures for decay, lifecycle, classification and maintenance tests: a real in-memory DuckDB
store with the real schema, a ManualClock, and a fresh Metrics registry per test."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from tests import prom
from workbench.clock import ManualClock
from workbench.decay.rules import DecayPolicy
from workbench.metrics import Metrics
from workbench.store import Store

START = datetime(2026, 1, 1, tzinfo=UTC)
DIM = 4
_ids = itertools.count(1)


@pytest.fixture
def store():
    s = Store.open(":memory:", dim=DIM)
    yield s
    s.close()


@pytest.fixture
def clock():
    return ManualClock(START)


@pytest.fixture
def metrics():
    return Metrics(enabled=True)


@pytest.fixture
def policy():
    return DecayPolicy()


def _vector(store):
    return [1.0] + [0.0] * (store.dim - 1)


def add_entity(
    store,
    now,
    *,
    uuid=None,
    days_old=0.0,
    accessed_days_ago=None,
    state="ACTIVE",
    importance=3,
    stability=3,
    soft_deleted_days_ago=None,
    status="success",
    embedding=True,
    name=None,
):
    """Insert an entity with plain SQL (and its embedding row); returns its uuid."""
    uuid = uuid or f"e{next(_ids)}"
    created = now - timedelta(days=days_old)
    accessed = None if accessed_days_ago is None else now - timedelta(days=accessed_days_ago)
    deleted = None if soft_deleted_days_ago is None else now - timedelta(days=soft_deleted_days_ago)
    store.execute(
        """INSERT INTO entities (uuid, group_id, name, name_norm, summary, created_at,
               updated_at, importance, stability, classification_status, lifecycle_state,
               last_accessed_at, soft_deleted_at)
           VALUES (?, 'main', ?, ?, 'a summary', ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            uuid,
            name or uuid,
            (name or uuid).lower(),
            created,
            created,
            importance,
            stability,
            status,
            state,
            accessed,
            deleted,
        ],
    )
    if embedding:
        store.execute(
            "INSERT INTO entity_embeddings (uuid, model, vector) VALUES (?, 'test', ?)",
            [uuid, _vector(store)],
        )
    return uuid


def add_fact(
    store,
    now,
    source,
    target,
    *,
    uuid=None,
    days_old=0.0,
    accessed_days_ago=None,
    state="ACTIVE",
    importance=3,
    stability=3,
    soft_deleted_days_ago=None,
    status="success",
    embedding=True,
    text="x relates to y",
):
    uuid = uuid or f"f{next(_ids)}"
    created = now - timedelta(days=days_old)
    accessed = None if accessed_days_ago is None else now - timedelta(days=accessed_days_ago)
    deleted = None if soft_deleted_days_ago is None else now - timedelta(days=soft_deleted_days_ago)
    store.execute(
        """INSERT INTO facts (uuid, group_id, source_uuid, target_uuid, fact, created_at,
               importance, stability, classification_status, lifecycle_state,
               last_accessed_at, soft_deleted_at)
           VALUES (?, 'main', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        [
            uuid,
            source,
            target,
            text,
            created,
            importance,
            stability,
            status,
            state,
            accessed,
            deleted,
        ],
    )
    if embedding:
        store.execute(
            "INSERT INTO fact_embeddings (uuid, model, vector) VALUES (?, 'test', ?)",
            [uuid, _vector(store)],
        )
    return uuid


def state_of(store, uuid):
    row = store.fetchone(
        "SELECT lifecycle_state FROM entities WHERE uuid = ? "
        "UNION ALL SELECT lifecycle_state FROM facts WHERE uuid = ?",
        [uuid, uuid],
    )
    return row[0] if row else None


def row_of(store, uuid):
    for table in ("entities", "facts"):
        rows = store.fetch_dicts(
            f"SELECT uuid, lifecycle_state, decay_score, importance, stability, "
            f"classification_status, soft_deleted_at IS NOT NULL AS soft_deleted "
            f"FROM {table} WHERE uuid = ?",
            [uuid],
        )
        if rows:
            return rows[0]
    return None


def samples(metrics):
    """{(sample name, frozenset(labels)): value} from the text exposition."""
    return prom.parse(metrics.exposition())


def sample(metrics, name, **labels):
    return prom.value(metrics.exposition(), name, **labels)


def snapshot(store):
    """Every row of every table the maintenance touches (to prove nothing changed)."""
    tables = (
        "entities",
        "facts",
        "mentions",
        "entity_embeddings",
        "fact_embeddings",
        "maintenance_runs",
        "decay_history",
    )
    return {t: sorted(store.fetchall(f"SELECT * FROM {t}"), key=repr) for t in tables}
