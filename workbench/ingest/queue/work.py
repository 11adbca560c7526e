"""What the episode queue drives: an :class:`EpisodeWork` prepares claimed messages and
commits what it prepared (for episodes: :class:`~workbench.ingest.pipeline.EpisodePipeline`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from workbench.store.queue import QueueMessage

__all__ = ["EpisodeWork", "RunWork", "Unit", "units_of"]

Unit = list[QueueMessage]  # one message, or a run of one group's consecutive messages


class EpisodeWork(Protocol):
    """What the queue needs done with the messages it claims."""

    def prefetch(self, messages: list[QueueMessage]) -> list[QueueMessage]:
        """The messages with their ``episode`` read (in a few queries for the whole batch)."""
        ...

    def prepare(self, message: QueueMessage) -> Any:
        """Everything but the write (LLM calls, reads); raises on failure."""
        ...

    def commit(self, results: list[Any], ack: Callable[[], None]) -> None:
        """Write the prepared results in one transaction that also calls ``ack()``; raises
        :class:`~workbench.ingest.queue.setbacks.PrepareAgain` when they went stale."""
        ...

    def available(self) -> bool:
        """False while the work cannot be done (its LLM is known to be down): nothing is
        claimed, and a transient failure meanwhile does not spend an attempt."""
        ...


class RunWork(EpisodeWork, Protocol):
    """Work that can also prepare a run: consecutive messages of one group at once."""

    def prepare_run(self, messages: list[QueueMessage]) -> list[tuple[bool | None, Any]]:
        """Per message, in order: (True, result), (False, error) for the one that failed,
        (None, None) for those after it, which go back to the queue unprepared."""
        ...


def units_of(messages: list[QueueMessage]) -> list[Unit]:
    """Claimed messages as units: consecutive messages of one group (a claim returns each
    group's run together, in order) form one."""
    units: list[Unit] = []
    for message in messages:
        if units and units[-1][0]["group_id"] == message["group_id"]:
            units[-1].append(message)
        else:
            units.append([message])
    return units
