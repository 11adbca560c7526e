"""``export_snapshot`` copies every table for a client on this host: private (0700 folders,
0600 files), at most two kept, none left after a delete, at stop, or by a killed process."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.config import load_settings
from workbench.errors import StoreError
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics
from workbench.store.snapshots import KEEP, Snapshots, private_folder, remove_stale

FACT = {
    "type": "fact",
    "source": "Maria",
    "target": "Acme",
    "relation": "WORKS_AT",
    "fact": "Maria works at Acme.",
}


def open_wb(tmp_path: Path) -> Workbench:
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    workbench = Workbench.open(settings, embedder=HashEmbedder(), chat=None, metrics=Metrics())
    workbench.snapshots = Snapshots(tmp_path / "snapshots")
    workbench.import_memories([FACT])
    return workbench


@pytest.fixture
def wb(tmp_path):
    workbench = open_wb(tmp_path)
    yield workbench
    workbench.close()


def kept(wb: Workbench) -> list[Path]:
    return sorted(p for p in wb.snapshots.folder().iterdir())


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_snapshots_are_private_and_capped(wb):
    answers = [wb.export_snapshot() for _ in range(6)]
    assert len(kept(wb)) == KEEP == 2
    assert sorted(Path(a["directory"]) for a in answers[-KEEP:]) == kept(wb)  # the newest stay
    newest = answers[-1]
    assert mode(wb.snapshots.root) == mode(wb.snapshots.folder()) == 0o700
    assert mode(Path(newest["directory"])) == 0o700
    assert {mode(Path(f)) for f in newest["tables"].values()} == {0o600}
    import duckdb

    facts = newest["tables"]["facts"]
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{facts}')").fetchone()[0] == 1


@pytest.mark.parametrize("delete", ["clear_graph", "delete_entity_edge", "delete_episode"])
def test_no_copy_outlives_a_delete(wb, delete):
    wb.export_snapshot()
    wb.export_snapshot()
    if delete == "clear_graph":
        wb.clear_graph(["main"])
    elif delete == "delete_entity_edge":
        fact = wb.store.fetchone("SELECT uuid FROM facts")[0]
        wb.delete_entity_edge(fact)
    else:
        wb.add_memory("n", "Tom uses Neovim.")
        wb.delete_episode(wb.store.fetchone("SELECT uuid FROM episodes")[0])
    assert kept(wb) == []


def test_a_closed_workbench_leaves_no_snapshot(tmp_path):
    wb = open_wb(tmp_path)
    folder = Path(wb.export_snapshot()["directory"]).parent
    wb.close()
    assert not folder.exists()


def test_the_folders_of_dead_processes_go_at_start(tmp_path):
    root = private_folder(tmp_path / "snapshots")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    gone = root / f"{dead.stdout.strip()}-abcd"
    mine = root / f"{os.getpid()}-efgh"
    for folder in (gone, mine):
        (folder / "snapshot-1").mkdir(parents=True)
        (folder / "snapshot-1" / "facts.parquet").write_text("copy")
    assert remove_stale(root) == 1
    assert not gone.exists() and mine.exists()


def test_a_shared_folder_that_is_not_private_is_not_used(tmp_path):
    """Another user (or a link) holding the shared name gets nothing: the snapshot goes into a
    new private folder of its own."""
    open_to_all = tmp_path / "open"
    open_to_all.mkdir(mode=0o777)
    open_to_all.chmod(0o777)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    for root in (open_to_all, link):
        snapshots = Snapshots(root)
        written = snapshots.write(lambda folder: {})
        folder = Path(written["directory"]).parent
        assert root not in Path(written["directory"]).parents
        assert mode(folder) == 0o700 and not folder.is_symlink()
        snapshots.close()
        assert not folder.exists()
    assert list(elsewhere.iterdir()) == [] and list(open_to_all.iterdir()) == []
    with pytest.raises(StoreError, match="not a private folder"):
        private_folder(link)
