"""An error of a condition that passes by itself tells the client when to try again: HTTP
``Retry-After`` in whole seconds (the error's ``retry_after``). The store's outage is real here:
a PostgreSQL cluster of the test's own, stopped under an in-process service."""

from __future__ import annotations

import math

import pytest
from litestar.testing import TestClient

from service.api.app import create_app
from service.sidecars.embed_server import create_embed_app
from serving.errors import to_response
from tests.pg import ThrowawayPostgres, wait_for
from tests.service.svc_helpers import BASE, call, free_port, make_settings
from workbench import errors
from workbench.embedding import CompatEmbedder
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics
from workbench.store.availability import PROBE_SECONDS


@pytest.mark.parametrize(
    "error, status, seconds",
    [
        (errors.StoreUnavailable("the database is unreachable"), 503, "1"),
        (errors.StoreUnavailable("unreachable", retry_after=3), 503, "3"),
        (errors.EmbedderError("connection refused by the embedder"), 503, "5"),
        (errors.QueueFull("the extraction queue holds its cap"), 429, "60"),
        # waiting does not help: a setting, a full disk, a bad request
        (errors.StoreFull("the disk is full"), 503, None),
        (errors.StoreError("database error"), 503, None),
        (errors.LLMNotConfigured("no LLM"), 503, None),
        (errors.DimensionMismatch("384 against 768"), 503, None),
        (errors.InvalidInput("bad"), 400, None),
    ],
)
def test_the_http_mapping_sends_the_errors_retry_after(error, status, seconds):
    response = to_response(error)
    assert response.status_code == status
    assert response.headers.get("Retry-After") == seconds


def test_store_unavailable_carries_retry_after_from_the_probe_interval():
    assert errors.StoreUnavailable.retry_after == max(1, math.ceil(PROBE_SECONDS))


def test_the_embed_server_says_when_to_retry_an_unreachable_embedder():
    """``workbench embed-server`` in front of an embedder server that is not running."""
    dead = CompatEmbedder(f"http://127.0.0.1:{free_port()}/v1", "all-MiniLM-L6-v2", 384)
    with TestClient(create_embed_app(dead)) as client:
        response = client.post("/v1/embeddings", json={"input": "hello"})
    assert response.status_code == 503
    assert "connection refused" in response.json()["error"]["message"]
    assert response.headers["Retry-After"] == "5"


def open_wb(url: str) -> Workbench:
    settings = make_settings(SVC_KNOWLEDGE_DATABASE_URL=url, SVC_KNOWLEDGE_DECAY_ENABLED="false")
    return Workbench.open(settings, embedder=HashEmbedder(), chat=None, metrics=Metrics())


def assert_retry_after(response, kind: str, fragment: str) -> None:
    assert response.status_code == 503, response.text
    assert response.json()["error"]["type"] == kind
    assert fragment in response.json()["error"]["message"]
    assert response.headers["Retry-After"].isdigit()  # delay-seconds, not a date
    assert int(response.headers["Retry-After"]) == 1


def test_a_503_of_an_unreachable_store_carries_retry_after():
    with ThrowawayPostgres() as pg:
        wb = open_wb(pg.create_database())
        try:
            app = create_app(wb, wb.settings)
            with TestClient(app, base_url=BASE) as client:
                call(client, "get_queue_status", {})  # the token check's answer is read
                pg.halt()
                add = {"name": "a", "episode_body": "Maria works at Acme."}
                assert_retry_after(
                    client.post("/tools/add_memory", json=add), "store_unavailable", "unreachable"
                )
                assert_retry_after(
                    client.post("/tools/get_episodes", json={}), "store_unavailable", "unreachable"
                )
                health = client.get("/health")
                assert health.status_code == 503 and not health.json()["checks"]["store"]["ok"]
            # a fresh app has never read whether tokens exist: its token check answers
            with TestClient(create_app(wb, wb.settings), base_url=BASE) as fresh:
                token_check = fresh.post("/tools/get_episodes", json={})
                assert_retry_after(token_check, "store_unavailable", "bearer token")
            pg.resume()
            with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
                assert wait_for(lambda: client.get("/health").status_code == 200, 10, 0.1)
                answer = client.post("/tools/get_episodes", json={})
                assert answer.status_code == 200 and "Retry-After" not in answer.headers
        finally:
            wb.close()
