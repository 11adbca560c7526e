"""A history import: conversations (:mod:`workbench.jobs.conversations`) stored as ``message``
episodes in bulk, their passages searchable by their words when it returns.

Each session of a conversation becomes one episode, named by the conversation's title, its
``reference_time`` the session's first message. Its uuid is derived from the group, the
conversation's id and the session's number, so the same file imported again (with the same
session gap) adds nothing. Episodes and passages are written ``CHUNK`` episodes at a time,
each chunk in one transaction of bulk writes, then indexed by their words (the publish gate);
their vectors come after, from the passage writer's bulk lane (behind live ``add_memory``
traffic, each group in turn: :mod:`workbench.ingest.backlog`).

Extraction is a choice: without ``extract`` an episode is stored with status ``stored`` and
no queue message (no LLM call, no cost). With it, the new episodes (and the group's stored
ones this file names) are queued at ``low`` priority, behind live traffic, in the order of
their reference times; the group's daily budget applies as to any episode. ``dry_run``
writes nothing and returns the counts and the extraction's predicted calls and cost
(:func:`workbench.jobs.generations.estimate`, as ``workbench reextract --dry-run``).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from workbench import errors
from workbench.clock import Clock
from workbench.config import Settings
from workbench.index.publish import Publisher
from workbench.ingest import accept
from workbench.ingest.passages import passage_rows
from workbench.ingest.queue.episode_queue import EpisodeQueue
from workbench.ingest.verbatim import PassageWriter, cached_row
from workbench.jobs.conversations import (
    FORMATS,
    GAP_HOURS,
    Conversation,
    decode_line,
    detect,
    parse,
    read_records,
    sessions,
)
from workbench.jobs.generations import estimate
from workbench.llm.client import ChatModel
from workbench.llm.pricing import PriceTable
from workbench.results import ImportResult
from workbench.store import Store
from workbench.store import history as h
from workbench.store.schema import PRIORITIES

__all__ = [
    "HistoryImport",
    "HistoryReport",
    "episode_uuid",
    "import_history",
    "imported",
    "CHUNK",
    "STORED_DETAIL",
]

CHUNK = 500  # episodes a transaction
MAX_ERRORS = 100  # problems a report lists (all are counted)
STORED_DETAIL = "imported without extraction (import it again with --extract to extract it)"
_NAMESPACE = uuidlib.UUID("6f1d8a52-9b0e-4c41-8f33-1f6d2a9e7c10")


def episode_uuid(group_id: str, conversation: str, session: int) -> str:
    """A session's episode uuid: the same for the same group, conversation and session."""
    return str(uuidlib.uuid5(_NAMESPACE, f"{group_id}\x00{conversation}\x00{session}"))


@dataclass
class HistoryReport:
    """What an import did (or, ``dry_run``, would do)."""

    format: str
    conversations: int = 0
    episodes_created: int = 0
    episodes_existing: int = 0
    passages: int = 0
    extraction_queued: int = 0
    dry_run: bool = False
    estimate: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)
    error_count: int = 0

    def problem(self, message: str) -> None:
        self.error_count += 1
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(message)

    def as_dict(self) -> ImportResult:
        """The import tool's answer (no entities or facts: those come from extraction)."""
        return {"entities_created": 0, "entities_existing": 0, "facts_created": 0,
                "facts_existing": 0, "format": self.format, "conversations": self.conversations,
                "episodes_created": self.episodes_created,
                "episodes_existing": self.episodes_existing, "passages": self.passages,
                "extraction_queued": self.extraction_queued, "dry_run": self.dry_run,
                "estimate": self.estimate, "errors": list(self.errors),
                "error_count": self.error_count}  # fmt: skip


@dataclass
class _Planned:
    episode: dict[str, Any]
    conversation: Conversation
    passages: list[dict[str, Any]] = field(default_factory=list)


class Host(Protocol):
    """What an import takes from a workbench."""

    store: Store
    publisher: Publisher
    passages: PassageWriter
    clock: Clock
    settings: Settings
    chat: ChatModel | None
    queue: EpisodeQueue


