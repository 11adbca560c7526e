"""Shared fixtures: settings, embedders (a deterministic one for speed, the real local model
once per session), and the fake chat-completions server (tests/fakes)."""

from __future__ import annotations

import pytest

# the fake LLM server and its fixture (a real HTTP server on loopback)
from tests.fakes.fixtures import *  # noqa: E402,F401,F403
from workbench.config import load_settings
from workbench.fakes.embedder import HashEmbedder


@pytest.fixture
def hash_embedder():
    return HashEmbedder()


@pytest.fixture(scope="session")
def local_embedder():
    from workbench.embedding import LocalEmbedder

    embedder = LocalEmbedder()
    embedder.warm_up()
    return embedder


@pytest.fixture
def settings():
    return load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
