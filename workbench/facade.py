"""The Workbench facade: one object that holds the store, embedder, chat model, metrics,
search engine, queue and maintenance scheduler, and exposes the tools as methods.

Every tool method validates its arguments, returns a JSON-able ``dict`` and raises only
:mod:`workbench.errors` exceptions. The service (REST + MCP) and notebooks call these methods;
nothing here knows about HTTP.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from workbench import errors, names
from workbench import results as r
from workbench.clock import Clock, utcnow
from workbench.config import Settings, load_settings
from workbench.decay import maintenance
from workbench.decay.classification import check_classify_text, classify_texts
from workbench.decay.maintenance import MaintenanceScheduler
from workbench.decay.rules import DecayPolicy
from workbench.embedding import Embedder, build_embedder
from workbench.embedding.batching import BatchingEmbedder
from workbench.ingest import accept
from workbench.ingest.context import IngestContext
from workbench.ingest.intake import Intake
from workbench.ingest.pipeline import NO_LLM, EpisodePipeline
from workbench.ingest.queue.budget import DailyBudget
from workbench.ingest.queue.episode_queue import EpisodeQueue, QueueConfig
from workbench.ingest.verbatim import PassageWriter
from workbench.jobs.generations import one_action
from workbench.jobs.history import imported
from workbench.jobs.importer import Importer
from workbench.jobs.reextract import Reextraction
from workbench.llm.client import ChatModel, build_chat_model
from workbench.llm.health import LLMHealth
from workbench.metrics import Metrics
from workbench.results import browse as rb
from workbench.safety import register_secret, scrub
from workbench.search import SearchEngine, recall, sources, timeline
from workbench.store import Store, views
from workbench.store import graph as g
from workbench.store import queue as q
from workbench.store.browse import GroupPages
from workbench.store.snapshots import Snapshots, remove_stale
from workbench.store.tenancy import Tenancy

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("workbench")

MAX_LIST = 1000
MAX_IMPORT_LINES = 5000


class _Default:
    """``Workbench.open``'s ``chat`` left out: the chat model the settings configure."""


_DEFAULT = _Default()


