"""A PostgreSQL server short of a resource (SQLSTATE class 53), raised by the server itself
(tests/pg_faults.py: a trigger raises the SQLSTATE, so psycopg reads the real error off the
wire): a full disk (53100) is ``StoreFull`` and marks the store unwritable until a write goes
through again, with nothing half-written; the other shortages pass by themselves and are a
``StoreError`` that says when to retry."""

from __future__ import annotations

import psycopg
import pytest

from tests.pg_faults import ServerFault
from workbench.errors import StoreError, StoreFull
from workbench.store import Store

META = "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"


@pytest.fixture
def store(pg_location):
    opened = Store.open(pg_location, dim=8)
    yield opened
    opened.close()


def meta(url: str, key: str) -> str | None:
    """What the database holds (on a connection of its own: a read through the store would
    write its deferred rows first)."""
    with psycopg.connect(url) as con:
        row = con.execute("SELECT value FROM meta WHERE key = %s", [key]).fetchone()
    return row[0] if row else None


def test_a_full_disk_is_store_full_until_a_write_goes_through(store, pg_location):
    with ServerFault(pg_location, "53100"):
        with pytest.raises(StoreFull) as raised:
            store.execute(META, ["a", "1"])  # a statement of its own
        assert isinstance(raised.value.__cause__, psycopg.errors.DiskFull)  # what psycopg read
        assert raised.value.kind == "disk_full" and raised.value.retry_after is None
        assert "full" in raised.value.message and store.path in raised.value.message
        assert store.write_failure == raised.value.message  # /health: not ready
        assert store.available  # the server answers: no outage

        store.defer("meta", META, ["deferred", "kept"])
        with pytest.raises(StoreFull), store.transaction():
            store.execute(META, ["b", "2"])
        assert store.deferred_rows == 1  # not written, not lost: kept for the next write
        with pytest.raises(StoreFull):
            store.probe_write()  # what /health tries while writes fail
        store.ping()  # reads still work
        assert meta(pg_location, "a") is None and meta(pg_location, "b") is None
        assert store.write_failure

    store.probe_write()  # space is back
    assert store.write_failure is None
    assert meta(pg_location, "deferred") == "kept"


def test_a_write_of_its_own_clears_the_failure_too(store, pg_location):
    with ServerFault(pg_location, "53100"), pytest.raises(StoreFull):
        store.execute(META, ["a", "1"])
    store.execute(META, ["a", "2"])
    assert store.write_failure is None and meta(pg_location, "a") == "2"


@pytest.mark.parametrize(
    "sqlstate, message",
    [
        ("53200", "out of memory"),
        ("53300", "sorry, too many clients already"),
        ("53400", "configuration limit exceeded"),
    ],
)
def test_other_shortages_are_a_store_error_to_retry(store, pg_location, sqlstate, message):
    with ServerFault(pg_location, sqlstate, message), pytest.raises(StoreError) as raised:
        store.execute(META, ["a", "1"])
    error = raised.value
    assert type(error) is StoreError and error.retry_after == 1
    assert "lacks resources" in error.message and message in error.message
    assert store.write_failure is None and store.available  # ready; nothing to wait out


def test_the_sqlstate_tells_a_full_disk_whatever_the_words(store, pg_location):
    with ServerFault(pg_location, "53100", "tablespace quota reached"):
        with pytest.raises(StoreFull), store.transaction():
            store.execute(META, ["a", "1"])
    assert store.write_failure
