"""A full disk is a 503 ``disk_full`` with the reason, and ``/health`` is not ready while
writes fail; what was stored before stays. The disk is really full: the database's write-ahead
log is ``/dev/full``, where every write fails with ``ENOSPC`` (through DuckDB, as on a full
disk)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from litestar.testing import TestClient

from service.api.app import create_app
from tests.service.svc_helpers import BASE, call, make_settings
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics

pytestmark = pytest.mark.duckdb_only("the write-ahead log of a DuckDB file")


def open_wb(db: Path) -> Workbench:
    settings = make_settings(SVC_KNOWLEDGE_DB_PATH=str(db))
    return Workbench.open(settings, embedder=HashEmbedder(), chat=None, metrics=Metrics())


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_is_a_503_and_health_says_not_ready(tmp_path):
    db = tmp_path / "kb.duckdb"
    wb = open_wb(db)
    try:
        with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
            call(client, "add_memory", {"name": "a", "episode_body": "Maria works at Acme."})
            assert client.get("/health").status_code == 200
            wb.store.checkpoint()  # the log is written into the file and closed
            assert not Path(f"{db}.wal").exists()
            Path(f"{db}.wal").symlink_to("/dev/full")

            body = {"name": "b", "episode_body": "Tom uses Neovim."}
            error = call(client, "add_memory", body, status=503)["error"]
            assert error["type"] == "disk_full"
            assert "full" in error["message"] and str(db) in error["message"]
            health = client.get("/health")
            assert health.status_code == 503
            store = health.json()["checks"]["store"]
            assert store["ok"] is False and "full" in store["detail"]

            episodes = call(client, "get_episodes", {"max_episodes": 10})["episodes"]
            assert [e["name"] for e in episodes] == ["a"]  # the earlier one is still there
    finally:
        Path(f"{db}.wal").unlink(missing_ok=True)
        try:
            wb.close()
        except Exception:  # noqa: BLE001 - the connection still writes to /dev/full
            pass


def test_health_is_ready_again_once_a_write_succeeds(tmp_path):
    wb = open_wb(tmp_path / "kb.duckdb")
    try:
        with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
            wb.store.write_failure = "the disk holding the database is full"
            assert client.get("/health").status_code == 200  # the probe wrote: space is back
            assert wb.store.write_failure is None
    finally:
        wb.close()