class HistoryImport:
    """Imports conversations into one group (see the module doc)."""

    def __init__(
        self,
        store: Store,
        publisher: Publisher,
        passages: PassageWriter,
        clock: Clock,
        *,
        max_chars: int,
        llm_configured: bool,
        model: str | None = None,
        price_table: str | None = None,
        queued: Callable[[int], None] | None = None,
    ):
        self.store = store
        self.publisher = publisher
        self.passages = passages
        self.clock = clock
        self.max_chars = max_chars
        self.llm_configured = llm_configured
        self.model = model
        self.price_table = price_table
        self.queued = queued  # told of each new message

    @classmethod
    def of(cls, host: Host) -> HistoryImport:
        settings = host.settings
        return cls(
            host.store,
            host.publisher,
            host.passages,
            host.clock,
            max_chars=settings.max_episode_chars,
            llm_configured=host.chat is not None,
            model=settings.model_name,
            price_table=settings.price_table_path,
            queued=host.queue.notify_enqueued,
        )

    def run(
        self,
        conversations: Sequence[Conversation],
        report: HistoryReport,
        group_id: str,
        *,
        gap_hours: float = GAP_HOURS,
        extract: bool = False,
        dry_run: bool = False,
        progress: Callable[[int], object] | None = None,
    ) -> HistoryReport:
        """Import ``conversations`` into ``group_id``; ``report`` holds the parse problems
        already (its counts are added to)."""
        if gap_hours < 0:
            raise errors.InvalidInput("the session gap must be 0 (none) or more hours")
        report.conversations += len(conversations)
        report.dry_run = dry_run
        planned = self._plan(conversations, group_id, gap_hours, extract, report)
        states = self._states([p.episode["uuid"] for p in planned])
        new = self._split([p for p in planned if p.episode["uuid"] not in states], report)
        stored = [p.episode for p in planned if states.get(p.episode["uuid"]) == "stored"]
        report.episodes_existing += len(states)
        if extract:
            report.estimate = self._estimate(group_id, [p.episode for p in new] + stored)
        if dry_run:
            report.episodes_created += len(new)
            report.passages += sum(len(p.passages) for p in new)
            report.extraction_queued += len(new) + len(stored) if extract else 0
            return report
        new.sort(key=lambda p: p.episode["reference_time"])  # the group's order
        written: list[dict[str, Any]] = []
        with self.store.bulk_writes(), self.publisher.bulk():
            for start in range(0, len(new), CHUNK):
                chunk = new[start : start + CHUNK]
                written += self._write(chunk, group_id, extract, report)
                if progress is not None:
                    progress(len(chunk))
            if extract and stored:
                self._queue_stored(stored, group_id, report)
        # embedded once the import is written (its writes do not share the cores with the
        # model); a command that ends now leaves them to the next start
        self.passages.backlog(written)
        if self.queued is not None:
            for _ in range(report.extraction_queued):
                self.queued(PRIORITIES["low"])  # counted, and the queue's loop woken
        return report

    # --- plan -----------------------------------------------------------------------------
    def _plan(
        self,
        conversations: Sequence[Conversation],
        group_id: str,
        gap_hours: float,
        extract: bool,
        report: HistoryReport,
    ) -> list[_Planned]:
        now = self.clock()
        planned: dict[str, _Planned] = {}
        for conversation in conversations:
            try:
                episodes = [
                    self._episode(session, conversation, group_id, extract, now)
                    for session in sessions(conversation, gap_hours, self.max_chars)
                ]
            except errors.InvalidInput as exc:
                report.problem(f"{conversation.position} ({conversation.key}): {exc}; skipped")
                continue
            for episode in episodes:
                planned.setdefault(episode["uuid"], _Planned(episode, conversation))
        return list(planned.values())

    @staticmethod
    def _split(new: list[_Planned], report: HistoryReport) -> list[_Planned]:
        """The new episodes' passages (only theirs: a file imported again splits nothing);
        an episode refused by the passage rules is reported and left out."""
        kept = []
        for p in new:
            try:
                p.passages = passage_rows(p.episode)
            except errors.InvalidInput as exc:
                where = f"{p.conversation.position} ({p.conversation.key})"
                report.problem(f"{where}, episode {p.episode['name']!r}: {exc}; skipped")
                continue
            kept.append(p)
        return kept

    def _episode(
        self, session: Any, conversation: Conversation, group_id: str, extract: bool, now: datetime
    ) -> dict[str, Any]:
        episode = accept.episode_row(
            session.name[: accept.MAX_NAME],
            session.body,
            group_id,
            "message",
            "conversation import",
            episode_uuid(group_id, conversation.key, session.index),
            session.reference_time,
            "low",
            max_chars=self.max_chars,
            now=now,
            llm_configured=self.llm_configured,
        )
        if not extract:
            episode.update(status="stored", status_detail=STORED_DETAIL)
        return episode

    def _states(self, uuids: list[str]) -> dict[str, str]:
        states: dict[str, str] = {}
        for start in range(0, len(uuids), 5 * CHUNK):
            states.update(h.episode_states(self.store, uuids[start : start + 5 * CHUNK]))
        return states

    def _estimate(self, group_id: str, episodes: list[dict[str, Any]]) -> dict[str, Any]:
        prices = PriceTable.load(self.price_table)
        return estimate(group_id, episodes, {}, self.model, prices).as_dict()

    # --- write ----------------------------------------------------------------------------
    def _write(
        self, chunk: list[_Planned], group_id: str, extract: bool, report: HistoryReport
    ) -> list[dict[str, Any]]:
        """The chunk in one transaction, then indexed by its words; its passages written."""
        episodes = [p.episode for p in chunk]
        rows = [r for p in chunk for r in p.passages]
        with self.publisher:
            with self.store.transaction():
                self.store.lock_groups([group_id])
                # written meanwhile by another import or add_memory: not written twice
                here = h.episode_states(self.store, [e["uuid"] for e in episodes])
                if here:
                    episodes = [e for e in episodes if e["uuid"] not in here]
                    rows = [r for r in rows if r["episode_uuid"] not in here]
                    report.episodes_existing += len(here)
                h.insert_episodes(self.store, episodes)
                h.insert_passages(self.store, rows)
                if extract:
                    h.enqueue_stored(self.store, episodes, PRIORITIES["low"], self.clock())
            # committed: found by their words from now on, embedded in the background
            self.publisher.inserted("passage", [cached_row(r) for r in rows], "an import")
        report.episodes_created += len(episodes)
        report.passages += len(rows)
        report.extraction_queued += len(episodes) if extract else 0
        return rows

    def _queue_stored(
        self, stored: list[dict[str, Any]], group_id: str, report: HistoryReport
    ) -> None:
        """Episodes an earlier import stored without extraction, queued now."""
        stored.sort(key=lambda e: e["reference_time"])
        with self.store.transaction():
            self.store.lock_groups([group_id])
            still = h.episode_states(self.store, [e["uuid"] for e in stored])
            stored = [e for e in stored if still.get(e["uuid"]) == "stored"]
            h.enqueue_stored(self.store, stored, PRIORITIES["low"], self.clock())
        report.extraction_queued += len(stored)


