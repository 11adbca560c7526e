"""The queue's work on an episode: read it (with its context), extract it, write it.

:class:`EpisodePipeline` is the one collaborator the episode queue drives: ``prefetch`` a
claimed batch's episodes in a few queries, ``prepare`` one (the LLM side,
:class:`~workbench.ingest.extract.Extractor`), ``commit`` several in one transaction together
with the queue's acknowledgement (:class:`~workbench.ingest.write.EpisodeWriter`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from workbench.errors import LLMNotConfigured
from workbench.ingest.context import IngestContext
from workbench.ingest.extract import Extractor
from workbench.ingest.recent import RecentEpisodes
from workbench.ingest.records import EpisodeRow, PreparedEpisode
from workbench.ingest.reembed import ReembedPolicy
from workbench.ingest.run import RunPreparer
from workbench.ingest.write import EpisodeWriter
from workbench.store import graph as g
from workbench.store.queue import QueueMessage

NO_LLM = (
    "waiting: no LLM is configured (set SVC_KNOWLEDGE_COMPAT_BASE_URL and "
    "SVC_KNOWLEDGE_MODEL_NAME, then restart)"
)


class EpisodePipeline:
    """The queue's :class:`~workbench.ingest.queue.work.EpisodeWork` for episodes:
    extraction, then the write."""

    def __init__(self, ctx: IngestContext, context_episodes: int = 2):
        settings = ctx.episode_parts().settings
        self.store = ctx.store
        self.chat = ctx.chat
        self.metrics = ctx.metrics
        # each group's latest processed episodes, with room for some that arrive out of order
        self.recent = RecentEpisodes(2 * context_episodes) if context_episodes else None
        reembed = ReembedPolicy(settings.entity_reembed_fraction)
        self.extractor = Extractor(ctx, self.recent, reembed, context_episodes)
        self.runs = RunPreparer(self.extractor, settings.queue_group_run)
        self.writer = EpisodeWriter(ctx, self.recent, reembed)

    def prefetch(self, messages: list[QueueMessage]) -> list[QueueMessage]:
        found = g.episodes_by_uuid(self.store, [m["episode_uuid"] for m in messages])
        todo = self.extractor.with_context(
            [_episode(e) for e in found.values() if e["status"] != "done"]
        )
        episodes = {**found, **{e["uuid"]: e for e in todo}}
        return [{**m, "episode": episodes.get(m["episode_uuid"])} for m in messages]

    def prepare(self, message: QueueMessage) -> PreparedEpisode:
        if self.chat is None:
            raise LLMNotConfigured(NO_LLM)
        if "episode" in message:  # prefetched with its batch
            episode = message["episode"]
        else:
            episode = g.get_episode(self.store, message["episode_uuid"])
        if episode is None or episode["status"] == "done":
            # deleted while queued, or a redelivered, already-written episode: only ack
            return PreparedEpisode(message["episode_uuid"])
        return self.extractor.prepare(_episode(episode))

    def prepare_run(self, messages: list[QueueMessage]) -> list[tuple[bool | None, Any]]:
        """Consecutive messages of one group (:mod:`workbench.ingest.run`): per message, in
        order, ``(True, prepared)``, ``(False, error)`` for the one that failed, ``(None,
        None)`` for those after it (not prepared: they go back to the queue)."""
        if self.chat is None:
            raise LLMNotConfigured(NO_LLM)
        found = g.episodes_by_uuid(
            self.store, [m["episode_uuid"] for m in messages if "episode" not in m]
        )
        episodes = [m["episode"] if "episode" in m else found.get(m["episode_uuid"])
                    for m in messages]  # fmt: skip
        live = [_episode(e) for e in episodes if e is not None and e["status"] != "done"]
        outcome = self.runs.prepare(live)
        prepared = {p.episode_uuid: p for p in outcome.prepared}
        failed = None if outcome.error is None else live[len(outcome.prepared)]["uuid"]
        results: list[tuple[bool | None, Any]] = []
        stopped = False
        for message in messages:
            uuid = message["episode_uuid"]
            if stopped:
                results.append((None, None))
            elif uuid == failed:
                results.append((False, outcome.error))
                stopped = True
            elif uuid in prepared:
                results.append((True, prepared[uuid]))
            else:  # deleted while queued, or already written: only ack
                results.append((True, PreparedEpisode(uuid)))
        return results

    def close(self) -> None:
        self.runs.close()

    def commit(self, results: list[PreparedEpisode], ack: Callable[[], None]) -> None:
        for item in self.writer.write(results, also=ack):
            self.metrics.record_episode_processed(item.group_id)

    def available(self) -> bool:
        """False while the LLM is known to be down (a supervisor restarts it)."""
        health = getattr(self.chat, "health", None)
        return self.chat is not None and (health is None or health.available)

    def forget_groups(self, group_ids: list[str]) -> None:
        """Episodes of these groups were deleted: their context is read again when needed."""
        if self.recent is not None:
            self.recent.forget(group_ids)


def _episode(row: Mapping[str, Any]) -> EpisodeRow:
    """An episodes row as the store reads it (``graph.EPISODE_COLUMNS``, the columns
    :class:`EpisodeRow` declares), perhaps with its ``context``."""
    return cast(EpisodeRow, row)
