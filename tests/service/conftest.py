"""Fixtures of the service tests (``hash_embedder``, ``local_embedder``, ``fake_llm`` and
``settings`` come from tests/conftest.py): real uvicorn servers on free loopback ports."""

from __future__ import annotations

import pytest

from tests.service.svc_helpers import ServerThread


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