def import_history(
    job: HistoryImport,
    source: str | Path | Sequence[Any],
    fmt: str | None,
    group_id: str,
    *,
    first: int = 1,
    gap_hours: float = GAP_HOURS,
    extract: bool = False,
    dry_run: bool = False,
    progress: bool = False,
) -> HistoryReport:
    """Read ``source`` (an export file's path, or its records: a ChatGPT or Claude export's
    conversations, or a JSON-lines file's messages, numbered from ``first``), tell its format
    (``fmt`` None) and import it with ``job``."""
    if isinstance(source, (str, Path)):
        records, _ = read_records(source)
    else:
        records = [decode_line(x) for x in source]  # a tool's lines: JSON texts or values
    fmt = fmt or detect(records)
    if fmt is None:
        raise errors.InvalidInput(
            "cannot tell the conversation format (a ChatGPT or Claude conversations.json, "
            f"or JSON lines of messages): name it with --format ({', '.join(FORMATS)})"
        )
    conversations, problems = parse(records, fmt, first)
    report = HistoryReport(fmt)
    for problem in problems:
        report.problem(problem)
    bar = _bar(len(conversations), progress and not dry_run)
    try:
        return job.run(
            conversations,
            report,
            group_id,
            gap_hours=gap_hours,
            extract=extract,
            dry_run=dry_run,
            progress=bar.update,
        )
    finally:
        bar.close()


class _NoBar:
    def update(self, n: int) -> None: ...
    def close(self) -> None: ...


def _bar(total: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(desc="import", unit="episode")


def imported(
    host: Host, lines: Sequence[Any], group_id: str, first: int, options: dict[str, Any]
) -> ImportResult:
    """The ``import_memories`` tool's answer for a conversation export (``options``: the
    tool's ``format``, ``extract``, ``dry_run`` and ``session_gap_hours``)."""
    report = import_history(
        HistoryImport.of(host),
        list(lines),
        options.get("format"),
        group_id,
        first=first,
        gap_hours=options.get("session_gap_hours", GAP_HOURS),
        extract=bool(options.get("extract")),
        dry_run=bool(options.get("dry_run")),
    )
    return report.as_dict()
