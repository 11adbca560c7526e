"""Fixtures of the service tests: a fast deterministic embedder, the real local model (one per
session), and real uvicorn servers on free loopback ports."""

from __future__ import annotations

import pytest
from svc_helpers import HashEmbedder, ServerThread


@pytest.fixture
def hash_embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture(scope="session")
def local_embedder():
    """The real all-MiniLM-L6-v2, loaded once per session (~7 s)."""
    from workbench.embedder import LocalEmbedder

    embedder = LocalEmbedder()
    embedder.warm_up()
    return embedder


@pytest.fixture
def server_thread():
    """``with server_thread(app) as srv: srv.url``."""
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

