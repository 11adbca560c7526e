"""Shared fixtures: settings, embedders (a deterministic one for speed, the real local model
once per session), and the fake chat-completions server (tests/fakes)."""

from __future__ import annotations

import itertools
import os

import pytest

# the fake LLM server and its fixture (a real HTTP server on loopback)
from tests.fakes.fixtures import *  # noqa: E402,F401,F403
from tests.quick import quick_skip_reason
from workbench.config import load_settings
from workbench.fakes.embedder import HashEmbedder


@pytest.fixture(scope="session", autouse=True)
def _data_home_in_tmp(tmp_path_factory):
    """Nothing a test runs (nor the processes it starts) writes into the real per-user data
    folder: ``XDG_DATA_HOME`` points at a temporary folder for the session."""
    previous = os.environ.get("XDG_DATA_HOME")
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg-data"))
    yield
    if previous is None:
        os.environ.pop("XDG_DATA_HOME", None)
    else:
        os.environ["XDG_DATA_HOME"] = previous


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


# --- the store backend ----------------------------------------------------------------------
# WORKBENCH_TEST_BACKEND=postgres runs the suite with every in-memory store (``Store.open(
# ":memory:")``, what the unit and contract tests use) on a throw-away PostgreSQL server
# (tests/pg.py), one schema per store; tests of the DuckDB file itself (locks, snapshots,
# saved graphs) keep their files and carry the ``duckdb_only`` marker's reason when they
# cannot mean anything on PostgreSQL. .ci/run runs the suite on both backends.
BACKEND = os.environ.get("WORKBENCH_TEST_BACKEND", "duckdb")
_schemas = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server():
    """A throw-away PostgreSQL server for the session (its base URL)."""
    from tests.pg import ThrowawayPostgres

    server = ThrowawayPostgres().start()
    try:
        yield server
    finally:
        server.stop()


def new_pg_location(server) -> str:
    """A fresh, empty schema on ``server``: the URL of a store in it."""
    import psycopg

    from tests.pg import schema_url

    schema = f"t{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(server.url, autocommit=True) as con:
        con.execute(f'CREATE SCHEMA "{schema}"')
    return schema_url(server.url, schema)


@pytest.fixture
def pg_location(pg_server):
    """The URL of a store in a fresh schema of the session's PostgreSQL server."""
    return new_pg_location(pg_server)


if BACKEND == "postgres":

    @pytest.fixture(autouse=True)
    def _stores_on_postgres(request, monkeypatch):
        if request.node.get_closest_marker("duckdb_only"):
            return
        from workbench.store import Store

        server = request.getfixturevalue("pg_server")
        duck_open = Store.open.__func__

        def open_store(cls, path=":memory:", *args, **kwargs):
            if str(path) == ":memory:":
                path = new_pg_location(server)
            return duck_open(cls, path, *args, **kwargs)

        monkeypatch.setattr(Store, "open", classmethod(open_store))


# ``scripts/test.sh --quick`` (WORKBENCH_TEST_QUICK=1): see tests/quick.py
QUICK = os.environ.get("WORKBENCH_TEST_QUICK") == "1"


def pytest_collection_modifyitems(config, items):
    if QUICK:
        for item in items:
            reason = quick_skip_reason(getattr(item, "fixturenames", ()))
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))
    if BACKEND != "postgres":
        return
    for item in items:
        marker = item.get_closest_marker("duckdb_only")
        if marker:
            item.add_marker(pytest.mark.skip(reason=f"DuckDB only: {marker.args[0]}"))
