"""The search fixtures, for the retrieval evaluation."""

from tests.search.conftest import clock, make_engine, metrics, store  # noqa: F401
