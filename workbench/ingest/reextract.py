"""Re-extract a group's stored episodes into a shadow graph, compare, then promote or discard
it (``workbench reextract``).

The episodes are all kept, so the graph is a view of them that can be rebuilt with a better
model, prompt or structured-output mode. The pure rules (estimate, carry-over, comparison) are
in :mod:`workbench.ingest.generations`. A run:

* **predicts its cost first** (``estimate``): per episode the calls and tokens its first
  extraction made (``llm_calls``), else the group's average, else two calls (entities, then
  facts) of the episode's size; USD from the price table.
* **builds a shadow graph**: a DuckDB file of its own (beside the database, or in the given
  folder) with the same machinery as ingestion: the durable queue (episodes in their original
  order, a group's backlog in runs, leases), the pipeline and a search engine of its own.
  Nothing of it reaches the live graph, its rows or its indexes: searches keep answering from
  the live graph. Killed, it resumes where it stopped (``reextract`` again: the queue returns
  the episodes in flight; an episode is written once). Its calls are recorded in the shadow,
  then in ``llm_calls`` under the run's id. Beside live ingestion in one process (the
  service's ``reextract`` tool, a notebook), its calls go through live ingestion's throttle
  and in-flight slots when both call one LLM server, so a run does not add its load to it.
* **is compared** with the live graph (``compare_graphs``), and
* **is promoted** in one transaction that deletes what extraction made of the group (facts
  stated by episodes, entities episodes mention; imported memories stay) and inserts the
  shadow's rows; then the search engine swaps them under its lock at once, so no search sees
  a mix. Other processes sharing a PostgreSQL store get one change-log entry naming the group
  (not one per memory) and swap the group in at once too. An entity of the same name and
  type, and a fact between the same entities with the same relation, keeps its uuid and
  carries over importance, stability, decay, lifecycle state and accesses (``carry_over``).
  Or it is discarded: the shadow file is deleted.

The shadow is a local DuckDB file on PostgreSQL too, not rows of a new generation in the
shared tables: those tables are what every process reads whole (search rows and indexes,
ingestion's resolution, maintenance, exports), and every write to them is broadcast through
the change log to every replica. Generation rows there would need a generation filter in each
of those readers, and would cost the serving database a second ingestion's writes and its
replicas a second ingestion's re-reads, for rows no search may see. In a file of its own, the
unchanged pipeline, queue and search engine build it like any store, the serving database
pays once (the promote's one transaction), and a discard deletes a file. The price: a run
resumes on the machine that holds its shadow (or a ``--shadow-dir`` both can reach).
"""

from __future__ import annotations

import logging
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from workbench.clock import Clock
from workbench.config import Settings
from workbench.errors import InvalidInput, LLMNotConfigured, NotFound
from workbench.index.publish import Publisher, Upsert
from workbench.ingest.context import IngestContext
from workbench.ingest.episode_queue import EpisodeQueue, QueueConfig
from workbench.ingest.generations import (
    Built,
    Estimate,
    Swap,
    carry_over,
    compare_graphs,
    entity_key,
    estimate,
)
from workbench.ingest.pipeline import NO_LLM, EpisodePipeline
from workbench.llm.client import build_chat_model
from workbench.llm.pricing import PriceTable
from workbench.metrics import Metrics
from workbench.search import SearchEngine
from workbench.store import Store
from workbench.store import changes as log_sql
from workbench.store import graph as g
from workbench.store import queue as q
from workbench.store import reextract as rx
from workbench.store.reextract import Row
from workbench.store.snapshots import Snapshots

log = logging.getLogger("workbench.ingest.reextract")

QUEUE_NAME = "reextract"  # the queue_name label of the shadow queue's metrics
GRAPH_TABLES = ("episodes", "entities", "facts", "mentions")
DRAIN_STEP = 16  # episodes between two updates of the progress bar

Progress = Callable[[int], None]


