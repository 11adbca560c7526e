"""Restore a backup: the Parquet folder ``workbench export DIR`` writes, loaded back into an
empty database (DuckDB file or PostgreSQL alike).

The restore is generic over the tables: every ``<table>.parquet`` of the folder that names a
table of the schema is copied row for row (uuids, validity, decay state, vectors, queue and
cost logs as they were), with the columns the two share; a column the backup lacks takes its
default (a backup written before a migration added it). Afterwards each sequence a restored
column draws from (``llm_calls.id``, the vectors' ``seq``…) is moved past the largest value
restored, so that new rows never collide with restored ones.

Every row must pass the input rules the tools apply (:mod:`workbench.store.restore_rules`:
group names, NUL characters, an episode's size, dangling facts, run ids), else nothing is
restored and the broken rows are named by table and position. Only regular files are read:
a FIFO, socket or device named ``*.parquet`` in the folder is refused (reading one would
block). A re-extraction run left open in the backup is restored discarded: a backup brings
no shadow graph.

The target must be empty: a restore never merges (merging memories is what the import of
JSON lines does, with its dedupe). The embedding size and model are taken from the backup's
vectors, so the database is created for them.
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.errors import InvalidInput
from workbench.store import TABLES, Store
from workbench.store import reextract as rx
from workbench.store.restore_rules import RowProblems

BATCH_ROWS = 50_000
_NEXTVAL = re.compile(r"nextval\('([^']+)'", re.IGNORECASE)
_VECTOR_TABLES = ("entity_embeddings", "fact_embeddings")


@dataclass(frozen=True)
class Backup:
    """What a backup folder holds: its tables' files and the vectors' size and model."""

    directory: Path
    files: dict[str, Path]
    dim: int | None
    model: str


def is_backup(path: str | Path) -> bool:
    """Whether ``path`` is a folder written by ``workbench export``."""
    folder = Path(path).expanduser()
    return folder.is_dir() and (folder / "episodes.parquet").is_file()


def read_backup(path: str | Path) -> Backup:
    """The backup in ``path``; a folder that holds none is :class:`InvalidInput`."""
    import pyarrow.parquet as pq

    folder = Path(path).expanduser()
    if not is_backup(folder):
        raise InvalidInput(
            f"{folder} is no backup: expected the folder `workbench export DIR` writes "
            "(episodes.parquet, entities.parquet, facts.parquet, …)"
        )
    files = {p.stem: _regular(p) for p in sorted(folder.glob("*.parquet"))}
    dim, model = None, ""
    for table in _VECTOR_TABLES:
        if table in files and pq.ParquetFile(files[table]).metadata.num_rows:
            first = pq.read_table(files[table], columns=["model", "vector"]).slice(0, 1)
            model = first.column("model")[0].as_py() or ""
            dim = len(first.column("vector")[0].as_py())
            break
    return Backup(folder, files, dim, model)


def _regular(path: Path) -> Path:
    """``path`` when it is a regular file (a link to one too), else :class:`InvalidInput`."""
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else (
            "a socket" if stat.S_ISSOCK(mode) else "no regular file"
        )  # fmt: skip
        raise InvalidInput(
            f"{path} is {kind}, not a file `workbench export` writes: remove it from the "
            "backup folder and restore again"
        )
    return path


def restore(store: Store, backup: Backup, max_body_chars: int | None = None) -> dict[str, Any]:
    """Copy every table of ``backup`` into ``store`` (empty; one transaction); returns the rows
    restored per table, the backup's files that name no table of this schema and the open
    re-extraction runs discarded. Rows that break an input rule (``max_body_chars``: an
    episode's longest body) refuse the whole backup."""
    check_empty(store)
    if backup.dim is not None and backup.dim != store.dim:
        raise InvalidInput(
            f"the backup holds {backup.dim}-dimensional vectors ({backup.model or 'unknown'}) "
            f"and the database {store.path} was created for {store.dim}: restore into a new one"
        )
    problems = RowProblems(max_body_chars)
    problems.check_facts(backup.files)
    restored: dict[str, int] = {}
    with store.transaction():
        for table in TABLES:
            if table in backup.files:
                restored[table] = _copy_table(store, table, backup.files[table], problems)
        problems.raise_any(backup.directory)  # rolls the transaction back
        _advance_sequences(store)
        discarded = rx.discard_open_runs(store)
    skipped = sorted(set(backup.files) - set(TABLES))
    return {
        "restored": restored,
        "skipped_files": [f"{name}.parquet" for name in skipped],
        "runs_discarded": discarded,
    }


def check_empty(store: Store) -> None:
    filled = {}
    for table in TABLES:
        count = store.one(f"SELECT count(*) FROM {table}")[0]
        if count:
            filled[table] = count
    if filled:
        rows = ", ".join(f"{table} {count}" for table, count in filled.items())
        raise InvalidInput(
            f"the database {store.path} is not empty ({rows} rows): a backup is restored "
            "into an empty database (choose a new one with --db or SVC_KNOWLEDGE_DB_PATH)"
        )


def table_columns(store: Store, table: str) -> dict[str, str | None]:
    """The table's columns and their defaults (as the catalogue shows them)."""
    rows = store.fetchall(
        "SELECT column_name, column_default FROM information_schema.columns "
        "WHERE table_name = ? AND table_schema = current_schema() ORDER BY ordinal_position",
        [table],
    )
    return {name: default for name, default in rows}


def _copy_table(store: Store, table: str, path: Path, problems: RowProblems) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = table_columns(store, table)
    source = pq.ParquetFile(path)
    shared = [name for name in source.schema_arrow.names if name in columns]
    names = ", ".join(f'"{name}"' for name in shared)
    count = 0
    view = f"restore_{table}"
    for batch in source.iter_batches(batch_size=BATCH_ROWS, columns=shared):
        if not batch.num_rows:
            continue
        problems.check_batch(table, batch, count + 1)
        if problems.total:  # refused: only the rules of the rest are worth reading
            count += batch.num_rows
            continue
        store.register(view, pa.Table.from_batches([batch]))
        try:
            store.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {view}")
        finally:
            store.unregister(view)
        count += batch.num_rows
    return count


def _advance_sequences(store: Store) -> None:
    """Move every sequence a column draws from past the largest value restored in it."""
    highest: dict[str, int] = {}
    for table in TABLES:
        for column, default in table_columns(store, table).items():
            match = _NEXTVAL.search(default or "")
            if match:
                value = store.one(f'SELECT max("{column}") FROM {table}')[0]
                name = match.group(1)
                highest[name] = max(highest.get(name, 0), int(value or 0))
    for name, value in highest.items():
        if value > 0:
            _advance(store, name, value)


def _advance(store: Store, sequence: str, value: int) -> None:
    if store.backend == "postgres":
        store.fetchone("SELECT setval(?, ?)", [sequence, value])
    else:  # DuckDB has no setval: draw the values a fresh sequence would hand out first
        store.fetchone(f"SELECT max(nextval('{sequence}')) FROM range(?)", [value])
