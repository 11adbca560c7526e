"""A snapshot of one memory kind's rows, saved with its HNSW graph on a store shared by several
processes (PostgreSQL), so that a new replica whose saved indexes are current need not read
every row of the store.

What is saved: the :class:`~workbench.index.rows.RowCache` of the kind as one Arrow IPC file
(``<kind>.<save>.rows.arrow``, zstd-compressed, the store's columns, as
:func:`~workbench.store.search.load_table` reads them; no pickle: another replica fetches it),
named in the graph's manifest (``<kind>.json``, ``files["rows"]``) so that it is written,
fetched and removed with the graph, and a :class:`Stamp` in the file's schema metadata: what
store state the rows reflect.

When it is trusted (see :mod:`workbench.index.live`): when its change-log position is still
held by the log (not pruned) and not ahead of it, and the newest vector write is not older than
the stamp's (a database restored from a copy); the change log is then followed from the stamp,
which names every memory written or deleted since, by anyone. A maintenance run writes no
change rows: a stamp with an older maintenance marker is served and the states are re-read in
the background. Anything else (no file, another format, a corrupt file, a stamp without a
position) is a full read of the rows, as without a snapshot.

Why not on a database file: there the full read is one columnar DuckDB scan, a small part of
it; the rest (Python strings for texts and uuids) a snapshot costs as well. Comparing a
snapshot with the stored rows inside DuckDB (a hash of every column) was cheap, but opens from
it were no quicker and held more memory (figures in ``docs/performance.md``).
"""

from __future__ import annotations

import json
import logging
import os
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FORMAT", "ChangePosition", "Stamp", "earliest", "read", "remove_others", "write"]

log = logging.getLogger("workbench.index.row_snapshot")

FORMAT = 1  # the file's layout; another one is not read (a full read instead)
_META = b"workbench.rows"

# a change-log position: the newest number applied, and the numbers missing below it -> the
# xmax of the snapshot that saw them missing (see :class:`~workbench.index.sync.ChangeSync`)
ChangePosition = tuple[int, dict[int, int]]


@dataclass(frozen=True)
class Stamp:
    """What store state a snapshot reflects: every write up to ``changes`` (a shared store's
    change-log position; None on a DuckDB file), the newest vector write ``vector_seq``, and
    the maintenance run ``marker`` (see :func:`~workbench.store.search.maintenance_marker`)."""

    marker: int
    vector_seq: int | None = None
    changes: ChangePosition | None = None
    # the checksum of the keyword index saved with these rows (None: none was)
    keywords: str | None = None

    def to_json(self) -> str:
        changes = None
        if self.changes is not None:
            last, gaps = self.changes
            changes = {"last": last, "gaps": [[s, x] for s, x in sorted(gaps.items())]}
        return json.dumps({"format": FORMAT, "marker": self.marker, "vector_seq": self.vector_seq,
                           "changes": changes, "keywords": self.keywords})  # fmt: skip

    @classmethod
    def from_json(cls, text: str | bytes) -> Stamp | None:
        """The stamp written by :meth:`to_json`; None for another format or a damaged one."""
        try:
            data = json.loads(text)
            if data.get("format") != FORMAT:
                return None
            changes = data.get("changes")
            position = None
            if changes is not None:
                gaps = {int(s): int(x) for s, x in changes["gaps"]}
                position = (int(changes["last"]), gaps)
            seq, keywords = data.get("vector_seq"), data.get("keywords")
            return cls(int(data["marker"]), None if seq is None else int(seq), position,
                       str(keywords) if keywords else None)  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            return None


def write(folder: Path, kind: str, table: pa.Table, stamp: Stamp) -> str:
    """Write the rows ``table`` of ``kind`` with its ``stamp`` into ``folder``, flushed to disk
    (the manifest that names it is written after); the file's name."""
    import pyarrow as pa

    name = f"{kind}.{uuidlib.uuid4().hex[:12]}.rows.arrow"
    meta = {_META: stamp.to_json().encode(), b"workbench.kind": kind.encode()}
    table = table.replace_schema_metadata(meta)
    with pa.OSFile(str(folder / name), "wb") as sink:
        options = pa.ipc.IpcWriteOptions(compression="zstd")  # a third of the size
        with pa.ipc.new_file(sink, table.schema, options=options) as writer:
            writer.write_table(table)
    with open(folder / name, "rb+") as handle:
        os.fsync(handle.fileno())
    return name


def read(folder: Path | None, kind: str, columns: Sequence[str]) -> tuple[pa.Table, Stamp] | None:
    """The rows of ``kind`` saved with its graph in ``folder`` and their stamp; None when
    there is none, or it cannot serve (another format, another kind, a column missing, a
    damaged file: logged)."""
    if folder is None:
        return None
    try:
        files = json.loads((folder / f"{kind}.json").read_text()).get("files") or {}
        name = files.get("rows") if isinstance(files, Mapping) else None
    except (OSError, ValueError, AttributeError):
        return None
    if not name:
        return None
    try:
        return _read(folder / str(name), kind, columns)
    except Exception:  # noqa: BLE001 - a damaged snapshot: every row is read instead
        log.warning("the saved %s rows could not be read: reading them from the store", kind,
                    exc_info=True)  # fmt: skip
        return None


def _read(path: Path, kind: str, columns: Sequence[str]) -> tuple[pa.Table, Stamp] | None:
    import pyarrow as pa

    with pa.memory_map(str(path)) as source:
        reader = pa.ipc.open_file(source)
        meta = reader.schema.metadata or {}
        stamp = Stamp.from_json(meta.get(_META, b""))
        if stamp is None or meta.get(b"workbench.kind") != kind.encode():
            log.warning("the saved %s rows are of another format: reading them from the store",
                        kind)  # fmt: skip
            return None
        missing = set(columns) - set(reader.schema.names)
        if missing:
            log.warning("the saved %s rows lack %s: reading them from the store", kind,
                        ", ".join(sorted(missing)))  # fmt: skip
            return None
        return reader.read_all(), stamp


def earliest(stamps: Sequence[ChangePosition]) -> ChangePosition:
    """Where to follow the change log from so that every snapshot of ``stamps`` is caught up:
    the oldest position, with the numbers any of them had not seen below it."""
    last, gaps = min(stamps, key=lambda position: position[0])
    merged = dict(gaps)
    for _, other in stamps:
        for seq, xmax in other.items():
            if seq <= last:
                merged[seq] = max(xmax, merged.get(seq, xmax))
    return last, merged


def remove_others(folder: Path, kind: str, keep: str | None) -> None:
    """Delete the row snapshots of ``kind`` in ``folder`` but ``keep``."""
    for path in folder.glob(f"{kind}.*.rows.arrow"):
        if path.name != keep:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                log.warning("could not remove %s", path)
