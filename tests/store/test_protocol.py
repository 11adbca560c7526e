"""The store protocol: two sibling backends behind one abstract ``Store``; code outside
``store/`` asks for capabilities, never a backend's name."""

import re
from pathlib import Path

import pytest

import workbench.store
from workbench.store import DuckDBStore, Store
from workbench.store.base import Store as BaseStore
from workbench.store.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]


def test_the_backends_are_siblings_behind_the_protocol():
    assert Store is BaseStore
    assert issubclass(DuckDBStore, Store) and issubclass(PostgresStore, Store)
    assert not issubclass(PostgresStore, DuckDBStore)
    assert not issubclass(DuckDBStore, PostgresStore)
    with pytest.raises(TypeError):
        Store(":memory:", 8, False)  # abstract: only a backend is a store


def test_each_backend_says_its_capabilities():
    assert DuckDBStore.shared is False and PostgresStore.shared is True
    assert {DuckDBStore.backend, PostgresStore.backend} == {"duckdb", "postgres"}


@pytest.mark.duckdb_only("opens a DuckDB file by its path")
def test_open_picks_the_backend_by_the_location(tmp_path):
    for opened in (Store.open(tmp_path / "a.duckdb", dim=8), workbench.store.open(":memory:")):
        assert isinstance(opened, DuckDBStore)
        opened.close()
    assert Store.open(tmp_path / "b.duckdb", dim=8).beside_file(".x") == Path(
        f"{tmp_path / 'b.duckdb'}.x"
    )


def test_no_code_outside_store_reads_the_backend_name():
    pattern = re.compile(r"\bstore\.backend\b|\bbackend\s*==\s*[\"'](duckdb|postgres)[\"']")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for top in ("workbench", "service", "voice")
        for path in sorted((ROOT / top).rglob("*.py"))
        if "store" not in path.relative_to(ROOT / top).parts[:1]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
