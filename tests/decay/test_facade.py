"""Decay through the Workbench facade (the tools ``run_decay_maintenance``,
``get_knowledge_health``, ``classify_memory``, ``recover_soft_deleted``): JSON-able results."""

from __future__ import annotations

import json
from uuid import uuid4

import pytest

from tests.decay.conftest import START, add_entity
from workbench.clock import ManualClock


@pytest.fixture
def workbench(settings, hash_embedder):
    from workbench.facade import Workbench

    wb = Workbench.open(settings, embedder=hash_embedder, chat=None, clock=ManualClock(START))
    yield wb
    wb.close()


def test_tools_round_trip(workbench):
    clock = workbench.clock
    old = add_entity(workbench.store, clock(), days_old=2000, uuid=str(uuid4()))
    dry = workbench.run_decay_maintenance(dry_run=True)
    assert dry["dry_run"] is True and dry["transitions_total"] == 3
    report = workbench.run_decay_maintenance()
    json.dumps(report)
    assert report["status"] == "success" and report["memories_by_state"]["EXPIRED"] == 1
    health = workbench.get_knowledge_health()
    json.dumps(health)
    assert health["status"] == "healthy" and health["metrics_endpoint"] == "/metrics"
    clock.advance(days=1)
    workbench.run_decay_maintenance()  # EXPIRED -> SOFT_DELETED
    recovered = workbench.recover_soft_deleted(old)
    assert recovered["to_state"] == "ARCHIVED"
    assert workbench.classify_memory("User is allergic to nuts") == {
        "importance": 3,
        "stability": 3,
        "status": "fallback",
        "error": "no LLM configured",
    }
