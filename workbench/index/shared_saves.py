"""The saved indexes of a search engine on a store shared by several processes (a database
server): a private local folder, filled before the indexes load with the newest saves the
database holds (``store.saved_indexes``), and each save written there stored back in the
database, for the next replica to start from.

The engine uses the folder as a DuckDB process uses the one beside its file (the same files,
the same catching up); these calls are its only hooks. Neither may stop a start or a save:
a failure is logged, and the engine builds (or keeps) its indexes as without them.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from workbench.store import Store, saved_indexes

log = logging.getLogger("workbench.index.shared_saves")


def local_folder() -> Path:
    """A new private folder for this process's saved indexes (a replica starts from what
    the database holds, not from files another process may be writing)."""
    return Path(tempfile.mkdtemp(prefix="workbench-search-"))


def fetch_saved(store: Store, folder: Path, kinds: Sequence[str]) -> list[str]:
    """Write the newest save of each kind the database holds into ``folder``: the kinds
    fetched."""
    fetched = []
    for kind in kinds:
        try:
            if saved_indexes.fetch(store, folder, kind):
                fetched.append(kind)
        except Exception:
            log.warning("fetching the saved %s index failed (built instead)", kind, exc_info=True)
    if fetched:
        log.info("saved search indexes fetched from the database: %s", ", ".join(fetched))
    return fetched


def store_save(store: Store, folder: Path, kind: str) -> bool:
    """Store the save of ``kind`` just written into ``folder`` in the database."""
    try:
        return saved_indexes.publish(store, folder, kind)
    except Exception:
        log.warning("storing the saved %s index failed", kind, exc_info=True)
        return False


def remove(folder: Path) -> None:
    """The folder, once the engine is closed (its saves are in the database)."""
    shutil.rmtree(folder, ignore_errors=True)
