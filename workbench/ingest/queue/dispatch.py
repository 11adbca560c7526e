"""The episode queue's one loop: claim for a pool of preparers, write what they prepared.

A :class:`Dispatcher` is one driver of a queue: the background thread of
:meth:`~workbench.ingest.queue.episode_queue.EpisodeQueue.start` runs :meth:`Dispatcher.run`, and
:meth:`~workbench.ingest.queue.episode_queue.EpisodeQueue.drain` runs the same turns on the caller's
thread (:meth:`Dispatcher.drain`). Each turn returns held messages once the store is back,
writes the prepared ones when it is time, claims more when at most ``concurrency`` are being
prepared, and renews the leases of everything unfinished every lease/3.

A claim takes the heads of up to ``2 × concurrency`` (at least ``run_size``, at most
``batch_size``) minus those being prepared, in one transaction, under the ``gate``; each unit
(a message, or a run of one group's consecutive messages) goes to the pool. A prepared unit
joins the ones waiting to be written; they are written in one transaction
(:class:`~workbench.ingest.queue.group_commit.GroupCommit`) once there are ``batch_size`` of them,
nothing else is being prepared, or the oldest has waited ``COMMIT_LINGER_SECONDS`` (a group's
next episode waits for that write: it must see what the previous one wrote). A claim costs
~2-5 ms even when it finds nothing, so after one that left no runnable head the next waits for
something that may have changed that (an enqueue, a finished episode, a poll).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, cast

from workbench.clock import Clock
from workbench.errors import StoreError, StoreUnavailable
from workbench.ingest.queue.budget import DailyBudget
from workbench.ingest.queue.config import QueueConfig
from workbench.ingest.queue.group_commit import GroupCommit
from workbench.ingest.queue.outcomes import Outcomes, QueueGauges
from workbench.ingest.queue.recovery import Recovery
from workbench.ingest.queue.setbacks import HeldMessages, PrepareAgain, SingleGroups
from workbench.ingest.queue.work import EpisodeWork, RunWork, Unit, units_of
from workbench.store import Store
from workbench.store import queue as q
from workbench.store.queue import QueueMessage

__all__ = ["COMMIT_LINGER_SECONDS", "Dispatcher", "QueueParts"]

log = logging.getLogger("workbench.ingest.queue.episode_queue")

# how long a prepared episode may wait for others to share its commit while more are being
# prepared: a commit costs ~20 ms of DuckDB work however many episodes it writes
COMMIT_LINGER_SECONDS = 0.2

Prepared = list[tuple[bool | None, Any, float]]  # per message: ok, result or error, its start


class _Released:
    """An outcome: the message went back to the queue unspent."""


RELEASED: Final = _Released()
Outcome = tuple[QueueMessage, BaseException | _Released | None, float]  # error None: written


@dataclass
class QueueParts:
    """What the drivers of one queue share with it."""

    store: Store
    clock: Clock
    work: EpisodeWork
    config: QueueConfig  # batch_size and run_size already at least 1
    # held while claiming and while committing (until the commit's search-index updates are
    # done): a claimed episode sees everything written before it
    gate: AbstractContextManager[object]
    after_claim: Callable[[], None] | None  # under the gate, after a claim: other processes
    outcomes: Outcomes
    gauges: QueueGauges
    recovery: Recovery
    singles: SingleGroups
    commits: GroupCommit
    budget: DailyBudget | None  # groups at their daily LLM budget wait
    in_flight: Callable[[], list[str]]  # every driver's claimed messages (kept at recovery)


class Dispatcher:
    """One driver of the queue's loop (see the module docstring)."""

    def __init__(self, parts: QueueParts, owner: str, pool: Executor):
        self.parts = parts
        self.config = parts.config
        self.store = parts.store
        # the lease owner: unique across the processes sharing a store (host, process)
        self.owner = owner
        self.pool = pool
        self.stop = threading.Event()
        self.wake = threading.Event()
        self.abandon = False  # stopped past its timeout: exit without writing what is left
        # claimed units being prepared, and prepared messages waiting to be written together:
        # (message, ok, result or error, start, unit number; a unit is written in order)
        self._unfinished: dict[Future[Prepared], Unit] = {}
        self._ready: list[tuple[QueueMessage, bool, Any, float, int]] = []
        self._lock = threading.Lock()
        self._held = HeldMessages()  # outcomes the store was away for (ingest.queue.setbacks)
        self._units = 0
        self._ready_since = 0.0
        # False after a claim left no runnable head, until something may have changed that;
        # _claim_events counts those changes, so one that lands during a claim is not lost
        self._may_claim = True
        self._claim_events = 0
        self._last_claim = 0.0  # monotonic time of the last claim attempt
        self._renewed = time.monotonic()
        self._store_failing: str | None = None  # what the store last failed with (said once)

    # --- the two ways to run the loop ---------------------------------------------------
    def run(self) -> None:
        """The background loop, until :attr:`stop`; then finish the started work and return
        the rest to the queue."""
        while not self.abandon:
            stopping = self.stop.is_set()
            if not self.store.available:  # nothing can be written, claimed or released
                if stopping:
                    self._left_at_stop()
                    return
                self._renewed = 0.0  # once it is back: renew at once (leases may have run out)
                self._pause(self.config.poll_seconds)
                continue
            claimed, failed = 0, False
            try:
                claimed = self.turn(stopping)
                self._store_failing = None
            except StoreError as exc:  # a full disk: one line when it starts, not each turn
                if str(exc) != self._store_failing:
                    log.warning("queue dispatcher: %s", exc)
                self._store_failing, failed = str(exc), True
            except Exception:  # never let the dispatcher die: log and keep going
                log.exception("queue dispatcher error")
                failed = True
            idle = self.idle()
            if stopping and idle:
                return
            if not claimed:
                self._pause(self._wait(idle, failed))
            self._poll_due()

    def drain(self, max_messages: int) -> int:
        """The same turns on the caller's thread until no due message is left (or
        ``max_messages`` were claimed) and everything claimed is written; how many were
        claimed. An error is raised after what this driver holds went back to the queue."""
        claimed_total = 0
        try:
            while True:
                claimed = self.turn(False, limit=max_messages - claimed_total)
                claimed_total += claimed
                if claimed:
                    continue
                if self.idle():
                    return claimed_total
                self._pause(self._wait(False, False))
                self._poll_due()
        except BaseException:  # KeyboardInterrupt, a store error: nothing stays leased
            self.abandon = True
            self.cancel_unstarted()
            try:
                q.release_all(self.store, self.owner)
            except Exception as exc:  # their leases run out instead
                log.warning("returning the drained episodes to the queue failed: %s", exc)
            raise

    def turn(self, stopping: bool, limit: int | None = None) -> int:
        """One turn of the loop (see the module docstring); how many messages it claimed."""
        self._release_held()
        if stopping:
            self._return_unstarted()
        self._write_ready(force=stopping)
        claimed = 0 if stopping else self._claim(limit)
        if time.monotonic() - self._renewed >= self.config.lease_seconds / 3:
            self._renewed = time.monotonic()
            self._renew_unfinished()
        return claimed

    def idle(self) -> bool:
        with self._lock:
            return not self._unfinished and not self._ready

    def claimable(self) -> None:
        """Something happened that may have made a head runnable: the next claim may try."""
        self._claim_events += 1
        self._may_claim = True
        self.wake.set()

    def in_flight(self) -> list[str]:
        """Uuids of the claimed messages being prepared, waiting to be written, or held."""
        with self._lock:
            uuids = [m["episode_uuid"] for unit in self._unfinished.values() for m in unit]
            uuids += [m["episode_uuid"] for m, *_ in self._ready]
        return uuids + self._held.uuids()

    def cancel_unstarted(self) -> None:
        """Stopped past the timeout: no worker may start a claimed unit after its release."""
        with self._lock:
            unstarted = list(self._unfinished)
        for future in unstarted:
            future.cancel()

    def _pause(self, seconds: float) -> None:
        self.wake.wait(seconds)
        self.wake.clear()

    def _wait(self, idle: bool, failed: bool) -> float:
        """How long to wait for a wake-up: the poll, the commit linger, the next renewal."""
        wait = min(self.config.poll_seconds, self._linger_left())
        if not idle:  # leases to renew in time
            renew_at = self._renewed + self.config.lease_seconds / 3
            wait = min(wait, max(0.0, renew_at - time.monotonic()))
        if failed:  # the store is failing: do not spin on it
            wait = max(wait, min(self.config.poll_seconds, 0.1))
        return wait

    def _poll_due(self) -> None:
        if time.monotonic() - self._last_claim >= self.config.poll_seconds:
            self._may_claim = True  # a poll: retries fall due, leases run out

    def _left_at_stop(self) -> None:
        """Stopping while the store is down: what was claimed stays leased to this process
        and returns to the queue when its lease runs out (nothing is lost)."""
        with self._lock:
            left = len(self._ready) + sum(len(u) for u in self._unfinished.values())
        log.warning(
            "stopping while the database is unreachable: %d claimed episodes return to the "
            "queue when their leases run out",
            left + len(self._held),
        )

    # --- claiming -----------------------------------------------------------------------
    def _claim(self, limit: int | None) -> int:
        """Claim and hand out messages when at most ``concurrency`` are being prepared."""
        parts, config = self.parts, self.config
        with self._lock:
            preparing = sum(len(unit) for unit in self._unfinished.values())
        # a run of one group may take up to run_size messages however few workers there are;
        # never more than one write takes (a run is written in one transaction)
        room = min(max(2 * config.concurrency, config.run_size), config.batch_size) - preparing
        if limit is not None:
            room = min(room, limit)
        if preparing > config.concurrency or room <= 0 or not self._may_claim:
            return 0
        if not parts.work.available():  # the next poll looks again
            return 0
        events = self._claim_events
        self._last_claim = time.monotonic()
        now = parts.clock()
        parts.recovery.requeue_expired(now, parts.in_flight())
        if parts.budget is not None:
            parts.budget.hold(now)
        with parts.gate:
            if self.stop.is_set() or self.abandon:  # stopped while waiting for the gate
                return 0
            messages, more = q.claim_heads(
                self.store,
                self.owner,
                now,
                config.lease_seconds,
                room,
                config.run_size,
                parts.singles.groups(),
            )
            if messages and parts.after_claim is not None:
                parts.after_claim()
        if not more and events == self._claim_events:
            self._may_claim = False  # every runnable head is taken: no use asking again yet
        self._hand_out(messages)
        return len(messages)

    def _hand_out(self, messages: list[QueueMessage]) -> None:
        handed = 0
        try:
            for unit in units_of(self._prefetched(messages)):
                with self._lock:
                    future = self.pool.submit(self._work, unit)
                    self._unfinished[future] = unit
                future.add_done_callback(self._prepared)
                handed += len(unit)
        except BaseException:  # nothing claimed stays leased to nobody
            for message in messages[handed:]:
                q.release(self.store, message["episode_uuid"], self.owner)
            raise

    def _prefetched(self, messages: list[QueueMessage]) -> list[QueueMessage]:
        if len(messages) < 2:  # the lone message's episode is read by prepare
            return messages
        try:
            return self.parts.work.prefetch(messages)
        except Exception:  # prepare reads what it needs itself
            log.exception("prefetching %d messages failed", len(messages))
            return messages

    def _renew_unfinished(self) -> None:
        uuids = self.in_flight()
        if uuids:
            until = self.parts.clock() + timedelta(seconds=self.config.lease_seconds)
            q.renew_leases(self.store, uuids, self.owner, until)

    # --- preparing (on the pool) --------------------------------------------------------
    def _work(self, unit: Unit) -> Prepared:
        """A worker's part: prepare the unit (the driver writes it and renews the leases).
        Per message: (ok, result or error, start); ok None: not prepared."""
        gauges, clock = self.parts.gauges, self.parts.clock
        starts = [gauges.begin(message, clock()) for message in unit]
        try:
            outcomes = self._prepare_unit(unit)
        finally:
            gauges.add_busy(-len(unit))
        return [(ok, value, started) for (ok, value), started in zip(outcomes, starts)]

    def _prepare_unit(self, unit: Unit) -> Sequence[tuple[bool | None, Any]]:
        """(True, result), (False, error) or (None, None) per message of the unit."""
        work = self.parts.work
        if len(unit) == 1:
            try:
                return [(True, work.prepare(unit[0]))]
            except Exception as exc:
                return [(False, exc)]
        try:  # runs are claimed only of work with prepare_run (QueueConfig.run_size)
            return cast(RunWork, work).prepare_run(unit)
        except Exception as exc:  # a step of the whole run failed: whose fault is unknown
            self.parts.singles.run_failed(unit, exc)
            return [(None, None)] * len(unit)

    def _prepared(self, future: Future[Prepared]) -> None:
        """Done callback: a prepared unit's messages join the ones waiting to be written;
        those a run did not prepare go back to the queue."""
        error: BaseException | None = None
        unprepared: list[QueueMessage] = []
        with self._lock:
            unit = self._unfinished.pop(future, None)  # None: of a run stopped since
            if unit is not None and not future.cancelled():  # cancelled: stop released it
                error = future.exception()
                if error is None:
                    self._units += 1
                    for message, (ok, value, started) in zip(unit, future.result()):
                        if ok is None:
                            unprepared.append(message)
                            continue
                        if not self._ready:
                            self._ready_since = time.monotonic()
                        self._ready.append((message, ok, value, started, self._units))
        if error is not None and unit is not None:
            for message in unit:
                self._lost(message, error)
            self.claimable()  # its group's next episode may be claimed
        for message in unprepared:
            self._release(message)
        self.wake.set()  # room for another claim, maybe a write

    # --- writing ------------------------------------------------------------------------
    def _linger_left(self) -> float:
        """How long prepared messages may still wait for others to share their commit (the
        poll interval when none is waiting)."""
        with self._lock:
            return self._linger_left_locked() if self._ready else self.config.poll_seconds

    def _linger_left_locked(self) -> float:
        return max(0.0, self._ready_since + COMMIT_LINGER_SECONDS - time.monotonic())

    def _write_ready(self, force: bool = False) -> None:
        """Write the prepared messages in one transaction when there are ``batch_size`` of
        them, nothing else is being prepared, or the oldest has waited
        ``COMMIT_LINGER_SECONDS`` (``force``: now)."""
        with self._lock:
            if not self._ready:
                return
            full = len(self._ready) >= self.config.batch_size or not self._unfinished
            if not (force or full or self._linger_left_locked() == 0):
                return
            ready, self._ready = self._ready, []
        outcomes: list[Outcome] = [(m, v, t) for m, ok, v, t, _ in ready if not ok]
        outcomes += self._commit_units([(m, v, t, u) for m, ok, v, t, u in ready if ok])
        for message, error, started in outcomes:
            if error is None:
                self.parts.outcomes.completed(message, started)
            elif isinstance(error, BaseException):
                self._record_failure(message, error, started)
        self.claimable()  # their groups' next messages become heads
        self.parts.gauges.maybe_refresh()

    def _commit_units(self, written: list[tuple[QueueMessage, Any, float, int]]) -> list[Outcome]:
        """Write prepared messages, each unit (a run) in one transaction with its messages in
        order; per message its error (None: written; RELEASED: back to the queue) and start."""
        units: dict[int, list[tuple[QueueMessage, Any, float]]] = {}
        for message, value, started, unit in written:
            units.setdefault(unit, []).append((message, value, started))
        groups = list(units.values())
        tickets = self.parts.commits.submit_many([[(m, v) for m, v, _ in g] for g in groups])
        out: list[Outcome] = []
        for ticket, group in zip(tickets, groups):
            error = ticket.error
            if isinstance(error, PrepareAgain) and self.parts.outcomes.stale.again(
                m["episode_uuid"] for m, _, _ in group
            ):
                log.info("%d episodes are prepared again: %s", len(group), error)
            elif isinstance(error, Exception) and len(group) > 1:
                # a run's write failed: back to the queue, the group one at a time for a while
                self.parts.singles.run_failed([m for m, _, _ in group], error)
            else:
                out += [(message, error, started) for message, _, started in group]
                continue
            for message, _, started in group:
                self._release(message)
                out.append((message, RELEASED, started))
        return out

    # --- setbacks -----------------------------------------------------------------------
    def _record_failure(self, message: QueueMessage, error: BaseException, started: float) -> None:
        if isinstance(error, StoreUnavailable) or not self.store.available:
            self._held.add(message)  # the outage's failure, not the episode's: none spent
            return
        try:
            self.parts.outcomes.failed(message, error, time.perf_counter() - started)
        except Exception:  # its lease runs out and it returns; the others are unaffected
            log.exception(
                "episode %s: recording its failure (%s) failed; it returns to the "
                "queue when its lease runs out",
                message["episode_uuid"],
                error,
            )

    def _lost(self, message: QueueMessage, error: BaseException) -> None:
        """A worker raised past its own handling: an interrupt returns the message to the
        queue; anything else counts as a failed attempt (a release would hand it out again at
        once, forever). When even that fails, the message's lease runs out and it returns."""
        uuid = message["episode_uuid"]
        if isinstance(error, StoreUnavailable) or not self.store.available:
            self._held.add(message)
            return
        try:
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                log.error(
                    "preparing episode %s was interrupted (%r): returned to the queue", uuid, error
                )
                q.release(self.store, uuid, self.owner)
            else:
                self.parts.outcomes.failed(message, error, 0.0)
        except Exception:
            log.exception(
                "episode %s: recording what happened to it failed; it returns to "
                "the queue when its lease runs out",
                uuid,
            )

    def _release(self, message: QueueMessage) -> None:
        """Back to the queue unspent (a run stopped before it, a stale preparation); held
        while the store is away."""
        if not self.store.available:
            self._held.add(message)
            return
        try:
            q.release(self.store, message["episode_uuid"], self.owner)
        except Exception:  # its lease runs out and it returns
            log.exception("returning episode %s to the queue failed", message["episode_uuid"])

    def _release_held(self) -> None:
        released = self._held.release(lambda uuid: q.release(self.store, uuid, self.owner))
        if released:
            log.info("%d episodes held during a database outage returned to the queue", released)

    def _return_unstarted(self) -> None:
        """Stopping: claimed messages no worker has started go back to the queue."""
        with self._lock:
            unfinished = list(self._unfinished.items())
        for future, unit in unfinished:
            if future.cancel():
                for message in unit:
                    q.release(self.store, message["episode_uuid"], self.owner)
