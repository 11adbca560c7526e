"""Fixtures of the index tests: a real store (DuckDB in memory, or the test PostgreSQL)."""

from __future__ import annotations

import pytest

from workbench.store import Store


@pytest.fixture
def store():
    s = Store.open(":memory:")
    yield s
    s.close()
