"""A re-extraction's shadow graph (see :mod:`workbench.jobs.reextract`): its own DuckDB
file, store, live indexes, pipeline and queue, and the rules of where it lives and what it
may keep.

* **Where.** A shadow's file is ``<shadow folder>/<run id>.duckdb``, derived from the run id
  (``rx-`` and 12 hexadecimal digits, checked) every time: the path is never read from the
  data (``reextract_runs.shadow_path`` only records where it was made), so a crafted row or a
  restored backup cannot point a discard at another file.
* **What it keeps.** Only episodes the live store still holds: :func:`prune` removes from a
  shadow the episodes deleted from the live store since it was built (their text, passages,
  facts, mentions and the entities only they mentioned), as ``delete_episode`` does live.
* **How it resumes.** Its queue leases a group's backlog in runs of at most
  :data:`SHADOW_RUN` episodes, each written in one transaction as it is done: a run killed
  loses at most the runs in flight, and its next start skips every episode done. Its LLM
  calls are written to the live ``llm_calls`` under the run's id as they are made (not copied
  at the end), so a killed run's calls are on record too.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from workbench.clock import Clock
from workbench.config import Settings
from workbench.errors import InvalidInput, LLMNotConfigured
from workbench.index.live import LiveIndexes
from workbench.index.saves import IndexSaves
from workbench.ingest.context import IngestContext
from workbench.ingest.pipeline import NO_LLM, EpisodePipeline
from workbench.ingest.queue.episode_queue import EpisodeQueue, QueueConfig
from workbench.llm.client import ChatModel, build_chat_model
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store import graph as g
from workbench.store import queue as q
from workbench.store import reextract as rx
from workbench.store.reextract import RUN_ID, Row

log = logging.getLogger("workbench.jobs.shadow")

QUEUE_NAME = "reextract"  # the queue_name label of the shadow queue's metrics
DRAIN_STEP = 16  # episodes between two updates of the progress bar
SHADOW_RUN = 4  # a shadow's episodes extracted (and written) together at most

Progress = Callable[[int], None]


def check_run_id(run_id: Any) -> str:
    """``run_id`` when it has the form of a run id (``rx-`` and 12 hexadecimal digits), else
    :class:`InvalidInput`."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        raise InvalidInput(
            f"no re-extraction run {str(run_id)[:80]!r}: that is not a re-extraction run id "
            "(rx- and 12 hexadecimal digits, as `workbench reextract` prints it)"
        )
    return run_id


def shadow_file(folder: Path, run_id: str) -> Path:
    """The shadow file of ``run_id`` in ``folder`` (the id checked first)."""
    return folder / f"{check_run_id(run_id)}.duckdb"


def default_shadow_dir(store: Store) -> Path:
    """Beside a DuckDB file (``<file>.reextract/``); else the system's temporary folder."""
    beside = store.beside_file(".reextract")
    if beside is not None:
        return beside
    return Path(tempfile.gettempdir()) / "knowledge-workbench-reextract"


def remove_shadow(path: Path) -> None:
    """Delete a shadow file and its write-ahead log (only those two names)."""
    for name in (path, path.with_name(path.name + ".wal")):
        if name.is_symlink() or name.is_file():
            name.unlink(missing_ok=True)


def prune(shadow: Store, live_uuids: set[str]) -> list[str]:
    """Remove from ``shadow`` every episode not in ``live_uuids`` (deleted from the live
    store since), with what it alone made; the uuids removed."""
    gone = sorted(rx.episode_uuids(shadow) - live_uuids)
    if gone:
        with shadow.transaction():
            for uuid in gone:
                g.delete_episode(shadow, uuid)
        log.info("pruned %d deleted episodes from a re-extraction shadow", len(gone))
    return gone


class Shadow:
    """A shadow graph: its own DuckDB file, store, live indexes, pipeline and queue, with the
    configured LLM (its calls recorded in ``calls_to``'s ``llm_calls`` under ``run_id`` as
    they are made). With ``live_chat`` (live ingestion's model) on the same LLM server, its
    calls share that model's throttle and in-flight slots: a run does not add its load to
    live ingestion's."""

    def __init__(
        self,
        path: str | Path,
        embedder: Any,
        settings: Settings,
        metrics: Metrics,
        clock: Clock,
        *,
        with_llm: bool = True,
        live_chat: ChatModel | None = None,
        calls_to: tuple[Store, str] | None = None,
    ):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.store = Store.open(str(path), embedder.dimensions, embedder.model)
        self.clock = clock
        self.settings = settings
        self.chat = None
        self.indexes: LiveIndexes | None = None
        if not with_llm:
            return
        self.chat = build_chat_model(settings, metrics=metrics, store=self.store, clock=clock)
        if self.chat is None:
            self.store.close()
            raise LLMNotConfigured(NO_LLM)
        if calls_to is not None:
            self.chat.record_into(*calls_to)
        if live_chat is not None:
            self.chat.share_limits(live_chat)
        # the shadow's own indexes (extraction reads its graph from them), never saved
        self.indexes = LiveIndexes(
            self.store, metrics, IndexSaves(self.store, None), access_background=False
        )
        ctx = IngestContext(
            self.store, metrics, clock, self.chat, embedder, self.indexes.publisher, settings
        )
        self.pipeline = EpisodePipeline(ctx)
        config = QueueConfig.from_settings(settings, QUEUE_NAME)
        config = replace(config, run_size=min(config.run_size, SHADOW_RUN))
        self.queue = EpisodeQueue(ctx, self.pipeline, config)

    def add(self, episodes: Sequence[dict[str, Any]]) -> int:
        """Queue the episodes the shadow does not have yet, in their order; how many."""
        have = rx.episode_uuids(self.store)
        todo = [e for e in episodes if e["uuid"] not in have]
        now = self.clock()
        with self.store.transaction():
            for episode in todo:
                g.insert_episode(self.store, {**episode, "status": "queued", "status_detail": None})
                q.enqueue(self.store, episode["uuid"], episode["group_id"], 1, now)
        return len(todo)

    def resume(self) -> None:
        """After a kill: the episodes in flight return to the queue; failed ones are retried."""
        q.recover_crashed(self.store, self.clock(), self.settings.queue_max_crashes)
        q.requeue_failed(self.store, self.clock(), None, None)

    def drain(self, progress: Progress | None) -> int:
        done = 0
        while True:
            n = self.queue.drain(DRAIN_STEP)
            if not n:
                return done
            done += n
            if progress is not None:
                progress(n)

    def pending(self) -> int:
        return rx.pending(self.store)

    def graph(self) -> tuple[list[Row], list[Row]]:
        return rx.table_rows(self.store, "entities"), rx.table_rows(self.store, "facts")

    def close(self) -> None:
        if self.indexes is not None:
            self.pipeline.close()
            self.indexes.close()
        self.store.close()

    def __enter__(self) -> Shadow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
