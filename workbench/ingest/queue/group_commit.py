"""Leader/follower batching of writes: the episodes several queue workers finish at about the
same time share one transaction."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("workbench.ingest.queue.group_commit")


class GroupCommit:
    """Leader/follower batching of writes: ``submit(item)`` returns once ``write(items)`` has
    written ``item``, together with whatever other threads submitted meanwhile.

    The first submitter becomes the leader and writes everything pending; the others wait for
    it (and the next leader takes what arrived during that write). When a batch fails, its
    items are written one by one so one bad item fails alone; ``submit`` raises that item's
    error in its own thread (``submit_many``: a worker's batch, each item's error on its
    ticket). Queue workers submit their batches here, so the episodes several workers finish
    at about the same time share one transaction.
    """

    def __init__(self, write: Callable[[list[Any]], None], max_batch: int = 16):
        self._write = write
        self.max_batch = max(1, max_batch)
        self._cv = threading.Condition()
        self._pending: list[_Ticket] = []
        self._leading = False

    def submit(self, item: Any) -> None:
        self.submit_many([item])[0].result()

    def submit_many(self, items: list[Any]) -> list[_Ticket]:
        """Like :meth:`submit` for several items (written together with whatever else is
        pending); returns their tickets, each with its own ``error`` (None when written)."""
        tickets = [_Ticket(item) for item in items]
        if not tickets:
            return tickets
        with self._cv:
            self._pending.extend(tickets)
        while True:  # lead batches (oldest first) until these tickets are all written
            with self._cv:
                while not tickets[-1].done and self._leading:
                    self._cv.wait()
                if tickets[-1].done:  # batches are taken oldest first: the rest are done
                    break
                self._leading = True
                batch = self._pending[: self.max_batch]
                self._pending = self._pending[self.max_batch :]
            try:
                self.write_batch(batch)
            finally:
                with self._cv:
                    self._leading = False
                    self._cv.notify_all()
        return tickets

    def write_batch(self, tickets: list[_Ticket]) -> None:
        try:
            self._write([t.item for t in tickets])
        except BaseException as exc:
            if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: none written
                for ticket in tickets:
                    ticket.error, ticket.done = exc, True
                raise
            if len(tickets) == 1:
                tickets[0].error = exc
            else:
                log.warning(
                    "a batch of %d writes failed (%s): writing them one by one", len(tickets), exc
                )
                for ticket in tickets:
                    try:
                        self._write([ticket.item])
                    except Exception as one:
                        ticket.error = one
        for ticket in tickets:
            ticket.done = True


@dataclass
class _Ticket:
    item: Any
    done: bool = False
    error: BaseException | None = None

    def result(self) -> None:
        if self.error is not None:
            raise self.error
