"""The bulk writes of an import (``store/bulk.py``, ``Store.insert_arrow``: a binary COPY on
PostgreSQL, built by ``store/pg_copy.py``): every value comes back as written, both backends;
on PostgreSQL the change log names every row (other replicas are told)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest

from tests.conftest import BACKEND
from workbench.store import Store, bulk
from workbench.store import changes as log_sql

DIM = 8

ENTITIES = [
    {"uuid": "e1", "group_id": "g", "name": "Zoë \t tab\nnew line \\ back", "name_norm": "zoë",
     "entity_type": "Person", "summary": "", "importance": 5, "stability": 1,
     "created_at": datetime(1999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
     "classification_status": None, "lifecycle_state": "ACTIVE"},
    {"uuid": "e2", "group_id": "g", "name": "東京", "name_norm": "東京", "entity_type": "Place",
     "summary": "a city, \"quoted\" and 'single'", "importance": 3, "stability": 3,
     "created_at": datetime(2026, 3, 1, 12, 0, 0, 123_456, tzinfo=timezone(timedelta(hours=2))),
     "classification_status": "provided", "lifecycle_state": "DORMANT"},
]  # fmt: skip
for row in ENTITIES:
    row["updated_at"] = row["created_at"]
FACTS = [
    {"uuid": "f1", "group_id": "g", "source_uuid": "e1", "target_uuid": "e2",
     "relation": "LIVES_IN", "fact": "Zoë lives in 東京", "episode_uuid": None,
     "created_at": datetime(2026, 1, 1, tzinfo=UTC), "valid_at": None,
     "invalid_at": datetime(1970, 1, 1, tzinfo=UTC), "importance": 2, "stability": 4,
     "classification_status": None, "lifecycle_state": "ACTIVE"},
    {"uuid": "f2", "group_id": "g", "source_uuid": "e2", "target_uuid": "e1",
     "relation": "RELATES_TO", "fact": "x" * 2000, "episode_uuid": "ep-1",
     "created_at": datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
     "valid_at": datetime(1901, 1, 1, tzinfo=UTC), "invalid_at": None, "importance": 1,
     "stability": 5, "classification_status": "provided", "lifecycle_state": "ARCHIVED"},
]  # fmt: skip


@pytest.fixture
def store():
    opened = Store.open(":memory:", dim=DIM)
    try:
        yield opened
    finally:
        opened.close()


def _stored(store: Store, table: str, columns: list[str]) -> dict[str, dict]:
    rows = store.fetch_dicts(f"SELECT {', '.join(columns)} FROM {table} ORDER BY uuid")
    return {r["uuid"]: r for r in rows}


def test_every_value_comes_back_as_written(store):
    vectors = np.random.default_rng(3).standard_normal((2, DIM)).astype(np.float32)
    vectors[0, 0] = np.float32(1e-38)  # a subnormal-ish and an exact bit pattern
    with store.transaction():
        bulk.insert_entities(store, ENTITIES)
        bulk.insert_facts(store, FACTS)
        bulk.insert_new_vectors(store, "entity", ["e1", "e2"], vectors, "m")
        bulk.insert_new_vectors(store, "fact", ["f1", "f2"], vectors[::-1], "m")
    entities = _stored(store, "entities", list(bulk.ENTITY_COLUMNS) + ["decay_score",
                                                                      "access_count"])  # fmt: skip
    for row in ENTITIES:
        got = entities[row["uuid"]]
        assert {k: got[k] for k in row} == row
        assert got["decay_score"] == 0.0 and got["access_count"] == 0  # the defaults
    facts = _stored(store, "facts", list(bulk.FACT_COLUMNS) + ["expired_at"])
    for row in FACTS:
        got = facts[row["uuid"]]
        assert {k: got[k] for k in row} == row and got["expired_at"] is None
    for table, uuids, expected in (("entity_embeddings", ["e1", "e2"], vectors),
                                   ("fact_embeddings", ["f1", "f2"], vectors[::-1])):  # fmt: skip
        stored = _stored(store, table, ["uuid", "model", "vector", "seq"])
        for uuid, vector in zip(uuids, expected):
            got = np.asarray(stored[uuid]["vector"], dtype=np.float32)
            assert got.tobytes() == vector.tobytes()  # bit for bit
            assert stored[uuid]["model"] == "m" and stored[uuid]["seq"] is not None


def test_a_vector_of_another_size_or_count_is_refused(store):
    with pytest.raises(ValueError):
        bulk.insert_new_vectors(store, "entity", ["e1"], np.zeros((1, DIM + 1), np.float32), "m")
    with pytest.raises(ValueError):
        bulk.insert_new_vectors(store, "entity", ["e1", "e2"], np.zeros((1, DIM), np.float32), "m")


def test_nothing_to_write_writes_nothing(store):
    bulk.insert_entities(store, [])
    bulk.insert_new_vectors(store, "fact", [], np.zeros((0, DIM), np.float32), "m")
    assert store.fetchone("SELECT count(*) FROM entities")[0] == 0


@pytest.mark.skipif(BACKEND != "postgres", reason="the change log of a PostgreSQL store")
def test_the_change_log_names_every_row_a_copy_wrote(store):
    """COPY fires the statement-level change-log triggers once, with every row: other
    replicas re-read all of them."""
    with store.transaction():
        bulk.insert_entities(store, ENTITIES)
        bulk.insert_facts(store, FACTS)
        bulk.insert_new_vectors(store, "entity", ["e1", "e2"], np.ones((2, DIM), np.float32), "m")
    logged = {(kind, uuid) for _, kind, uuid, _ in log_sql.changes_since(store, 0)}
    assert logged == {("entity", "e1"), ("entity", "e2"), ("fact", "f1"), ("fact", "f2"),
                      ("entity_vector", "e1"), ("entity_vector", "e2")}  # fmt: skip


def test_a_duckdb_import_commits_without_checkpoints_and_checkpoints_once_at_its_end(tmp_path):
    """Inside ``bulk_writes`` a commit does not checkpoint (the log grows past DuckDB's 16 MB);
    the threshold is put back when the last of two side-by-side imports ends, and the log is
    written into the file then."""
    store = Store.open(tmp_path / "kb.duckdb", dim=384)
    wal = tmp_path / "kb.duckdb.wal"
    setting = "SELECT current_setting('checkpoint_threshold')"
    try:
        before = store.fetchone(setting)[0]
        vectors = np.ones((2048, 384), np.float32)
        with store.bulk_writes():
            with store.bulk_writes():  # a second import side by side
                for chunk in range(7):  # ~22 MB of vectors: past the threshold
                    uuids = [f"e{chunk}-{i}" for i in range(2048)]
                    with store.transaction():
                        bulk.insert_new_vectors(store, "entity", uuids, vectors, "m")
                assert wal.stat().st_size > 17 * 2**20  # no checkpoint at the commits
            assert store.fetchone(setting)[0] != before  # the other import still runs
        assert store.fetchone(setting)[0] == before
        assert not wal.exists() or wal.stat().st_size < 2**20  # checkpointed at the end
        assert store.fetchone("SELECT count(*) FROM entity_embeddings")[0] == 7 * 2048
    finally:
        store.close()


def test_a_registered_frame_reads_back_as_written(store):
    """``Store.register`` (the live writes' vectors, restores, access updates): on PostgreSQL a
    binary COPY of the same encoding where every column has one, else a row at a time (a
    list of varying size); either way every value reads back as it was."""
    import pyarrow as pa

    vectors = np.random.default_rng(3).normal(size=(3, DIM)).astype(np.float32)
    frame = pa.table(
        {
            "name": pa.array(["Zoë \t\\", None, "東京"], pa.string()),
            "at": pa.array(
                [
                    datetime(1901, 1, 1, tzinfo=UTC),
                    None,
                    datetime(2026, 3, 1, 12, 0, 0, 123_456, tzinfo=UTC),
                ],
                pa.timestamp("us", "UTC"),
            ),  # fmt: skip
            "n": pa.array([1, None, 2**40], pa.int64()),
            "x": pa.array([0.1, -2.5, None], pa.float64()),
            "ok": pa.array([True, None, False], pa.bool_()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), DIM),
        }
    )
    ragged = pa.table({"name": ["a", "b"], "parts": pa.array([[1.5], [2.5, 3.5]],
                                                          pa.list_(pa.float64()))})  # fmt: skip
    for name, table in (("_t_frame", frame), ("_t_ragged", ragged)):
        with store.transaction():
            store.register(name, table)
            try:
                back = store.fetch_arrow(f"SELECT * FROM {name}")
            finally:
                store.unregister(name)
        for column in table.column_names:
            got, want = back.column(column).to_pylist(), table.column(column).to_pylist()
            if column == "vector":
                assert np.array_equal(np.asarray(got, np.float32), vectors)
            elif column == "at":
                assert [g and g.astimezone(UTC) for g in got] == want
            else:
                assert got == want, column