def jsonable(value: Any) -> Any:
    """Datetimes → ISO 8601, numpy scalars → Python, recursively."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, np.generic):
        return value.item()
    return value


_Found = TypeVar("_Found", r.NodesFound, r.FactsFound)


def _noted(
    found: _Found, hits: Sequence[Any], store: Store, groups: list[str] | None, llm: bool
) -> _Found:
    """An empty search of entities or facts says when its groups have episodes not extracted
    yet (its ``note``)."""
    try:
        note = None if hits else q.unextracted_note(store, groups, llm)
    except errors.StoreUnavailable:  # a search answers from memory through an outage
        note = None
    if note:
        found["note"] = note
    return found


class Workbench:
    """The memory service's core. Build it with :meth:`open`."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        embedder: Embedder,
        chat: ChatModel | None,
        metrics: Metrics,
        clock: Clock = utcnow,
    ):
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.chat = chat
        self.metrics = metrics
        self.clock = clock
        self.policy = DecayPolicy.from_settings(settings)
        self.snapshots = Snapshots()
        # concurrent searches embed their queries together (one model call)
        self.search = SearchEngine(store, BatchingEmbedder(embedder), metrics, clock, settings)
        # every writer of entities and facts publishes through it, and the queue claims
        # under its gate: extraction reads the graph from the engine's rows
        self.publisher = self.search.indexes.publisher
        ctx = IngestContext(store, metrics, clock, chat, embedder, self.publisher, settings)
        self.pipeline = EpisodePipeline(ctx)
        budget = settings.group_daily_budget_usd
        self.queue = EpisodeQueue(
            ctx,
            self.pipeline,
            QueueConfig.from_settings(settings),
            budget=DailyBudget(store, budget, metrics) if budget else None,
        )
        self.tenancy = Tenancy(store, clock)
        self.pages = GroupPages(store, clock)
        self.passages = PassageWriter.of(ctx)
        self.intake = Intake(
            store, self.publisher, self.passages, self.queue, self.tenancy, settings, clock,
            lambda: self.chat is not None,
        )  # fmt: skip
        self.scheduler = MaintenanceScheduler.from_settings(
            store, settings, metrics, clock, chat=chat, index=self.publisher
        )

    # --- construction -------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        settings: Settings | None = None,
        *,
        db_path: str | None = None,
        embedder: Embedder | None = None,
        chat: ChatModel | None | _Default = _DEFAULT,
        clock: Clock = utcnow,
        metrics: Metrics | None = None,
        llm_health: LLMHealth | None = None,
        read_only: bool = False,
    ) -> Workbench:
        """Open a workbench. ``chat`` defaults to the LLM the settings configure (or None);
        ``llm_health`` is the record a supervisor of that LLM marks down and up; ``read_only``:
        the database opened read-only, unmigrated (searches count no access; writes fail)."""
        settings = settings or load_settings()
        register_secret(*settings.secrets())  # scrubbed from whatever is stored or returned
        if db_path is not None:
            settings = settings.model_copy(update={"db_path": db_path})
        metrics = metrics or Metrics(
            enabled=settings.prompt_cache_metrics_enabled,
            cache_enabled=settings.prompt_cache_enabled,
            max_group_labels=settings.metrics_max_groups,
        )
        embedder = embedder or build_embedder(settings)
        store = Store.open(
            settings.db_location(),
            embedder.dimensions,
            embedder.model,
            read_only=read_only,
            pool_size=settings.database_pool_size,
        )
        log.info("database %s", store.path)
        if isinstance(chat, _Default):
            chat = build_chat_model(
                settings, metrics=metrics, store=store, clock=clock, health=llm_health
            )
        return cls(settings, store, embedder, chat, metrics, clock)

    def start(self) -> None:
        """Start the queue workers (when an LLM is configured) and the maintenance schedule.
        Without an LLM this says so once: only a process that would process episodes warns
        (``status``, ``export`` or ``import`` have nothing to say about it)."""
        remove_stale(self.snapshots.root)  # left by a killed service
        self.passages.catch_up()  # passages a crash or a failed embedder left without vectors
        if self.chat is not None:
            self.queue.start()
        else:
            log.warning("no LLM configured: episodes are accepted and stay queued; %s", NO_LLM)
        if self.settings.decay_enabled:
            self.scheduler.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Graceful stop: finish or release in-flight episodes, flush access updates."""
        self.queue.stop(timeout)
        self.scheduler.stop()
        self.search.indexes.flush()
        self.store.checkpoint()

    def close(self) -> None:
        """Stop the workers, then close the pipeline, the search engine and the store. Every
        step runs even when one before it fails (a database gone from under the process must
        not leave the search engine's threads running); a failure is raised after them all."""
        with contextlib.ExitStack() as steps:  # run last-in first-out
            steps.callback(self.store.close)
            steps.callback(self.snapshots.close)
            steps.callback(self.search.close)
            steps.callback(self.passages.close)  # what waits for its vectors, first
            steps.callback(self.pipeline.close)
            steps.callback(self.stop, timeout=5.0)

    def __enter__(self) -> Workbench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- ingestion ----------------------------------------------------------------------
    def add_memory(
        self,
        name: str,
        episode_body: str,
        group_id: str | None = None,
        source: str = "text",
        source_description: str = "",
        uuid: str | None = None,
        reference_time: str | datetime | None = None,
        priority: str = "normal",
    ) -> r.AddMemoryResult:
        """Store an episode, its passages searchable at once, and queue it for extraction;
        returns at once (:class:`~workbench.ingest.intake.Intake`)."""
        return self.intake.add(
            name, episode_body, self._group(group_id), source, source_description, uuid,
            reference_time, priority,
        )  # fmt: skip

    def add_memories(
        self, episodes: Sequence[dict[str, Any]], progress: bool = False
    ) -> list[r.AddMemoryResult]:
        """``add_memory`` for many episodes (dicts of its arguments), with a progress bar."""
        from tqdm.auto import tqdm

        return [
            self.add_memory(**episode)
            for episode in tqdm(episodes, desc="add_memory", unit="episode", disable=not progress)
        ]

    def _group(self, group_id: str | None) -> str:
        """A named group, checked; None (not given) is the default group. An empty or blank
        name is an error, never the default."""
        return self.settings.default_group_id if group_id is None else names.group_id(group_id)

    @staticmethod
    def _groups(group_ids: Sequence[str] | None) -> list[str] | None:
        """Named groups, checked (at most ``names.MAX_GROUP_IDS``); None or [] is every group."""
        return names.group_ids(group_ids)

    def process_pending(self, max_messages: int = 100_000) -> int:
        """Process queued episodes inline (notebooks, tests, ``workbench`` CLI)."""
        if self.chat is None:
            raise errors.LLMNotConfigured(NO_LLM)
        return self.queue.drain(max_messages)

    def import_jsonl(
        self,
        source: str | Path | Sequence[Any],
        progress: bool = False,
        group_id: str | None = None,
        first_line: int = 1,
        file: str | None = None,
    ) -> r.ImportResult:
        """Import pre-extracted entities and facts (JSON lines), no LLM. ``first_line``
        numbers the lines of ``source`` when it is a chunk of a larger file; ``file`` names
        it in the imported facts' sources (default: a path's file name)."""
        importer = Importer(
            self.store, self.embedder, self.clock, self._group(group_id), self.publisher
        )
        report = importer.run(source, progress=progress, first_line=first_line, file=file)
        return report.as_dict()

    def import_memories(
        self,
        lines: Sequence[Any],
        group_id: str | None = None,
        first_line: int = 1,
        file: str | None = None,
        **options: Any,
    ) -> r.ImportResult:
        """The tool of ``import_jsonl``: lines (JSON strings or objects) of an import file,
        numbered from ``first_line`` in the report's errors (a conversation export's with
        ``options``: ``jobs.history``)."""
        if isinstance(lines, str) or not isinstance(lines, (list, tuple)):
            raise errors.InvalidInput("'lines' must be a list of JSON lines or objects")
        if len(lines) > MAX_IMPORT_LINES:
            raise errors.InvalidInput(
                f"'lines' has {len(lines)} items; send at most {MAX_IMPORT_LINES} a call"
            )
        if options.get("format", "facts") != "facts":
            return imported(self, lines, self._group(group_id), first_line, options)
        return self.import_jsonl(
            list(lines), group_id=group_id, first_line=first_line, file=file or "import_memories"
        )

    # --- search -------------------------------------------------------------------------
    def search_memory_nodes(
        self,
        query: str,
        group_ids: Sequence[str] | None = None,
        max_nodes: int = 10,
        entity_types: Sequence[str] | None = None,
        **filters: Any,
    ) -> r.NodesFound:
        nodes = self.search.search_nodes(
            query, self._groups(group_ids), max_nodes, entity_types, **filters
        )
        found: r.NodesFound = {"message": f"{len(nodes)} nodes found", "nodes": jsonable(nodes)}
        return _noted(found, nodes, self.store, self._groups(group_ids), self.chat is not None)

    def search_memory_facts(
        self,
        query: str,
        group_ids: Sequence[str] | None = None,
        max_facts: int = 10,
        center_node_uuid: str | None = None,
        **filters: Any,
    ) -> r.FactsFound:
        facts, omitted = self.search.search_facts_counting(
            query, self._groups(group_ids), max_facts, center_node_uuid, **filters
        )
        sources.attach(self.store, facts)
        found: r.FactsFound = {"message": f"{len(facts)} facts found", "facts": jsonable(facts),
                               "superseded_omitted": omitted}  # fmt: skip
        return _noted(found, facts, self.store, self._groups(group_ids), self.chat is not None)

    def search_memory(
        self,
        query: str,
        group_ids: Sequence[str] | None = None,
        max_results: int = 10,
        kinds: Sequence[str] | None = None,
        **filters: Any,
    ) -> r.SearchMemoryResult:
        found = recall.recall(
            self.search, query, self._groups(group_ids), max_results, kinds, **filters
        )
        sources.attach(self.store, found.results)
        window: r.TimeWindow | None = None
        if found.time_window is not None:
            w = found.time_window
            window = {"start": w.start.isoformat(), "end": w.end.isoformat(), "text": w.text}
        return {"message": f"{len(found.results)} results found",
                "results": jsonable(found.results), "time_window": window,
                "superseded_omitted": found.superseded_omitted}  # fmt: skip

    # --- episodes and edges -------------------------------------------------------------
    def get_episodes(
        self, group_ids: Sequence[str] | None = None, max_episodes: int = 10
    ) -> r.EpisodesFound:
        if not isinstance(max_episodes, int) or not 1 <= max_episodes <= MAX_LIST:
            raise errors.InvalidInput(f"'max_episodes' must be an integer from 1 to {MAX_LIST}")
        rows = g.list_episodes(self.store, self._groups(group_ids), max_episodes)
        return {"episodes": jsonable(_scrubbed(rows, "status_detail"))}

    def delete_episode(self, uuid: str) -> r.DeleteEpisodeResult:
        accept.check_uuid(uuid)
        with self.publisher:
            with self.store.transaction():
                episode = g.get_episode(self.store, uuid)
                if not episode:
                    raise errors.NotFound(f"no episode with uuid {uuid}")
                removed = g.delete_episode(self.store, uuid)
            self.pipeline.forget_groups([episode["group_id"]])
            self.publisher.deleted(removed, "deleting an episode")
        self.reextraction().forget([episode["group_id"]])  # no open run keeps or restores it
        self.snapshots.discard()  # no copy outlives deleted data
        self.queue.refresh_gauges()
        return {
            "message": f"Episode {uuid} deleted",
            "entities_removed": len(removed["entity"]),
            "facts_removed": len(removed["fact"]),
            "passages_removed": len(removed["passage"]),
        }

    def get_entity_edge(self, uuid: str) -> r.EntityEdge:
        fact = g.get_fact(self.store, accept.check_uuid(uuid))
        if fact is None:
            raise errors.NotFound(f"no fact (entity edge) with uuid {uuid}")
        return cast(r.EntityEdge, jsonable(sources.attach(self.store, [fact])[0]))

    def get_sources(self, uuid: str) -> r.SourcesResult:
        """Every source of a fact or entity (episodes, passages, or its import)."""
        return cast(r.SourcesResult, jsonable(sources.of(self.store, accept.check_uuid(uuid))))

    def get_timeline(self, group_ids: Sequence[str] | None = None, **page: Any) -> r.TimelineResult:
        """What happened, in time order, a page at a time (:mod:`workbench.search.timeline`)."""
        answer = timeline.get_timeline(self.store, self._groups(group_ids) or None, **page)
        return cast(r.TimelineResult, jsonable(answer))

    def delete_entity_edge(self, uuid: str) -> r.Message:
        accept.check_uuid(uuid)
        with self.publisher:
            with self.store.transaction():
                if g.get_fact(self.store, uuid) is None:
                    raise errors.NotFound(f"no fact (entity edge) with uuid {uuid}")
                g.delete_facts(self.store, [uuid])
            self.publisher.deleted({"fact": [uuid]}, "deleting a fact")
        self.snapshots.discard()
        return {"message": f"Entity edge {uuid} deleted"}

    def clear_graph(self, group_ids: Sequence[str]) -> r.ClearGraphResult:
        groups = self._groups(group_ids)
        if not groups:
            raise errors.InvalidInput(
                "'group_ids' must name at least one group: clearing everything is not allowed "
                "by accident"
            )
        removed = {"episodes": 0, "entity": 0, "fact": 0, "passage": 0}
        with self.publisher:  # no claim or write publishes until the groups are gone
            for step in g.clear_groups(self.store, groups):  # each step committed
                if step.get("fact") or step.get("entity") or step.get("passage"):
                    self.publisher.deleted(step, "clearing groups")
                for kind, value in step.items():
                    removed[kind] += value if kind == "episodes" else len(value)
            self.pipeline.forget_groups(groups)
        self.reextraction().forget(groups, cleared=True)  # no open run keeps or restores them
        self.snapshots.discard()
        self.queue.refresh_gauges()
        return {
            "message": f"Cleared groups {', '.join(groups)}",
            "episodes_removed": removed["episodes"],
            "entities_removed": removed["entity"],
            "facts_removed": removed["fact"],
            "passages_removed": removed["passage"],
        }

    # --- re-extraction ------------------------------------------------------------------
    def reextraction(
        self, settings: Settings | None = None, shadow_dir: str | Path | None = None
    ) -> Reextraction:
        """Re-extraction runs on this store (``settings``: the new extraction's LLM)."""
        live = (self.store, self.publisher, self.embedder, settings or self.settings)
        return Reextraction(
            *live, self.metrics, self.clock, shadow_dir, self.snapshots, live_chat=self.chat
        )

    def reextract(
        self,
        group_id: str | None = None,
        dry_run: bool = False,
        promote: str | None = None,
        discard: str | None = None,
        compare: str | None = None,
    ) -> r.ReextractResult:
        """The ``reextract`` tool: a run of ``group_id`` (its estimate with ``dry_run``), or
        a run to ``compare``, ``promote`` or ``discard``."""
        one_action(group_id, dry_run, promote, discard, compare)
        runs = self.reextraction()
        if group_id is not None:
            group = self._group(group_id)
            answer = runs.plan(group).as_dict() if dry_run else runs.run(group)
            return cast(r.ReextractResult, jsonable(answer))
        if promote is not None:
            return cast(r.ReextractResult, runs.promote(promote))
        answer = runs.compare(compare) if compare else runs.discard(str(discard))
        return cast(r.ReextractResult, jsonable(answer))

    # --- status and queue ---------------------------------------------------------------
    def get_status(self) -> r.StatusResult:
        return _status(self)

    def get_queue_status(self, group_ids: Sequence[str] | None = None) -> r.QueueStatusResult:
        status = q.status(self.store, self.clock(), self._groups(group_ids))
        status["failed"] = _scrubbed(status.get("failed", []), "error_message")
        status["workers"] = self.settings.queue_concurrency if self.queue.running else 0
        status["llm_configured"] = self.chat is not None
        status["passages_without_vector"] = self.passages.status()
        return cast(r.QueueStatusResult, jsonable(status))

    def refresh_gauges(self) -> None:
        """Bring the queue and memory gauges up to date (before a metrics scrape)."""
        self.queue.refresh_gauges()
        maintenance.refresh_gauges(self.store, self.metrics)

    def retry_failed_episodes(
        self, episode_uuids: Sequence[str] | None = None, group_id: str | None = None
    ) -> r.RetryResult:
        if episode_uuids is not None:
            episode_uuids = [accept.check_uuid(u) for u in episode_uuids]
        uuids = self.queue.retry_failed(
            episode_uuids, self._group(group_id) if group_id is not None else None
        )
        return {"message": f"{len(uuids)} failed episodes re-queued", "episode_uuids": uuids}

    # --- decay, classification ----------------------------------------------------------
    def run_decay_maintenance(self, dry_run: bool = False) -> r.MaintenanceResult:
        # a real run refreshes the search rows itself (through the publisher, under its gate)
        report = self.scheduler.run_now(dry_run=dry_run, classify=not dry_run)
        return report.as_dict()

    def get_knowledge_health(self) -> r.KnowledgeHealthResult:
        answer: r.KnowledgeHealthResult = jsonable(
            maintenance.decay_health(
                self.store,
                self.policy,
                self.clock,
                self.settings.maintenance_interval_hours,
                enabled=self.settings.decay_enabled,
                scheduler=self.scheduler,
            )
        )
        return answer

    def classify_memory(self, text: str) -> r.ClassifyResult:
        check_classify_text(text, self.settings.max_episode_chars)
        result = classify_texts(self.chat, [text], self.metrics)[0]
        return result.as_dict()

    def recover_soft_deleted(self, uuid: str) -> r.RecoverResult:
        with self.publisher:
            result = maintenance.recover_soft_deleted(
                self.store, accept.check_uuid(uuid), self.clock
            )
            self.publisher.states_changed()
        return result

    # --- many people on one service (store.tenancy) -------------------------------------
    def list_groups(self, group_ids: Sequence[str] | None = None) -> r.GroupsResult:
        return self.tenancy.list_groups(self._groups(group_ids))

    def add_token(
        self, name: str, groups: Sequence[str] = (), read_only: bool = False, admin: bool = False
    ) -> r.NewToken:
        return self.tenancy.add_token(name, groups, read_only, admin)

    def list_tokens(self) -> r.TokensResult:
        return self.tenancy.list_tokens()

    def revoke_token(self, name: str) -> r.RevokeResult:
        return self.tenancy.revoke_token(name)

    def delete_entity(self, uuid: str) -> rb.DeleteEntityResult:
        with self.publisher:  # the browsing tools are self.pages' (store.browse)
            removed, group, answer = self.pages.delete_entity(accept.check_uuid(uuid))
            self.pipeline.forget_groups([group])
            self.publisher.deleted(removed, "deleting an entity")
        self.snapshots.discard()  # no copy outlives deleted data
        return answer

    # --- notebooks ----------------------------------------------------------------------
    def frame(self, table: str) -> pd.DataFrame:
        """A table as a pandas DataFrame (episodes, entities, facts, llm_calls, queue, ...)."""
        return views.frame(self.store, table)

    def export_parquet(self, directory: str | Path) -> dict[str, str]:
        return {k: str(v) for k, v in self.store.export_parquet(directory).items()}

    def export_snapshot(self) -> r.SnapshotResult:
        """A consistent Parquet snapshot of every table, written by this process into a new
        private temporary folder on this host (the caller, on the same machine, moves or
        reads the files; a caller never chooses where the service writes). At most
        ``snapshots.KEEP`` exist at once: older ones are removed (see ``store.snapshots``)."""
        return self.snapshots.write(self.export_parquet)


def _scrubbed(rows: list[dict[str, Any]], field: str) -> list[dict[str, Any]]:
    """The rows with ``field`` scrubbed of secrets (rows stored before scrubbing existed)."""
    return [{**row, field: scrub(row.get(field))} if row.get(field) else row for row in rows]


def _status(wb: Workbench) -> r.StatusResult:
    """``get_status``'s answer."""
    answer: r.StatusResult = jsonable(
        {
            "status": "ok",
            "database": wb.store.path,
            "llm": {
                "configured": wb.chat is not None,
                "model": getattr(wb.chat, "model", None),
                "detail": None if wb.chat is not None else NO_LLM,
            },
            "embedder": {
                "model": wb.embedder.model,
                "dimensions": wb.embedder.dimensions,
                "provider": wb.settings.embedder_kind,
            },
            "graph": g.graph_counts(wb.store),
            "queue": q.status(wb.store, wb.clock())["counts"],
            "workers_running": wb.queue.running,
        }
    )
    return answer