# --- the shadow graph ---------------------------------------------------------------------
class Shadow:
    """A shadow graph: its own DuckDB file, store, search engine, pipeline and queue, with the
    configured LLM (its calls recorded in the shadow's ``llm_calls``). With ``live_chat``
    (live ingestion's model) on the same LLM server, its calls share that model's throttle and
    in-flight slots: a run does not add its load to live ingestion's."""

    def __init__(
        self,
        path: str,
        embedder: Any,
        settings: Settings,
        metrics: Metrics,
        clock: Clock,
        *,
        with_llm: bool = True,
        live_chat: object = None,
    ):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.store = Store.open(path, embedder.dimensions, embedder.model)
        self.clock = clock
        self.settings = settings
        self.chat = None
        self.search: SearchEngine | None = None
        if not with_llm:
            return
        self.chat = build_chat_model(settings, metrics=metrics, store=self.store, clock=clock)
        if self.chat is None:
            self.store.close()
            raise LLMNotConfigured(NO_LLM)
        if live_chat is not None:
            self.chat.share_limits(live_chat)
        self.search = SearchEngine(
            self.store, embedder, metrics, clock, settings, graph_dir=False, access_background=False
        )
        ctx = IngestContext(
            self.store, metrics, clock, self.chat, embedder, self.search.publisher, settings
        )
        self.pipeline = EpisodePipeline(ctx)
        self.queue = EpisodeQueue(
            ctx, self.pipeline, QueueConfig.from_settings(settings, QUEUE_NAME)
        )

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
        if self.search is not None:
            self.pipeline.close()
            self.search.close()
        self.store.close()

    def __enter__(self) -> Shadow:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the runs -----------------------------------------------------------------------------
