"""Search indexes saved in the database itself, for processes that share a database server.

A process on a DuckDB file saves its HNSW graphs and keyword indexes in a folder beside the
file and opens them at the next start. Replicas of a PostgreSQL store have no common folder:
each save is written into ``saved_index_files`` instead (its files cut in parts of
:data:`PART_BYTES`), and a starting replica writes the newest save of each kind into a local
folder before it opens its indexes from there, exactly as from its own saved files: the save
records the newest vector write it holds (``seq``), so only the vectors written since are read
again, and the change log is followed from the position taken before the load.

- One process saves at a time: a save takes a transaction-level advisory lock and is skipped
  when another process holds it (that one's save serves as well).
- A save replaces the earlier ones of its kind in the same transaction (unless the stored one
  holds newer vectors); a reader reads the newest save a part at a time by its id, and starts
  again from the newer one if it was replaced meanwhile, so it never sees half of one and
  never holds more than a part in memory.
- A save writes only this table: writes of memories are never held up by it.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from workbench.store import Store

SAVE_LOCK = 0x776F726B62656E10  # the advisory lock of a save (one process at a time)
PART_BYTES = 16 * 1024 * 1024  # a file is stored in parts of at most this size


def files_of_save(folder: Path, kind: str) -> list[str] | None:
    """The names of the files of the save of ``kind`` in ``folder`` (its manifest last), the
    keyword index included when there is one; None when there is no complete save."""
    try:
        manifest = json.loads((folder / f"{kind}.json").read_text())
        names = [str(name) for name in dict(manifest["files"]).values()]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all((folder / name).is_file() for name in names):
        return None
    keywords = f"{kind}.keywords.npz"
    if (folder / keywords).is_file():
        names.append(keywords)
    return [*names, f"{kind}.json"]


def save_seq(folder: Path, kind: str) -> int | None:
    """The vector write the save of ``kind`` in ``folder`` holds (None: unknown or none)."""
    try:
        seq = json.loads((folder / f"{kind}.json").read_text()).get("seq")
    except (OSError, ValueError, AttributeError):
        return None
    return seq if isinstance(seq, int) else None


def publish(store: Store, folder: Path, kind: str) -> bool:
    """Store the save of ``kind`` found in ``folder`` as the newest one, replacing the earlier
    ones; False when there is none to store, another process is saving, or the stored save
    holds newer vectors (a higher ``seq``). The file is read and sent a part at a time."""
    names = files_of_save(folder, kind)
    if names is None:
        return False
    save_id, seq, now = uuidlib.uuid4().hex, save_seq(folder, kind), datetime.now(UTC)
    with store.transaction():
        if not store.advisory_lock(SAVE_LOCK):
            return False
        stored = newest(store, [kind]).get(kind)
        if seq is not None and stored is not None and stored > seq:
            return False  # another process stored a save holding newer vectors meanwhile
        store.execute("DELETE FROM saved_index_files WHERE kind = ?", [kind])
        for name in names:
            for part, data in enumerate(_parts(folder / name)):
                store.execute(
                    """INSERT INTO saved_index_files
                           (save_id, kind, name, part, seq, saved_at, data)
                       VALUES (?, ?, ?, ?, ?, ?, ?)""",
                    [save_id, kind, name, part, seq, now, data],
                )
    return True


def _parts(path: Path) -> Iterator[bytes]:
    """The file's bytes in parts of :data:`PART_BYTES` (one empty part for an empty file)."""
    with path.open("rb") as handle:
        data = handle.read(PART_BYTES)
        yield data
        while data := handle.read(PART_BYTES):
            yield data


def newest(store: Store, kinds: Sequence[str]) -> dict[str, int | None]:
    """kind -> the vector write its newest stored save holds, for the kinds that have one."""
    rows = store.fetchall(
        """SELECT kind, max(seq) FROM saved_index_files
           WHERE list_contains(?, kind) GROUP BY kind""",
        [list(kinds)],
    )
    return {str(kind): (int(seq) if seq is not None else None) for kind, seq in rows}


def fetch(store: Store, folder: Path, kind: str) -> bool:
    """Write the newest stored save of ``kind`` into ``folder`` (its manifest last, so that
    a save counts only once whole); False when there is none.

    The parts are read one statement each, so that no more than one is held in memory; they
    are found by the save's id, never changed once committed: a save that replaces this one
    meanwhile deletes its parts, and the fetch starts again from the newer save (the files
    written so far go; the manifest, written last, was not)."""
    for _ in range(FETCH_ATTEMPTS):
        listed = _newest_parts(store, kind)
        if listed is None:
            return False
        save_id, parts = listed
        if _write_parts(store, folder, kind, save_id, parts):
            return True
    return False


FETCH_ATTEMPTS = 5  # fetches started again when the save being read was replaced meanwhile


def _newest_parts(store: Store, kind: str) -> tuple[str, dict[str, int]] | None:
    """The id of the newest save of ``kind`` and the number of parts of each of its files
    (its manifest last); None when there is none, or it has no manifest."""
    rows = store.fetchall(
        """SELECT save_id, name, count(*) FROM saved_index_files
           WHERE save_id = (SELECT save_id FROM saved_index_files WHERE kind = ?
                            ORDER BY saved_at DESC LIMIT 1)
           GROUP BY save_id, name""",
        [kind],
    )
    manifest = f"{kind}.json"
    names = {str(name): int(count) for _, name, count in rows}
    if manifest not in names:
        return None
    ordered = {name: names[name] for name in sorted(names, key=lambda n: (n == manifest, n))}
    return str(rows[0][0]), ordered


def _write_parts(
    store: Store, folder: Path, kind: str, save_id: str, parts: dict[str, int]
) -> bool:
    """Write the files of the save ``save_id`` into ``folder``, a part at a time; False (and
    nothing of it left there) when a part is gone: the save was replaced meanwhile."""
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        for name, count in parts.items():
            path = folder / name
            if name == f"{kind}.json":  # the manifest, last: whole in memory (small)
                data = b"".join(_part(store, save_id, name, part) for part in range(count))
                tmp = folder / f"{name}.tmp"
                tmp.write_bytes(data)
                tmp.replace(path)
                return True
            written.append(path)
            with path.open("wb") as out:
                for part in range(count):
                    out.write(_part(store, save_id, name, part))
    except _PartGone:
        for path in written:
            path.unlink(missing_ok=True)
        return False
    return False  # no manifest listed (not reached: _newest_parts checks)


class _PartGone(Exception):
    """A part of the save being fetched is no longer stored (replaced by a newer save)."""


def _part(store: Store, save_id: str, name: str, part: int) -> bytes:
    row = store.fetchone(
        "SELECT data FROM saved_index_files WHERE save_id = ? AND name = ? AND part = ?",
        [save_id, name, part],
    )
    if row is None:
        raise _PartGone(name)
    return bytes(row[0])
