"""Pytest fixtures for the fakes. Import them into a conftest::

    from tests.fakes.fixtures import fake_llm  # noqa: F401

``fake_llm`` yields a started :class:`~workbench.fakes.chat_server.FakeLLMServer` (one per test):
``.base_url`` (ends in ``/v1``), ``.requests`` (every chat request body), ``.script(...)``,
``.set_responder(...)``, ``.on_structure(...)``, ``.latency``. ``chat_settings_env(fake_llm)``
gives the environment that points the workbench at it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from workbench.fakes.chat_server import FakeLLMServer


@pytest.fixture
def fake_llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server