class Reextraction:
    """Re-extraction runs over one live store (see the module docstring). ``settings`` name
    the LLM, prompts and structured-output mode of the new extraction."""

    def __init__(
        self,
        store: Store,
        publisher: Publisher,
        embedder: Any,
        settings: Settings,
        metrics: Metrics,
        clock: Clock,
        shadow_dir: str | Path | None = None,
        snapshots: Snapshots | None = None,
        *,
        live_chat: object = None,
    ):
        self.store = store
        self.live_chat = live_chat  # live ingestion's model: its LLM limits are shared
        # the live store's exported copies: dropped after a promote (no copy outlives the
        # memories it replaced)
        self.snapshots = snapshots
        self.publisher = publisher
        self.embedder = embedder
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.shadow_dir = Path(shadow_dir) if shadow_dir else default_shadow_dir(store)

    # --- plan and run ---------------------------------------------------------------------
    def plan(self, group_id: str) -> Estimate:
        """The dry run: what re-extracting the group (what is left of its open run) costs."""
        episodes = self._todo(group_id, rx.open_run(self.store, group_id))
        history = {
            u: (c, p, o)
            for u, c, p, o in rx.call_history(self.store, [e["uuid"] for e in episodes])
        }
        prices = PriceTable.load(self.settings.price_table_path)
        return estimate(group_id, episodes, history, self.settings.model_name, prices)

    def _todo(self, group_id: str, run: Row | None) -> list[Row]:
        episodes = rx.done_episodes(self.store, group_id)
        if run is None or not Path(run["shadow_path"]).exists():
            return episodes
        with self._shadow_store(run) as shadow:
            done = rx.episode_uuids(shadow.store, "done")
        return [e for e in episodes if e["uuid"] not in done]

    def run(self, group_id: str, progress: Progress | None = None) -> dict[str, Any]:
        """Build (or resume) the group's shadow graph; a report of the run."""
        episodes = rx.done_episodes(self.store, group_id)  # the request first, then the LLM
        if not episodes:
            raise InvalidInput(f"group {group_id!r} has no processed episodes to re-extract")
        if not self.settings.llm_configured:
            raise LLMNotConfigured(NO_LLM)
        run = rx.open_run(self.store, group_id) or self._new_run(group_id, len(episodes))
        if run["calls_copied"] and not Path(run["shadow_path"]).exists():
            raise InvalidInput(
                f"the shadow graph of run {run['run_id']} is not on this machine "
                f"({run['shadow_path']}): resume it where it was started, or discard it "
                f"(`workbench reextract --discard {run['run_id']}`) and start again"
            )
        with (
            _busy(group_id),
            Shadow(
                run["shadow_path"],
                self.embedder,
                self.settings,
                self.metrics,
                self.clock,
                live_chat=self.live_chat,
            ) as shadow,
        ):
            shadow.resume()
            shadow.add(episodes)
            rx.set_state(self.store, run["run_id"], "running", None, len(episodes))
            processed = shadow.drain(progress)
            self._copy_calls(run, shadow)
            pending = shadow.pending()
            if not pending:
                rx.set_state(self.store, run["run_id"], "built", self.clock(), len(episodes))
        return {
            **self.status(run["run_id"]),
            "processed": processed,
            "pending": pending,
        }

    def _new_run(self, group_id: str, episodes: int) -> dict[str, Any]:
        run_id = f"rx-{uuidlib.uuid4().hex[:12]}"
        run = {
            "run_id": run_id,
            "group_id": group_id,
            "model": self.settings.model_name,
            "shadow_path": str(self.shadow_dir / f"{run_id}.duckdb"),
            "episodes": episodes,
            "predicted_calls": self.plan(group_id).calls,
            "created_at": self.clock(),
        }
        rx.insert_run(self.store, run)
        return {**run, "calls_copied": 0, "state": "running"}

    def _copy_calls(self, run: dict[str, Any], shadow: Shadow) -> None:
        shadow.store.flush()
        last = self._run(run["run_id"])["calls_copied"]
        rows = rx.calls_after(shadow.store, last)
        with self.store.transaction():
            rx.copy_calls(self.store, run["run_id"], rows, max([last, *(r["id"] for r in rows)]))

    def status(self, run_id: str) -> dict[str, Any]:
        run = self._run(run_id)
        return {**run, "calls": rx.run_calls(self.store, run_id)}

    def _run(self, run_id: str) -> dict[str, Any]:
        run = rx.get_run(self.store, run_id)
        if run is None:
            raise NotFound(f"no re-extraction run {run_id!r}")
        return run

    # --- compare, promote, discard --------------------------------------------------------
    def compare(self, run_id: str) -> dict[str, Any]:
        """The run's group as it is vs as a promote would leave it (see :func:`compare_graphs`)."""
        run = self._open(run_id, "compare")
        with self._shadow_store(run) as shadow:
            new = shadow.graph()
        old = rx.group_graph(self.store, run["group_id"])
        extracted, _ = rx.extracted_graph(self.store, run["group_id"])
        kept = rx.kept_entities(self.store, run["group_id"], [e["uuid"] for e in extracted])
        made = {entity_key(e) for e in new[0]}
        new = (  # the group as a promote would leave it: with its imported memories
            [*new[0], *(k for k in kept if entity_key(k) not in made)],
            [*new[1], *(f for f in old[1] if f["episode_uuid"] is None)],
        )
        return {
            "run_id": run_id,
            "group_id": run["group_id"],
            "state": run["state"],
            **compare_graphs(old, new, kept),
            "calls": rx.run_calls(self.store, run_id),
        }

    def rows(self, run_id: str) -> dict[str, dict[str, list[Row]]]:
        """The group's rows (``episodes``, ``entities``, ``facts``, ``mentions``) in the live
        graph (``old``) and the run's shadow (``new``): what scoring on labelled episodes
        reads (:func:`workbench.eval.extraction.score_generations`)."""
        run = self._open(run_id, "score")
        with self._shadow_store(run) as shadow:
            new = {t: rx.table_rows(shadow.store, t) for t in GRAPH_TABLES}
        episodes = rx.done_episodes(self.store, run["group_id"])
        entities, facts = rx.group_graph(self.store, run["group_id"])
        mentions = rx.mentions_of(self.store, [e["uuid"] for e in episodes])
        old = {"episodes": episodes, "entities": entities, "facts": facts, "mentions": mentions}
        return {"old": old, "new": new}

    def promote(self, run_id: str) -> dict[str, Any]:
        """Swap the group's graph for the shadow's in one transaction; the search engine
        follows at once (see the module docstring)."""
        run = self._open(run_id, "promote")
        if run["state"] != "built":
            raise InvalidInput(
                f"run {run_id} is not finished: run `workbench reextract --group "
                f"{run['group_id']}` again to finish it, then promote"
            )
        with _busy(run["group_id"]):
            built = self._built(run)
            with self.publisher:
                with self.store.transaction():
                    # other processes sharing the store: one change naming the group, not
                    # one per memory, so each swaps the whole group in at once
                    log_sql.quiet(self.store)
                    swap, changes = self._swap(run, built)
                    log_sql.log_generation(self.store, run["group_id"])
                self.publisher.replaced(swap.removed, changes, "promoting a re-extraction")
        _remove_shadow(run["shadow_path"])
        if self.snapshots is not None:
            self.snapshots.discard()
        return {
            "run_id": run_id,
            "group_id": run["group_id"],
            "state": "promoted",
            "entities": len(swap.entities),
            "facts": len(swap.facts),
            "entities_removed": len(swap.removed["entity"]),
            "facts_removed": len(swap.removed["fact"]),
        }

    def _built(self, run: dict[str, Any]) -> Built:
        with self._shadow_store(run) as shadow:
            entities, facts = shadow.graph()
            return Built(
                entities,
                facts,
                rx.table_rows(shadow.store, "mentions"),
                rx.episode_uuids(shadow.store),
                {
                    kind: rx.vectors_of(shadow.store, kind, [r["uuid"] for r in rows])
                    for kind, rows in (("entity", entities), ("fact", facts))
                },
                rx.table_rows(shadow.store, "fact_sources"),
            )

    def _swap(self, run: Row, built: Built) -> tuple[Swap, list[Upsert]]:
        """Inside the promote's transaction: replace the group's extracted graph."""
        group = run["group_id"]
        live = {e["uuid"] for e in rx.done_episodes(self.store, group)}
        if live - built.episodes:
            raise InvalidInput(
                f"{len(live - built.episodes)} episodes of group {group} were processed after "
                f"run {run['run_id']} started: run `workbench reextract --group {group}` "
                "again to extract them too, then promote"
            )
        old_entities, old_facts = rx.extracted_graph(self.store, group)
        removed = [e["uuid"] for e in old_entities]
        swap = carry_over(
            old_entities,
            old_facts,
            rx.kept_entities(self.store, group, removed),
            built.entities,
            [f for f in built.facts if f["episode_uuid"] in live],
            [m for m in built.mentions if m["episode_uuid"] in live],
        )
        rx.replace_graph(
            self.store,
            sorted(live),
            {"entity": removed, "fact": [f["uuid"] for f in old_facts]},
            {
                "entity": swap.entities,
                "fact": swap.facts,
                "mention": swap.mentions,
                "fact_source": built.links_for(swap, live),
            },
        )
        changes = self._write_vectors(swap, built.vectors)
        rx.set_episode_counts(self.store, swap.counts(live))
        rx.set_state(self.store, run["run_id"], "promoted", self.clock())
        return swap, changes

    def _write_vectors(self, swap: Swap, vectors: dict[str, dict[str, Any]]) -> list[Upsert]:
        """Insert the new rows' vectors; the publisher's changes (rows with a vector first)."""
        back = {new: shadow for shadow, new in swap.renamed.items()}
        changes: list[Upsert] = []
        for kind, rows in (("entity", swap.entities), ("fact", swap.facts)):
            have = [r for r in rows if back.get(r["uuid"], r["uuid"]) in vectors[kind]]
            without = [r for r in rows if back.get(r["uuid"], r["uuid"]) not in vectors[kind]]
            matrix = np.array(
                [vectors[kind][back.get(r["uuid"], r["uuid"])] for r in have], dtype=np.float32
            ).reshape(len(have), self.store.dim)
            g.insert_vectors(
                self.store,
                f"{kind}_embeddings",
                [r["uuid"] for r in have],
                matrix,
                self.embedder.model,
            )
            changes.append((kind, have + without, matrix))
        return changes

    def discard(self, run_id: str) -> dict[str, Any]:
        """Drop the run's shadow graph; the live graph is untouched."""
        run = self._open(run_id, "discard")
        with _busy(run["group_id"]):
            rx.set_state(self.store, run_id, "discarded", self.clock())
            _remove_shadow(run["shadow_path"])
        return {"run_id": run_id, "group_id": run["group_id"], "state": "discarded"}

    def _open(self, run_id: str, what: str) -> dict[str, Any]:
        run = self._run(run_id)
        if run["state"] not in rx.OPEN_STATES:
            raise InvalidInput(f"run {run_id} is {run['state']}: there is nothing to {what}")
        if what != "discard" and not Path(run["shadow_path"]).exists():
            raise InvalidInput(
                f"the shadow graph of run {run_id} is gone ({run['shadow_path']}): discard "
                f"the run and start again"
            )
        return run

    def _shadow_store(self, run: dict[str, Any]) -> Shadow:
        return Shadow(
            run["shadow_path"],
            self.embedder,
            self.settings,
            self.metrics,
            self.clock,
            with_llm=False,
        )


_BUSY: set[str] = set()
_BUSY_LOCK = threading.Lock()


@contextmanager
def _busy(group_id: str) -> Iterator[None]:
    """One run, promote or discard of a group at a time in this process (two tool calls)."""
    with _BUSY_LOCK:
        if group_id in _BUSY:
            raise InvalidInput(
                f"a re-extraction of group {group_id} is running in this process: wait for it"
            )
        _BUSY.add(group_id)
    try:
        yield
    finally:
        with _BUSY_LOCK:
            _BUSY.discard(group_id)


def default_shadow_dir(store: Store) -> Path:
    """Beside a DuckDB file (``<file>.reextract/``); else the system's temporary folder."""
    beside = store.beside_file(".reextract")
    if beside is not None:
        return beside
    import tempfile

    return Path(tempfile.gettempdir()) / "knowledge-workbench-reextract"


def _remove_shadow(path: str) -> None:
    for suffix in ("", ".wal"):
        Path(path + suffix).unlink(missing_ok=True)
