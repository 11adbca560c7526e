"""Backup and restore: what ``export_parquet`` writes, restored into an empty store, is the
same database (every table's rows, uuids, validity, decay state and vectors), on either
backend (the targets are ``Store.open(":memory:")``: PostgreSQL under
WORKBENCH_TEST_BACKEND=postgres)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.config import load_settings
from workbench.errors import InvalidInput
from workbench.facade import Workbench
from workbench.store import TABLES, Store
from workbench.store.restore import read_backup, restore

RECORDS = [
    {"type": "entity", "name": "Maria Keller", "entity_type": "Person", "importance": 5},
    {
        "type": "fact",
        "source": "Maria Keller",
        "target": "Acme",
        "relation": "WORKS_AT",
        "fact": "Maria Keller works at Acme",
        "valid_at": "2024-01-01T00:00:00Z",
        "invalid_at": "2025-06-01T00:00:00Z",
    },
    {"type": "fact", "source": "Tom", "target": "Berlin", "fact": "Tom lives in Berlin"},
]


@pytest.fixture
def backup(tmp_path, hash_embedder):
    """A store with memories, an episode in the queue, a maintenance run and an LLM call,
    exported; and the rows of every table it held."""
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        wb.import_jsonl([json.dumps(r) for r in RECORDS])
        wb.add_memory("note", "Maria moved to Lisbon in 2025.")
        wb.run_decay_maintenance()
        wb.store.execute(
            "INSERT INTO llm_calls (ts, prompt_name, model, status, total_cost) "
            "VALUES (now(), 'extract', 'm', 'success', 0.25)"
        )
        wb.store.execute("UPDATE facts SET lifecycle_state = 'DORMANT', decay_score = 0.4")
        wb.store.export_parquet(tmp_path / "backup")
        before = {table: table_rows(wb.store, table) for table in TABLES}
    return tmp_path / "backup", before


def table_rows(store, table: str) -> list[tuple]:
    """Every row as sorted (column, value) pairs, vectors as tuples (comparable)."""
    plain = []
    for row in store.fetch_dicts(f"SELECT * FROM {table}"):
        values = []
        for key in sorted(row):
            value = row[key]
            if isinstance(value, np.ndarray | list | tuple):
                value = tuple(round(float(x), 6) for x in value)
            values.append((key, value))
        plain.append(tuple(values))
    return sorted(plain, key=repr)


def test_a_backup_restored_into_an_empty_store_is_the_same_database(backup):
    folder, before = backup
    assert before["entities"] and before["facts"] and before["episodes"] and before["queue"]
    assert before["fact_embeddings"] and before["maintenance_runs"] and before["llm_calls"]
    snapshot = read_backup(folder)
    assert snapshot.dim == 384 and snapshot.model
    store = Store.open(":memory:", dim=snapshot.dim, embedding_model=snapshot.model)
    try:
        report = restore(store, snapshot)
        assert report["restored"]["facts"] == 2 and report["skipped_files"] == []
        for table in TABLES:
            assert table_rows(store, table) == before[table], table
    finally:
        store.close()


def test_new_rows_after_a_restore_never_collide_with_restored_ones(backup, hash_embedder):
    folder, before = backup
    snapshot = read_backup(folder)
    store = Store.open(":memory:", dim=snapshot.dim, embedding_model=snapshot.model)
    try:
        restore(store, snapshot)
        store.execute(
            "INSERT INTO llm_calls (ts, prompt_name, model, status) "
            "VALUES (now(), 'extract', 'm', 'success')"
        )
        ids = [row[0] for row in store.fetchall("SELECT id FROM llm_calls ORDER BY id")]
        assert len(ids) == 2 and ids[1] > ids[0]
        seqs = store.fetchall(
            "SELECT seq FROM fact_embeddings UNION ALL SELECT seq FROM entity_embeddings"
        )
        store.execute(
            "INSERT INTO fact_embeddings (uuid, model, vector) VALUES ('new', 'm', ?)",
            [[0.0] * snapshot.dim],
        )
        new = store.fetchone("SELECT seq FROM fact_embeddings WHERE uuid = 'new'")[0]
        assert new > max(s[0] for s in seqs)
    finally:
        store.close()


def test_a_restore_never_merges_into_a_database_that_holds_rows(backup):
    folder, _ = backup
    snapshot = read_backup(folder)
    store = Store.open(":memory:", dim=snapshot.dim, embedding_model=snapshot.model)
    try:
        restore(store, snapshot)
        with pytest.raises(InvalidInput, match="not empty"):
            restore(store, snapshot)
    finally:
        store.close()


def test_a_folder_without_a_backup_is_one_clear_error(tmp_path):
    with pytest.raises(InvalidInput, match="no backup"):
        read_backup(tmp_path)


def test_a_table_the_schema_does_not_know_is_reported_not_lost(backup):
    import shutil

    folder, _ = backup
    shutil.copy(folder / "facts.parquet", folder / "future_table.parquet")
    snapshot = read_backup(folder)
    store = Store.open(":memory:", dim=snapshot.dim, embedding_model=snapshot.model)
    try:
        assert restore(store, snapshot)["skipped_files"] == ["future_table.parquet"]
    finally:
        store.close()


def test_a_backup_moves_between_the_backends(backup, pg_location):
    """Exported from the suite's backend (DuckDB by default), restored into PostgreSQL."""
    folder, before = backup
    snapshot = read_backup(folder)
    store = Store.open(pg_location, dim=snapshot.dim, embedding_model=snapshot.model)
    try:
        restore(store, snapshot)
        for table in ("episodes", "entities", "facts", "fact_embeddings", "llm_calls"):
            assert table_rows(store, table) == before[table], table
    finally:
        store.close()


