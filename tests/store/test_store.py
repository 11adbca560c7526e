import json
import subprocess
import sys

import numpy as np
import pytest

from workbench.errors import DimensionMismatch, StoreLocked
from workbench.store import SCHEMA_VERSION, TABLES, Store
from workbench.store import graph as g


def test_schema_is_created_and_versioned(tmp_path):
    path = tmp_path / "kb.duckdb"
    store = Store.open(path, dim=8, embedding_model="m")
    names = {r[0] for r in store.fetchall("SELECT table_name FROM information_schema.tables")}
    assert set(TABLES) <= names
    assert store.meta("schema_version") == str(SCHEMA_VERSION)
    store.close()
    again = Store.open(path, dim=8)  # re-opening migrates nothing and keeps data
    assert again.meta("embedding_dim") == "8"
    again.close()


def _indexes(store, table):
    return {
        r[0]
        for r in store.fetchall(
            "SELECT index_name FROM duckdb_indexes() WHERE table_name = ?", [table]
        )
    }


def test_a_version_1_file_loses_the_queue_state_index_and_keeps_its_rows(tmp_path):
    # version 1 indexed queue(state, ...): DuckDB never used it for a query, and it turned
    # every state change of a message into a delete and re-insert of the row
    path = tmp_path / "kb.duckdb"
    store = Store.open(path, dim=8, embedding_model="m")
    assert _indexes(store, "queue") == set()
    store.execute("CREATE INDEX queue_state ON queue(state, priority, enqueued_at)")
    store.execute("""INSERT INTO queue (episode_uuid, group_id, enqueued_at, available_at)
                     VALUES ('e1', 'g', now(), now())""")
    store.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    store.close()
    again = Store.open(path, dim=8)
    assert again.meta("schema_version") == str(SCHEMA_VERSION)
    assert _indexes(again, "queue") == set()
    assert again.fetchall("SELECT episode_uuid, state FROM queue") == [("e1", "queued")]
    again.close()


def test_a_file_built_for_another_dimension_is_refused(tmp_path):
    path = tmp_path / "kb.duckdb"
    Store.open(path, dim=8, embedding_model="small").close()
    with pytest.raises(DimensionMismatch, match="8-dimensional"):
        Store.open(path, dim=16, embedding_model="big")


def test_a_locked_file_names_its_path(tmp_path):
    path = tmp_path / "kb.duckdb"
    Store.open(path, dim=8).close()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb,time; c=duckdb.connect({str(path)!r}); print('ok', flush=True); "
            "time.sleep(30)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ok"
        with pytest.raises(StoreLocked, match=str(path)):
            Store.open(path, dim=8)
    finally:
        holder.kill()


def test_transactions_roll_back_as_a_whole():
    store = Store.open(":memory:", dim=4)
    with pytest.raises(RuntimeError), store.transaction():
        store.execute("INSERT INTO meta VALUES ('a', '1')")
        with store.transaction():  # nested joins the outer one
            store.execute("INSERT INTO meta VALUES ('b', '2')")
        raise RuntimeError("boom")
    assert store.meta("a") is None and store.meta("b") is None


def test_embeddings_round_trip_and_parquet_snapshot(tmp_path):
    store = Store.open(":memory:", dim=4)
    vecs = np.eye(4, dtype=np.float32)[:2]
    g.insert_embeddings(store, "entity", ["a", "b"], vecs, "m")
    g.insert_embeddings(store, "entity", ["a"], vecs[1:], "m")  # upsert
    rows = dict(store.fetchall("SELECT uuid, vector FROM entity_embeddings ORDER BY uuid"))
    assert list(rows["a"]) == [0.0, 1.0, 0.0, 0.0]
    store.export_parquet(tmp_path / "snap")
    snap = Store.open_snapshot(tmp_path / "snap")
    assert snap.fetchone("SELECT count(*) FROM entity_embeddings")[0] == 2
    assert snap.read_only and snap.dim == 4


