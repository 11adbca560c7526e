"""Fixtures of the service tests (``hash_embedder``, ``local_embedder``, ``fake_llm`` and
``settings`` come from tests/conftest.py): real uvicorn servers on free loopback ports."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient

from service.api.app import create_app
from tests.service.svc_helpers import BASE, ServerThread, make_settings
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics


@pytest.fixture
def server_thread():
    """``srv = server_thread(app)``: a started uvicorn server (``srv.url``), stopped after."""
    started: list[ServerThread] = []

    def start(app, port: int | None = None) -> ServerThread:
        srv = ServerThread(app, port)
        srv.__enter__()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.__exit__()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def plain_wb():
    """One LLM-less workbench for the tests that change nothing (error paths, hardening)."""
    workbench = Workbench.open(
        make_settings(), embedder=HashEmbedder(), chat=None, metrics=Metrics()
    )
    yield workbench
    workbench.close()


@pytest.fixture(scope="module")
def plain(plain_wb):
    with TestClient(create_app(plain_wb, plain_wb.settings), base_url=BASE) as test_client:
        yield test_client
