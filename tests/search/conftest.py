"""Fixtures of the search tests: a real DuckDB store, a manual clock, metrics, engines."""

from __future__ import annotations

import pytest

from tests import prom
from tests.search.helpers import T0
from workbench.clock import ManualClock
from workbench.metrics import Metrics
from workbench.search.engine import SearchEngine
from workbench.store import Store


@pytest.fixture
def store():
    s = Store.open(":memory:")
    yield s
    s.close()


@pytest.fixture
def clock():
    return ManualClock(T0)


@pytest.fixture
def metrics():
    return Metrics()


@pytest.fixture
def make_engine(store, clock, metrics):
    """Build engines over the test store; all are closed at teardown."""
    engines = []

    def make(embedder, **options):
        options.setdefault("access_background", False)
        engine = SearchEngine(store, embedder, metrics, clock, **options)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.close()


def sample(metrics: Metrics, name: str, **labels) -> float:
    value = prom.value(metrics.exposition(), name, **labels)
    return 0.0 if value is None else value