def test_executemany_inserts_every_row_in_chunks():
    store = Store.open(":memory:", dim=4)
    rows = [[f"k{i}", str(i)] for i in range(1234)]
    store.executemany("INSERT INTO meta VALUES (?, ?)", rows)
    assert store.fetchone("SELECT count(*), sum(value::INT) FROM meta WHERE key LIKE 'k%'") == (
        1234,
        sum(range(1234)),
    )
    store.executemany("UPDATE meta SET value = ? WHERE key = ?", [["x", "k1"], ["y", "k2"]])
    assert store.meta("k1") == "x" and store.meta("k2") == "y"


def test_a_multi_row_insert_stores_what_row_by_row_inserts_store():
    """Rows go in as one list per column; NULLs, time zones, booleans, lists, numbers that
    mix ints and floats and conflicts must come out as row-by-row inserts leave them."""
    from datetime import datetime, timedelta, timezone

    def fill(many: bool) -> list:
        store = Store.open(":memory:", dim=4)
        store.execute("""CREATE TABLE t (k VARCHAR PRIMARY KEY, ts TIMESTAMPTZ, n DOUBLE,
                                          ok BOOLEAN, v FLOAT[], note VARCHAR)""")
        cet = timezone(timedelta(hours=1))
        rows = [
            ["a", datetime(2026, 1, 1, 12, tzinfo=cet), 1, True, [1.0, 2.0], None],
            ["b", None, 2.5, None, None, "x"],
            ["c", datetime(2026, 1, 2, tzinfo=timezone.utc), None, False, [], "y'z"],
        ]
        sql = "INSERT INTO t VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
        if many:
            store.executemany(sql, rows)
            store.executemany(sql, [["a", None, 9, None, None, "again"], ["d"] + [None] * 5])
        else:
            for row in rows + [["a", None, 9, None, None, "again"], ["d"] + [None] * 5]:
                store.execute(sql, row)
        return store.fetchall("SELECT * FROM t ORDER BY k")

    assert fill(many=True) == fill(many=False)


def test_a_multi_row_insert_keeps_each_rows_struct_and_refuses_ragged_rows():
    store = Store.open(":memory:", dim=4)
    store.execute("CREATE TABLE j (k VARCHAR, v JSON)")
    # dicts of different shapes: unnested together they would become one STRUCT type
    store.executemany("INSERT INTO j VALUES (?, ?)", [["a", {"x": 1}], ["b", {"y": "s"}]])
    rows = store.fetchall("SELECT k, v::VARCHAR FROM j ORDER BY k")
    assert [(k, json.loads(v)) for k, v in rows] == [("a", {"x": 1}), ("b", {"y": "s"})]
    with pytest.raises(ValueError, match="2 values"):
        store.executemany("INSERT INTO j VALUES (?, ?)", [["c", None], ["d"]])
    assert store.fetchone("SELECT count(*) FROM j")[0] == 2


LOG_INSERT = "INSERT INTO meta VALUES (?, ?)"


def _meta_keys(store) -> set[str]:
    return {r[0] for r in store.fetchall("SELECT key FROM meta WHERE key LIKE 'log%'")}


def test_deferred_rows_are_visible_to_a_read_of_their_table():
    store = Store.open(":memory:", dim=4)
    store.defer("meta", LOG_INSERT, ["log1", "a"])
    store.defer("meta", LOG_INSERT, ["log2", "b"])
    assert store.deferred_rows == 2
    store.fetchone("SELECT 1")  # a read of another table leaves them waiting
    assert store.deferred_rows == 2
    assert _meta_keys(store) == {"log1", "log2"}
    assert store.deferred_rows == 0


def test_deferred_rows_join_the_next_transaction_and_survive_its_rollback():
    store = Store.open(":memory:", dim=4)
    store.defer("meta", LOG_INSERT, ["log1", "a"])
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.execute("CREATE TABLE scratch (x INTEGER)")
            store.defer("meta", LOG_INSERT, ["log2", "b"])
            raise RuntimeError("the unit of work fails")
    assert store.deferred_rows == 2  # rolled back with it, but kept for the next write
    store.execute("CREATE TABLE scratch (x INTEGER)")  # an autocommit write takes them along
    assert store.deferred_rows == 0
    assert _meta_keys(store) == {"log1", "log2"}


