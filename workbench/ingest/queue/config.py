"""The episode queue's knobs, one value (``Settings.queue_*`` by default)."""

from __future__ import annotations

from dataclasses import dataclass

from workbench.config import Settings

__all__ = ["QUEUE_NAME", "QueueConfig"]

QUEUE_NAME = "episodes"


@dataclass(frozen=True)
class QueueConfig:
    """How an :class:`~workbench.ingest.queue.episode_queue.EpisodeQueue` claims, prepares,
    writes and retries."""

    concurrency: int = 4  # units prepared at once (LLM calls are I/O bound)
    lease_seconds: float = 300.0
    max_attempts: int = 6
    poll_seconds: float = 0.5
    base_delay: float = 2.0  # of the retries' exponential backoff
    batch_size: int = 16  # prepared episodes written in one transaction, at most
    max_crashes: int = 3  # process deaths while a message was in flight, before it fails
    # up to this many consecutive messages of a group with a backlog are claimed and
    # prepared together (work with ``prepare_run`` only)
    run_size: int = 1
    # the ``queue_name`` label of its metrics (a re-extraction's shadow queue has its own)
    queue_name: str = QUEUE_NAME

    @classmethod
    def from_settings(cls, settings: Settings, queue_name: str = QUEUE_NAME) -> QueueConfig:
        return cls(
            concurrency=settings.queue_concurrency,
            lease_seconds=settings.queue_lease_seconds,
            max_attempts=settings.queue_max_attempts,
            poll_seconds=settings.queue_poll_seconds,
            batch_size=settings.queue_batch_size,
            max_crashes=settings.queue_max_crashes,
            run_size=settings.queue_group_run,
            queue_name=queue_name,
        )
