"""``add_memory``'s path, start to end: the arguments checked into an episode row
(:mod:`workbench.ingest.accept`), its passages split (and, for a short one, embedded), then the
episode, its queue message and its passages written in one transaction under the publish gate,
and published: what was said is searchable by its words from the moment the call returns. A
retry of an episode already accepted answers as the first call did and writes nothing.

Tenancy of episode uuids: a uuid another group holds is not refused (that would let one tenant
claim another's uuids first, and tell it the uuid was used); the episode takes a uuid derived
from it and its group under the database's secret (:meth:`Tenancy.scoped_uuid`), the same on
every retry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, cast

from workbench import errors
from workbench import results as r
from workbench.clock import Clock
from workbench.config import Settings
from workbench.ingest import accept
from workbench.ingest.passages import passage_uuid
from workbench.ingest.pipeline import NO_LLM
from workbench.ingest.queue.episode_queue import EpisodeQueue
from workbench.ingest.verbatim import PassageWriter
from workbench.store import Store
from workbench.store import graph as g
from workbench.store import queue as q
from workbench.store.tenancy import Tenancy

__all__ = ["Intake", "own_episode"]


class Intake:
    """Accepts episodes into the store, the queue and the live indexes (see the module doc).
    ``llm_configured``: whether an LLM will extract them (the answer's ``detail`` says why
    they wait otherwise)."""

    def __init__(
        self,
        store: Store,
        publisher: Any,
        passages: PassageWriter,
        queue: EpisodeQueue,
        tenancy: Tenancy,
        settings: Settings,
        clock: Clock,
        llm_configured: Callable[[], bool],
    ):
        self.store = store
        self.publisher = publisher
        self.passages = passages
        self.queue = queue
        self.tenancy = tenancy
        self.settings = settings
        self.clock = clock
        self.llm_configured = llm_configured

    def add(
        self,
        name: str,
        episode_body: str,
        group_id: str,
        source: str,
        source_description: str,
        uuid: str | None,
        reference_time: str | datetime | None,
        priority: str,
    ) -> r.AddMemoryResult:
        """Store an episode, its passages searchable at once, and queue it for extraction."""
        llm = self.llm_configured()
        episode = accept.episode_row(
            name, episode_body, group_id, source, source_description, uuid, reference_time,
            priority, max_chars=self.settings.max_episode_chars, now=self.clock(),
            llm_configured=llm,
        )  # fmt: skip
        passages = self.passages.prepare(episode)
        with self.publisher:
            with self.store.transaction():
                existing = own_episode(self.store, self.tenancy, episode, passages)
                if existing is None:
                    self._room_in_queue()
                    g.insert_episode(self.store, episode)
                    q.enqueue(self.store, episode["uuid"], episode["group_id"],
                              episode["priority"], episode["created_at"])  # fmt: skip
                    self.passages.write(passages)
            if existing is None:  # what was said is searchable from now on (embedded soon)
                self.passages.publish(passages)
        if existing is not None:
            return cast(r.AddMemoryResult, accept.added_before(existing, episode))
        self.queue.notify_enqueued(episode["priority"])
        return {
            "message": f"Episode '{episode['name']}' queued for processing",
            "episode_uuid": episode["uuid"],
            "group_id": episode["group_id"],
            "status": "queued",
            "detail": "queued" if llm else NO_LLM,
        }

    def _room_in_queue(self) -> None:
        """Refuse a new episode while the queue holds ``max_queued_episodes`` waiting ones:
        a client that sends faster than extraction runs is told so, not queued without end."""
        cap = self.settings.max_queued_episodes
        waiting = q.waiting(self.store)
        if waiting >= cap:
            raise errors.QueueFull(
                f"the extraction queue holds {waiting} episodes, its cap "
                f"(SVC_KNOWLEDGE_MAX_QUEUED_EPISODES={cap}): send again once it has "
                "drained (see get_queue_status)"
            )


def own_episode(
    store: Store, tenancy: Tenancy, episode: dict[str, Any], passages: Iterable[dict[str, Any]]
) -> dict[str, Any] | None:
    """The episode stored under ``episode``'s uuid in its group (a retry), or None; a uuid
    another group holds moves ``episode`` and its passages to their scoped uuid (see the
    module doc)."""
    existing = g.get_episode(store, episode["uuid"])
    if existing is None or existing["group_id"] == episode["group_id"]:
        return existing
    scoped = tenancy.scoped_uuid("uuid", episode["group_id"], episode["uuid"])
    episode["uuid"] = scoped
    for row in passages:  # named after their episode
        row.update(uuid=passage_uuid(scoped, row["position"]), episode_uuid=scoped)
    return g.get_episode(store, scoped)