def test_deferred_rows_are_written_at_close(tmp_path):
    path = tmp_path / "kb.duckdb"
    store = Store.open(path, dim=4)
    store.defer("meta", LOG_INSERT, ["log1", "a"])
    store.close()
    again = Store.open(path, dim=4)
    assert _meta_keys(again) == {"log1"}
    again.close()


def test_a_group_is_not_claimed_while_one_of_its_messages_is_in_flight():
    from datetime import UTC, datetime

    from workbench.store import queue as q

    now = datetime(2026, 3, 1, tzinfo=UTC)
    store = Store.open(":memory:", dim=4)
    for uuid in ("e1", "e2"):
        q.enqueue(store, uuid, "g", 1, now)
    [first], _ = q.claim_heads(store, "w", now, 60, limit=4)
    assert q.mark_failed(store, "e1", now, "UnknownError", "boom", first["seq"], owner="w")
    [second], _ = q.claim_heads(store, "w", now, 60, limit=4)
    assert second["episode_uuid"] == "e2"
    # the failed, older message is queued again while e2 runs: it waits for e2
    assert q.requeue_failed(store, now, ["e1"], None) == ["e1"]
    assert q.claim_heads(store, "w", now, 60, limit=4)[0] == []
    q.mark_done_many(store, ["e2"], now)
    assert [m["episode_uuid"] for m in q.claim_heads(store, "w", now, 60, limit=4)[0]] == ["e1"]
    store.close()


def vectors_on_disk(tmp_path, rows: int) -> tuple[Store, str]:
    """A DuckDB file of ``rows`` 4-dimensional vectors, checkpointed, its cache given back;
    and DuckDB's memory limit as the store pins it."""
    store = Store.open(str(tmp_path / "kb.duckdb"), dim=4)
    store.execute(
        "INSERT INTO entity_embeddings (uuid, model, vector) SELECT 'u' || i, 'm', "
        f"[random(), random(), random(), random()]::FLOAT[4] FROM range({rows}) t(i)"
    )
    store.checkpoint()
    store.release_cache()
    return store, store.fetchone("SELECT current_setting('memory_limit')")[0]


def cached_blocks(store: Store) -> int:
    return store.fetchone(
        "SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() WHERE tag = 'BASE_TABLE'"
    )[0]


@pytest.mark.duckdb_only("DuckDB's own block cache")
def test_release_cache_gives_back_cached_blocks_and_keeps_the_memory_limit(tmp_path):
    store, limit = vectors_on_disk(tmp_path, 1_000_000)
    assert "GiB" in limit or float(limit.split()[0]) > 100  # not left at the low one
    store.fetch_arrow("SELECT * FROM entity_embeddings")
    before = cached_blocks(store)
    store.release_cache()
    assert cached_blocks(store) < before
    assert store.fetchone("SELECT current_setting('memory_limit')")[0] == limit
    store.release_cache()  # again: the limit does not drift
    assert store.fetchone("SELECT current_setting('memory_limit')")[0] == limit
    # a statement that needs far more than the lowered limit still runs
    sorted_ = store.fetch_arrow("SELECT uuid, vector FROM entity_embeddings ORDER BY vector[1]")
    assert sorted_.num_rows == 1_000_000
    store.close()


@pytest.mark.duckdb_only("DuckDB's own block cache")
def test_lean_cache_bounds_what_a_full_read_keeps_and_sets_the_limit_back(tmp_path):
    store, limit = vectors_on_disk(tmp_path, 3_000_000)
    store.fetch_arrow("SELECT * FROM entity_embeddings")
    unbounded = cached_blocks(store)
    store.release_cache()
    with store.lean_cache(limit_mb=32):
        assert store.fetchone("SELECT current_setting('memory_limit')")[0] == "30.5 MiB"
        # a full read, and a sort of more than the limit (spilled), both run
        assert store.fetch_arrow("SELECT * FROM entity_embeddings").num_rows == 3_000_000
        assert cached_blocks(store) <= 32 * 2**20 < unbounded
        ordered = store.fetch_arrow("SELECT uuid FROM entity_embeddings ORDER BY vector[1]")
        assert ordered.num_rows == 3_000_000
    assert store.fetchone("SELECT current_setting('memory_limit')")[0] == limit
    assert cached_blocks(store) < 32 * 2**20  # and what it kept is given back
    store.close()


