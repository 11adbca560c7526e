"""Re-extract a group's stored episodes into a shadow graph, compare, then promote or discard
it (``workbench reextract``).

The episodes are all kept, so the graph is a view of them that can be rebuilt with a better
model, prompt or structured-output mode. The pure rules (estimate, carry-over, comparison) are
in :mod:`workbench.jobs.generations`. A run:

* **predicts its cost first** (``estimate``): per episode the calls and tokens its first
  extraction made (``llm_calls``), else the group's average, else two calls (entities, then
  facts) of the episode's size; USD from the price table.
* **builds a shadow graph**: a DuckDB file of its own (beside the database, or in the given
  folder) with the same machinery as ingestion: the durable queue (episodes in their original
  order, a group's backlog in runs, leases), the pipeline and a search engine of its own.
  Nothing of it reaches the live graph, its rows or its indexes: searches keep answering from
  the live graph. Killed, it resumes where it stopped (``reextract`` again: the queue returns
  the episodes in flight; an episode is written once; see :mod:`workbench.jobs.shadow`).
  Its calls are written to ``llm_calls`` under the run's id as they are made. Beside live
  ingestion in one process (the service's ``reextract`` tool, a notebook), its calls go
  through live ingestion's throttle and in-flight slots when both call one LLM server, so a
  run does not add its load to it.
* **is compared** with the live graph (``compare_graphs``), and
* **is promoted** in one transaction that deletes what extraction made of the group (facts
  stated by episodes, entities episodes mention; imported memories stay) and inserts the
  shadow's rows; then the search engine swaps them under its lock at once, so no search sees
  a mix. Other processes sharing a PostgreSQL store get one change-log entry naming the group
  (not one per memory) and swap the group in at once too. An entity of the same name and
  type, and a fact between the same entities with the same relation, keeps its uuid and
  carries over importance, stability, decay, lifecycle state and accesses (``carry_over``).
  Or it is discarded: the shadow file is deleted.
* **follows deletes**: ``delete_episode`` prunes the episode from the group's open run
  (now, or by the run itself when it is in use), ``clear_graph`` discards the run, and a
  promote writes only what live episodes support (:meth:`Reextraction.forget`).

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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from workbench.clock import Clock
from workbench.config import Settings
from workbench.errors import InvalidInput, LLMNotConfigured, NotFound, WorkbenchError
from workbench.index.publish import Publisher, Upsert
from workbench.ingest.pipeline import NO_LLM
from workbench.jobs.generations import (
    Built,
    Estimate,
    Swap,
    carry_over,
    compare_graphs,
    entity_key,
    estimate,
)
from workbench.jobs.shadow import (
    Progress,
    Shadow,
    check_run_id,
    default_shadow_dir,
    prune,
    remove_shadow,
    shadow_file,
)
from workbench.llm.client import ChatModel
from workbench.llm.pricing import PriceTable
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store import changes as log_sql
from workbench.store import graph as g
from workbench.store import reextract as rx
from workbench.store.reextract import Row
from workbench.store.snapshots import Snapshots

log = logging.getLogger("workbench.jobs.reextract")

GRAPH_TABLES = ("episodes", "entities", "facts", "mentions")
__all__ = ["Reextraction", "Shadow", "default_shadow_dir"]


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
        live_chat: ChatModel | None = None,
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
        if run is None or not self._path(run).exists():
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
        path = self._path(run)
        if rx.run_calls(self.store, run["run_id"])["calls"] and not path.exists():
            raise InvalidInput(
                f"the shadow graph of run {run['run_id']} is not on this machine (not in "
                f"{path.parent}; made with another --shadow-dir?): resume it where it was "
                f"started, or discard it (`workbench reextract --discard {run['run_id']}`) "
                "and start again"
            )
        with (
            _busy(group_id),
            Shadow(
                path,
                self.embedder,
                self.settings,
                self.metrics,
                self.clock,
                live_chat=self.live_chat,
                calls_to=(self.store, run["run_id"]),
            ) as shadow,
        ):
            shadow.resume()
            self._prune(shadow.store, group_id)
            shadow.add(episodes)
            rx.set_state(self.store, run["run_id"], "running", None, len(episodes))
            processed = shadow.drain(progress)
            self._prune(shadow.store, group_id)  # episodes deleted while it ran
            pending = shadow.pending()
            if not pending:
                rx.set_state(self.store, run["run_id"], "built", self.clock(), len(episodes))
        if self._run(run["run_id"])["state"] == "discarded":  # by a clear_graph meanwhile
            remove_shadow(path)
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
            "shadow_path": str(shadow_file(self.shadow_dir, run_id)),  # a record, never read
            "episodes": episodes,
            "predicted_calls": self.plan(group_id).calls,
            "created_at": self.clock(),
        }
        rx.insert_run(self.store, run)
        return {**run, "calls_copied": 0, "state": "running"}

    def _path(self, run: Row) -> Path:
        """The run's shadow file: derived from its id, never read from the row."""
        return shadow_file(self.shadow_dir, run["run_id"])

    def _prune(self, shadow: Store, group_id: str) -> list[str]:
        """Drop from the shadow the episodes deleted from the live store since."""
        return prune(shadow, rx.group_episode_uuids(self.store, group_id))

    def status(self, run_id: str) -> dict[str, Any]:
        run = self._run(run_id)
        return {**run, "calls": rx.run_calls(self.store, run_id)}

    def _run(self, run_id: str) -> dict[str, Any]:
        run = rx.get_run(self.store, check_run_id(run_id))
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
        remove_shadow(self._path(run))
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
            self._prune(shadow.store, run["group_id"])  # only what live episodes support
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
        facts = [f for f in built.facts if f["episode_uuid"] in live]
        mentions = [m for m in built.mentions if m["episode_uuid"] in live]
        # an entity comes in only when a live episode supports it (mentions it, or states a
        # fact naming it): a deleted episode's entities stay deleted
        named = {m["entity_uuid"] for m in mentions}
        named |= {u for f in facts for u in (f["source_uuid"], f["target_uuid"])}
        swap = carry_over(
            old_entities,
            old_facts,
            rx.kept_entities(self.store, group, removed),
            [e for e in built.entities if e["uuid"] in named],
            facts,
            mentions,
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
            remove_shadow(self._path(run))
        return {"run_id": run_id, "group_id": run["group_id"], "state": "discarded"}

    # --- deletes reach the open runs ------------------------------------------------------
    def forget(self, groups: Sequence[str], cleared: bool = False) -> list[str]:
        """After episodes of ``groups`` were deleted (``cleared``: the whole groups): their
        open runs lose them too, so no promote brings them back and no shadow keeps their
        text. A cleared group's run is discarded; otherwise the deleted episodes are pruned
        from its shadow now, or, when the shadow is in use (a run in progress), by that run
        before it finishes (and by any promote). What was done per group: "discarded",
        "pruned", "deferred", or "" (no open run)."""
        return [self._forget(group, cleared) for group in groups]

    def _forget(self, group_id: str, cleared: bool) -> str:
        run = rx.open_run(self.store, group_id)
        if run is None:
            return ""
        if cleared:
            rx.set_state(self.store, run["run_id"], "discarded", self.clock())
            return "discarded" if self._drop_unused(run) else "deferred"
        try:
            with _busy(group_id), self._shadow_store(run) as shadow:
                self._prune(shadow.store, group_id)
            return "pruned"
        except (WorkbenchError, OSError) as exc:  # in use here or elsewhere: it prunes itself
            log.info("run %s prunes the deleted episodes itself: %s", run["run_id"], exc)
            return "deferred"

    def _drop_unused(self, run: Row) -> bool:
        """Delete the run's shadow unless a process is building it (that run deletes it
        when it sees the run discarded); whether it was deleted."""
        try:
            path = self._path(run)
            with _busy(run["group_id"]):
                if path.exists():
                    Store.open(str(path), dim=None).close()  # refused while another holds it
                remove_shadow(path)
            return True
        except (WorkbenchError, OSError):
            return False

    def _open(self, run_id: str, what: str) -> dict[str, Any]:
        run = self._run(run_id)
        if run["state"] not in rx.OPEN_STATES:
            raise InvalidInput(f"run {run_id} is {run['state']}: there is nothing to {what}")
        if what != "discard" and not self._path(run).exists():
            raise InvalidInput(
                f"the shadow graph of run {run_id} is not in {self._path(run).parent}: "
                "discard the run and start again (or give the --shadow-dir it was made in)"
            )
        return run

    def _shadow_store(self, run: dict[str, Any]) -> Shadow:
        return Shadow(
            self._path(run),
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
