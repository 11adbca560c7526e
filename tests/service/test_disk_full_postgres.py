"""A full disk under a service on PostgreSQL (the server raises ``disk_full``, SQLSTATE
53100, on every row written: tests/pg_faults.py): ``add_memory`` answers 503 ``disk_full`` with
the reason, ``/health`` is not ready and says why, what was queued stays queued and is
processed once writes go through again, and readiness comes back by itself."""

from __future__ import annotations

import logging

import pytest
from litestar.testing import TestClient

from service.api.app import create_app
from tests.pg import wait_for
from tests.pg_faults import ServerFault
from tests.service.svc_helpers import BASE, call, make_settings
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics


@pytest.fixture
def workbench(pg_location, fake_llm):
    settings = make_settings(
        fake_llm, SVC_KNOWLEDGE_DATABASE_URL=pg_location, SVC_KNOWLEDGE_DECAY_ENABLED="false"
    )
    wb = Workbench.open(settings, embedder=HashEmbedder(), metrics=Metrics())
    yield wb
    wb.close()


def episode(name: str, body: str) -> dict[str, str]:
    return {"name": name, "episode_body": body, "group_id": "g"}


def statuses(client) -> dict[str, str]:
    episodes = call(client, "get_episodes", {"group_ids": ["g"], "max_episodes": 10})
    return {e["name"]: e["status"] for e in episodes["episodes"]}


def test_a_full_disk_is_a_clear_503_and_not_ready_until_writes_go_through(
    workbench, pg_location, caplog
):
    caplog.set_level(logging.WARNING)
    with TestClient(create_app(workbench, workbench.settings), base_url=BASE) as client:
        call(client, "add_memory", episode("a", "Maria works at Acme."))
        assert client.get("/health").status_code == 200
        fault = ServerFault(pg_location, "53100").make()
        try:
            refused = client.post("/tools/add_memory", json=episode("b", "Tom uses Neovim."))
            assert refused.status_code == 503
            error = refused.json()["error"]
            assert error["type"] == "disk_full" and "full" in error["message"]
            assert "Traceback" not in refused.text and "Retry-After" not in refused.headers
            health = client.get("/health")
            assert health.status_code == 503 and health.json()["ready"] is False
            store = health.json()["checks"]["store"]
            assert store["ok"] is False and "full" in store["detail"]

            workbench.queue.start()  # claims fail while nothing can be written
            assert not wait_for(lambda: statuses(client)["a"] != "queued", 1.5, 0.1)
            assert statuses(client) == {"a": "queued"}  # kept: not lost, not failed
            said = [r for r in caplog.records if r.getMessage().startswith("queue dispatcher")]
            assert len(said) == 1 and "full" in said[0].getMessage()  # once, not each turn
            assert said[0].exc_info is None  # a reason, not a traceback
        finally:
            fault.clear()
        assert wait_for(lambda: client.get("/health").status_code == 200, 10, 0.1)
        call(client, "add_memory", episode("b", "Tom uses Neovim."))
        assert wait_for(lambda: set(statuses(client).values()) == {"done"}, 30, 0.2)
        assert set(statuses(client)) == {"a", "b"}
        workbench.queue.stop()