@pytest.mark.duckdb_only("DuckDB's own memory limit")
def test_a_read_out_of_memory_under_lean_cache_is_a_memory_error_and_the_engine_loads_anyway(
    tmp_path, monkeypatch
):
    from workbench.fakes.embedder import HashEmbedder
    from workbench.index.live import LiveIndexes
    from workbench.search.engine import SearchEngine

    store = Store.open(str(tmp_path / "kb.duckdb"), dim=8)
    store.release_cache()  # the limit as the store pins it (DuckDB shows it rounded)
    limit = store.fetchone("SELECT current_setting('memory_limit')")[0]
    with pytest.raises(MemoryError, match="ran out of memory under 1 MB"):
        with store.lean_cache(limit_mb=1):
            store.fetch_arrow(  # a hash aggregate that must hold more than 1 MB
                "SELECT i % 200000 AS k, list(i) FROM range(2000000) t(i) GROUP BY k"
            )
    assert store.fetchone("SELECT current_setting('memory_limit')")[0] == limit

    loads = []
    real = LiveIndexes._load

    def load(self, snapshots):
        loads.append(store.fetchone("SELECT current_setting('memory_limit')")[0])
        if len(loads) == 1:
            raise MemoryError("as DuckDB's Out of Memory Error under the lean limit")
        return real(self, snapshots)

    monkeypatch.setattr(LiveIndexes, "_load", load)
    engine = SearchEngine(store, HashEmbedder(dimensions=8), access_background=False)
    assert loads == ["244.1 MiB", limit]  # loaded again, unbounded
    engine.close()
    store.close()


@pytest.mark.duckdb_only("DuckDB's own block cache")
def test_release_cache_keeps_no_limit_and_leaves_in_memory_data_alone(tmp_path):
    store = Store.open(str(tmp_path / "kb.duckdb"), dim=4)
    store._con.execute("SET memory_limit = '-1'")  # no limit: shown as PiB, not parseable
    store.release_cache()
    assert "PiB" in store.fetchone("SELECT current_setting('memory_limit')")[0]
    store.close()

    memory = Store.open(":memory:", dim=4)
    memory.execute(
        "INSERT INTO entity_embeddings (uuid, model, vector) SELECT 'u' || i, 'm', "
        "[random(), random(), random(), random()]::FLOAT[4] FROM range(1000000) t(i)"
    )
    memory.path = "snapshot:somewhere"  # as Store.open_snapshot names its in-memory database
    memory.release_cache()
    spilled = memory.fetchone("SELECT sum(temporary_storage_bytes) FROM duckdb_memory()")[0]
    assert spilled == 0  # its tables are its data: not pushed out to disk
    memory.close()


@pytest.mark.parametrize(
    "shown, value",
    [("18.7 GiB", "20079MB"), ("512.0 MiB", "537MB"), ("16383.9 PiB", "-1"), ("?", None)],
)
def test_a_shown_memory_limit_reads_back_as_a_settable_value(shown, value):
    from workbench.store import memory_limit_value

    assert memory_limit_value(shown) == value


def test_vectors_are_read_from_arrow_chunks_of_any_kind():
    """Fixed-size lists (DuckDB's FLOAT[n]) and lists (PostgreSQL's REAL[]), whole or sliced
    (a chunk's values are only its own rows'), into one float32 matrix."""
    import pyarrow as pa

    from workbench.store.search import vector_matrix

    matrix = np.arange(15, dtype=np.float32).reshape(5, 3)
    fixed = pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), 3)
    chunks = pa.chunked_array([fixed.slice(0, 2), fixed.slice(2, 1), fixed.slice(3, 2)])
    assert np.array_equal(vector_matrix(chunks, 3), matrix)
    lists = pa.array(matrix.astype(np.float64).tolist(), pa.list_(pa.float64())).slice(1, 3)
    assert np.array_equal(vector_matrix(pa.chunked_array([lists]), 3), matrix[1:4])
    with pytest.raises(ValueError, match="3-dimensional"):
        vector_matrix(pa.chunked_array([pa.array([[1.0, 2.0]], pa.list_(pa.float32()))]), 3)