def test_a_backup_restores_into_a_duckdb_file(backup, tmp_path):
    """Into a file (from PostgreSQL when the suite runs there: the other way round)."""
    folder, before = backup
    snapshot = read_backup(folder)
    target = tmp_path / "restored.duckdb"
    store = Store.open(target, dim=snapshot.dim, embedding_model=snapshot.model)
    try:
        restore(store, snapshot)
        for table in TABLES:
            assert table_rows(store, table) == before[table], table
    finally:
        store.close()


# --- a backup passes the tools' input rules (issue 55, items 6 and 13) -----------------------
def edit(folder, table: str, column: str, position: int, value) -> None:
    """Set one cell of a backup's table file (``position`` from 0)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    frame = pq.read_table(folder / f"{table}.parquet")
    values = frame.column(column).to_pylist()
    values[position] = value
    index = frame.schema.get_field_index(column)
    column_type = frame.schema.field(column).type
    frame = frame.set_column(index, column, pa.array(values, type=column_type))
    pq.write_table(frame, folder / f"{table}.parquet")


def restored_into_memory(folder, **options):
    snapshot = read_backup(folder)
    store = Store.open(":memory:", dim=snapshot.dim, embedding_model=snapshot.model)
    try:
        return restore(store, snapshot, **options), table_rows(store, "entities")
    finally:
        store.close()


@pytest.mark.parametrize(
    ("table", "column", "value", "message"),
    [
        ("episodes", "group_id", "no such group!", "episodes.parquet row 1: group_id"),
        ("entities", "name", "Maria\x00Keller", "entities.parquet row 1: 'name' contains a NUL"),
        ("episodes", "body", "x" * 101, "episodes.parquet row 1: 'body' has more than 100"),
        ("episodes", "source", "shell", "episodes.parquet row 1: 'source'"),
        ("facts", "source_uuid", "5b0c8e6e-0000-4000-8000-000000000000", "dangling fact"),
        ("facts", "group_id", "../etc", "facts.parquet row 1: group_id '../etc'"),
    ],
)
def test_a_row_no_tool_would_accept_refuses_the_backup(backup, table, column, value, message):
    folder, _ = backup
    edit(folder, table, column, 0, value)
    snapshot = read_backup(folder)
    store = Store.open(":memory:", dim=snapshot.dim, embedding_model=snapshot.model)
    try:
        with pytest.raises(InvalidInput, match="nothing was restored") as refused:
            restore(store, snapshot, max_body_chars=100)
        assert message in str(refused.value)
        for name in TABLES:  # nothing half restored
            assert store.one(f"SELECT count(*) FROM {name}")[0] == 0, name
    finally:
        store.close()


def test_a_fifo_in_the_backup_folder_is_refused_not_waited_on(backup):
    import os

    folder, _ = backup
    os.mkfifo(folder / "stuck.parquet")
    with pytest.raises(InvalidInput, match="stuck.parquet is a FIFO"):
        read_backup(folder)


def test_an_open_run_is_restored_discarded_and_a_crafted_run_id_refused(backup, tmp_path):
    """A backup brings no shadow: its open runs come back discarded (their shadow_path is
    never read: tests/ingest/test_reextract.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder, _ = backup
    run = {"run_id": "rx-0123456789ab", "group_id": "main", "state": "built", "model": "m",
           "shadow_path": str(tmp_path / "victim"), "episodes": 1, "predicted_calls": 1,
           "calls_copied": 0,
           "created_at": pa.scalar(0, pa.timestamp("us", "UTC")).as_py()}  # fmt: skip
    pq.write_table(pa.Table.from_pylist([run]), folder / "reextract_runs.parquet")
    snapshot = read_backup(folder)
    store = Store.open(":memory:", dim=snapshot.dim, embedding_model=snapshot.model)
    try:
        assert restore(store, snapshot)["runs_discarded"] == 1
        assert store.fetchall("SELECT state FROM reextract_runs") == [("discarded",)]
    finally:
        store.close()
    pq.write_table(pa.Table.from_pylist([{**run, "run_id": "../../x"}]),
                   folder / "reextract_runs.parquet")  # fmt: skip
    with pytest.raises(InvalidInput, match="reextract_runs.parquet row 1: run_id '../../x'"):
        restored_into_memory(folder)
