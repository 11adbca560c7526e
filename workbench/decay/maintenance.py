"""Decay maintenance: one run (:func:`run_maintenance`), the background
:class:`MaintenanceScheduler`, the ``/health/decay`` object (:func:`decay_health`) and
:func:`recover_soft_deleted`.

Decisions:

* **Never two runs at once.** A run holds a per-store lock; a second request while one is in
  progress (scheduled, ``run_now``, the CLI in the same process) fails at once with
  :class:`~workbench.errors.Conflict` — it does not queue behind the first. The scheduler skips
  its tick in that case. (Two processes cannot share the database file anyway.)
* **A failed run changes nothing** (one transaction), counts as ``status="failure"`` in
  ``knowledge_decay_maintenance_runs_total``, leaves a ``maintenance_runs`` row with
  ``status='failure'`` and the error, and re-raises (a non-workbench error is wrapped in
  :class:`~workbench.errors.StoreError`). The scheduler logs it and tries again next interval.
* **A dry run** writes nothing (no ``maintenance_runs`` row) and records no metrics; its report
  is what a real run at the same moment would do.
* ``decay_enabled=false`` stops the *schedule*; an explicit run (API, CLI) still works.
* **Health** (``/health/decay``): ``unhealthy`` when the last run failed; ``degraded`` when
  maintenance is overdue (no run within ``interval + 10 minutes`` of the last one, or of the
  scheduler's start when there has never been one) or the last run took over 10 minutes;
  else ``healthy``. Before the first run ever, and with no start time known, the status is
  ``healthy`` with ``last_maintenance: null`` (nothing is overdue yet). With decay disabled
  the status is ``healthy`` unless the last run failed, and ``next_scheduled`` is null.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, get_args, overload

from workbench.clock import Clock, as_utc, utcnow
from workbench.decay.classification import classify_pending
from workbench.decay.rules import SOFT_DELETED, DecayPolicy
from workbench.errors import Conflict, InvalidInput, NotFound, StoreError, WorkbenchError
from workbench.results import MaintenanceResult, RecoverResult, State
from workbench.store import Store
from workbench.store import maintenance as sql
from workbench.store.tenancy import prune_audit

if TYPE_CHECKING:
    from workbench.config import Settings
    from workbench.llm import ChatModel
    from workbench.metrics import Metrics

log = logging.getLogger(__name__)

MAX_RUN_SECONDS = 600.0  # the spec's target; longer runs make the health "degraded"

_locks_guard = threading.Lock()
_run_locks: weakref.WeakKeyDictionary[Store, threading.Lock] = weakref.WeakKeyDictionary()


@overload
def iso_utc(value: datetime) -> str: ...
@overload
def iso_utc(value: None) -> None: ...
@overload
def iso_utc(value: datetime | None) -> str | None: ...
def iso_utc(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a ``Z`` suffix (None stays None)."""
    if value is None:
        return None
    return as_utc(value).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class MaintenanceReport:
    """What one maintenance run did (or, for a dry run, would do)."""

    run_id: int | None
    status: str
    dry_run: bool
    started_at: datetime
    duration_seconds: float
    scores_updated: int = 0
    transitions: Mapping[tuple[str, str], int] = field(default_factory=dict)
    purged: int = 0
    purged_detail: Mapping[str, int] = field(default_factory=dict)
    by_state: Mapping[str, int] = field(default_factory=dict)
    total: int = 0
    decay_avg: float = 0.0
    importance_avg: float = 0.0
    stability_avg: float = 0.0
    error: str | None = None

    @property
    def transitions_total(self) -> int:
        return sum(self.transitions.values())

    def as_dict(self) -> MaintenanceResult:
        """JSON-able: transitions as a list of {from_state, to_state, count}."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "dry_run": self.dry_run,
            "started_at": iso_utc(self.started_at),
            "duration_seconds": round(self.duration_seconds, 6),
            "scores_updated": self.scores_updated,
            "transitions": [
                {"from_state": _state(a), "to_state": _state(b), "count": n}
                for (a, b), n in sorted(self.transitions.items())
            ],
            "transitions_total": self.transitions_total,
            "purged": self.purged,
            "purged_detail": dict(self.purged_detail),
            "memories_by_state": dict(self.by_state),
            "memories_total": self.total,
            "decay_score_avg": self.decay_avg,
            "importance_avg": self.importance_avg,
            "stability_avg": self.stability_avg,
            "error": self.error,
        }

    to_dict = as_dict


_STATES: dict[str, State] = {state: state for state in get_args(State)}


def _state(name: str) -> State:
    """A lifecycle state's name as the answers' ``State`` (an unknown name is a bug)."""
    return _STATES[name]


def _run_lock(store: Store) -> threading.Lock:
    with _locks_guard:
        lock = _run_locks.get(store)
        if lock is None:
            lock = _run_locks[store] = threading.Lock()
        return lock


def maintenance_running(store: Store) -> bool:
    return _run_lock(store).locked()


def run_maintenance(
    store: Store,
    policy: DecayPolicy,
    metrics: Metrics | None,
    clock: Clock = utcnow,
    dry_run: bool = False,
) -> MaintenanceReport:
    """One maintenance run (see the module docstring for failure and dry-run behaviour).

    Raises :class:`Conflict` when a run on this store is already in progress.
    """
    lock = _run_lock(store)
    if not lock.acquire(blocking=False):
        raise Conflict(
            "a decay maintenance run is already in progress; wait for it to finish and try again"
        )
    try:
        parallel = getattr(store, "parallel", None)
        if parallel is None:
            return _run_locked(store, policy, metrics, clock, dry_run)
        with parallel():  # set-based SQL over every memory: use all cores
            return _run_locked(store, policy, metrics, clock, dry_run)
    finally:
        lock.release()


def _run_locked(
    store: Store, policy: DecayPolicy, metrics: Metrics | None, clock: Clock, dry_run: bool
) -> MaintenanceReport:
    started_at = as_utc(clock())
    t0 = time.perf_counter()
    try:
        result = sql.apply_maintenance(store, policy, started_at, dry_run=dry_run)
    except Exception as exc:  # noqa: BLE001 - recorded, counted, re-raised
        _record_failure(store, metrics, started_at, time.perf_counter() - t0, exc, dry_run)
        if isinstance(exc, WorkbenchError):
            raise
        raise StoreError(f"decay maintenance failed and changed nothing: {exc}") from exc
    report = MaintenanceReport(
        run_id=result["run_id"],
        status="success",
        dry_run=dry_run,
        started_at=started_at,
        duration_seconds=result["duration"],
        scores_updated=result["scores_updated"],
        transitions=result["transitions"],
        purged=result["purged"],
        purged_detail=result["purged_detail"],
        by_state=result["by_state"],
        total=result["total"],
        decay_avg=result["decay_avg"],
        importance_avg=result["importance_avg"],
        stability_avg=result["stability_avg"],
    )
    if not dry_run:
        _record_success(metrics, report)
    log.info(
        "decay maintenance %s: %s",
        "dry run" if dry_run else f"run {report.run_id}",
        _summary(report),
    )
    return report


def _summary(report: MaintenanceReport) -> str:
    return (
        f"{report.scores_updated} scores, {report.transitions_total} transitions, "
        f"{report.purged} purged in {report.duration_seconds:.2f}s"
    )


def _record_success(metrics: Metrics | None, report: MaintenanceReport) -> None:
    if metrics is None:
        return
    metrics.record_maintenance_run(
        "success",
        report.duration_seconds,
        scores_updated=report.scores_updated,
        transitions=report.transitions,
        purged=report.purged,
    )
    metrics.set_memory_gauges(
        report.by_state, report.total, report.decay_avg, report.importance_avg, report.stability_avg
    )


def _record_failure(
    store: Store,
    metrics: Metrics | None,
    started_at: datetime,
    duration: float,
    exc: BaseException,
    dry_run: bool,
) -> None:
    log.error("decay maintenance failed (nothing changed): %s", exc)
    if dry_run:
        return
    if metrics is not None:
        metrics.record_maintenance_run("failure", duration)
    try:
        sql.record_failed_run(store, started_at, duration, f"{type(exc).__name__}: {exc}")
    except Exception as inner:  # noqa: BLE001 - the store itself may be what failed
        log.error("could not record the failed maintenance run: %s", inner)


def refresh_gauges(store: Store, metrics: Metrics | None) -> dict[str, Any]:
    """Set the memory gauges from the current tables (e.g. at start-up); returns the stats."""
    stats = sql.memory_stats(store)
    if metrics is not None:
        metrics.set_memory_gauges(
            stats["by_state"],
            stats["total"],
            stats["decay_avg"],
            stats["importance_avg"],
            stats["stability_avg"],
        )
    return stats


# --- health -----------------------------------------------------------------------------
def _status(
    last: dict[str, Any] | None,
    now: datetime,
    enabled: bool,
    interval: timedelta,
    started_at: datetime | None,
) -> tuple[str, str]:
    grace = timedelta(seconds=MAX_RUN_SECONDS)
    if last is not None and last["status"] != "success":
        return "unhealthy", f"the last maintenance run failed: {last.get('error') or 'unknown'}"
    if not enabled:
        return "healthy", "scheduled decay maintenance is disabled"
    if last is None:
        if started_at is not None and now > started_at + interval + grace:
            return "degraded", "no maintenance run since the scheduler started (overdue)"
        return "healthy", "no maintenance run yet"
    if now > last["started_at"] + interval + grace:
        return "degraded", "maintenance is overdue"
    if (last.get("duration_seconds") or 0.0) > MAX_RUN_SECONDS:
        return "degraded", "the last maintenance run took over 10 minutes"
    return "healthy", "the last maintenance run succeeded on schedule"


def decay_health(
    store: Store,
    policy: DecayPolicy,
    clock: Clock,
    interval_hours: float,
    metrics_path: str = "/metrics",
    enabled: bool = True,
    *,
    started_at: datetime | None = None,
    next_scheduled: datetime | None = None,
    scheduler: MaintenanceScheduler | None = None,
) -> dict[str, Any]:
    """The ``GET /health/decay`` object: the spec's four fields plus operator detail.

    ``started_at`` is when the scheduler started (lets a never-run system become
    ``degraded`` once overdue); ``next_scheduled`` is the scheduler's next tick (else
    computed as the last run's start + interval). A ``scheduler`` supplies both.
    """
    if scheduler is not None:
        started_at = started_at or scheduler.started_at
        next_scheduled = next_scheduled or scheduler.next_scheduled
    now = as_utc(clock())
    interval = timedelta(hours=interval_hours)
    last = sql.last_run(store)
    last_ok = sql.last_run(store, status="success")
    status, reason = _status(
        last, now, enabled, interval, as_utc(started_at) if started_at else None
    )
    if next_scheduled is None and enabled and last is not None:
        next_scheduled = last["started_at"] + interval
    stats = sql.memory_stats(store)
    return {
        "status": status,
        "decay_enabled": bool(enabled),
        "last_maintenance": iso_utc(last["finished_at"] or last["started_at"]) if last else None,
        "metrics_endpoint": metrics_path,
        "reason": reason,
        "next_scheduled": iso_utc(next_scheduled) if enabled else None,
        "interval_hours": interval_hours,
        "last_success": iso_utc(last_ok["finished_at"]) if last_ok else None,
        "last_run": _run_json(last),
        "memories_by_state": stats["by_state"],
        "memories_total": stats["total"],
        "awaiting_purge": stats["by_state"].get(SOFT_DELETED, 0),
        "decay_score_avg": stats["decay_avg"],
        "policy": {
            "half_life_days": policy.half_life_days,
            "dormant_days": policy.dormant_days,
            "archived_days": policy.archived_days,
            "purge_days": policy.purge_days,
        },
    }


def _run_json(run: dict[str, Any] | None) -> dict[str, Any] | None:
    if run is None:
        return None
    return {
        "id": run["id"],
        "status": run["status"],
        "started_at": iso_utc(run["started_at"]),
        "finished_at": iso_utc(run["finished_at"]),
        "duration_seconds": run["duration_seconds"],
        "scores_updated": run["scores_updated"],
        "transitions": run["transitions"],
        "purged": run["purged"],
        "error": run["error"],
    }


# --- recovery -----------------------------------------------------------------------------
def recover_soft_deleted(store: Store, uuid: str, clock: Clock = utcnow) -> RecoverResult:
    """Bring a soft-deleted entity or fact back (SOFT_DELETED → ARCHIVED) before its purge.

    The recovery clears ``soft_deleted_at`` and restarts the decay clock, so the next
    maintenance run does not expire it again at once.
    """
    if not isinstance(uuid, str) or not uuid.strip():
        raise InvalidInput("uuid must be a non-empty string naming an entity or a fact")
    now = as_utc(clock())
    with store.transaction():
        found = sql.find_memory(store, uuid)
        if found is None:
            raise NotFound(
                f"no entity or fact with uuid {uuid!r} (it may have been purged already)"
            )
        kind, state = found
        if state != SOFT_DELETED:
            raise InvalidInput(
                f"{kind} {uuid} is {state}, not SOFT_DELETED: only soft-deleted "
                "memories can be recovered"
            )
        sql.recover_memory(store, kind, uuid, now)
    return {
        "uuid": uuid,
        "kind": "entity" if kind == "entity" else "fact",
        "from_state": "SOFT_DELETED",
        "to_state": "ARCHIVED",
        "recovered_at": iso_utc(now),
    }


# --- the schedule -------------------------------------------------------------------------
class SearchIndex(Protocol):
    """What a run tells the search engine (:class:`workbench.index.publish.Publisher`): the
    run writes under its gate (``with index:``)."""

    def __enter__(self) -> object: ...

    def __exit__(self, *exc: object) -> bool | None: ...

    def before_maintenance(self) -> None:
        """Write queued search accesses, so ``last_accessed_at`` is current."""

    def states_changed(self) -> None:
        """Re-read states, decay scores and purges after a real run."""


def _tell(index: SearchIndex | None, step: str) -> None:
    if index is None:
        return
    try:
        getattr(index, step)()
    except Exception:  # noqa: BLE001 - telling the search engine must not stop maintenance
        log.exception("maintenance: telling the search engine (%s) failed", step)


class MaintenanceScheduler:
    """Runs maintenance in a background thread: first ``first_run_seconds`` after
    :meth:`start`, then every ``interval_hours`` (real time; timestamps come from ``clock``).

    ``run_now`` runs in the caller's thread; a run already in progress makes it raise
    :class:`Conflict` and makes a scheduled tick skip (logged). With a ``chat`` model, each
    scheduled tick first classifies up to ``classify_limit`` memories that have no
    classification (:func:`workbench.decay.classification.classify_pending`), so the run applies
    the PERMANENT rule to them. With a search ``index``, every run first has it write queued
    accesses, runs under its gate, and a real run that succeeded has it re-read states and drop
    purged memories; errors of telling it are logged, never raised.
    """

    def __init__(
        self,
        store: Store,
        policy: DecayPolicy,
        metrics: Metrics | None,
        clock: Clock = utcnow,
        *,
        interval_hours: float = 24.0,
        first_run_seconds: float = 60.0,
        enabled: bool | None = None,
        chat: ChatModel | None = None,
        classify_limit: int = 500,
        index: SearchIndex | None = None,
        audit_retention_days: float | None = None,
    ) -> None:
        if interval_hours <= 0 or first_run_seconds < 0:
            raise InvalidInput("interval_hours must be > 0 and first_run_seconds >= 0")
        self.store, self.policy, self.metrics, self.clock = store, policy, metrics, clock
        self.interval_hours = interval_hours
        self.first_run_seconds = first_run_seconds
        self.enabled = policy.enabled if enabled is None else enabled
        self.chat = chat
        self.classify_limit = classify_limit
        self.index = index
        self.audit_retention_days = audit_retention_days  # a real run prunes older audit rows
        self.started_at: datetime | None = None
        self.next_scheduled: datetime | None = None
        self.last_report: MaintenanceReport | None = None
        self.last_error: BaseException | None = None
        self._runs = 0
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_settings(
        cls,
        store: Store,
        settings: Settings,
        metrics: Metrics | None,
        clock: Clock = utcnow,
        chat: ChatModel | None = None,
        index: SearchIndex | None = None,
    ) -> MaintenanceScheduler:
        return cls(
            store,
            DecayPolicy.from_settings(settings),
            metrics,
            clock,
            interval_hours=settings.maintenance_interval_hours,
            first_run_seconds=settings.maintenance_first_run_seconds,
            enabled=settings.decay_enabled,
            chat=chat,
            index=index,
            audit_retention_days=settings.audit_retention_days,
        )

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the schedule (a no-op when decay is disabled or already started).

        The memory gauges are set from the tables at once, so ``/metrics`` shows the counts
        by state (and the SoftDeleteBacklog alert keeps working) before the first run.
        """
        self.started_at = as_utc(self.clock())
        try:
            refresh_gauges(self.store, self.metrics)
        except Exception:  # noqa: BLE001 - gauges are informative; never block start-up
            log.exception("could not read the memory counts for the gauges")
        if not self.enabled:
            log.info("decay maintenance schedule disabled (SVC_KNOWLEDGE_DECAY_ENABLED=false)")
            return
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="decay-maintenance", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the schedule; waits up to ``timeout`` s for a run in progress to end."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
        self.next_scheduled = None

    def run_now(self, dry_run: bool = False, classify: bool = False) -> MaintenanceReport:
        """One run in the caller's thread (``classify``: classify pending memories first)."""
        if classify and not dry_run:
            self.classify_pending()
        return self._run(dry_run)

    def classify_pending(self) -> dict[str, int] | None:
        """Classify memories without a classification (None without an LLM or on error)."""
        if self.chat is None:
            return None
        try:
            return classify_pending(self.store, self.chat, self.metrics, self.classify_limit)
        except Exception:  # noqa: BLE001 - classification must not stop maintenance
            log.exception("classifying pending memories failed; maintenance runs anyway")
            return None

    def wait_for_runs(self, count: int, timeout: float) -> bool:
        """Block until ``count`` runs (scheduled or not, dry runs excluded) have finished."""
        with self._cond:
            return self._cond.wait_for(lambda: self._runs >= count, timeout)

    def health(self, metrics_path: str = "/metrics") -> dict[str, Any]:
        return decay_health(
            self.store,
            self.policy,
            self.clock,
            self.interval_hours,
            metrics_path,
            self.enabled,
            started_at=self.started_at,
            next_scheduled=self.next_scheduled,
        )

    def _run(self, dry_run: bool) -> MaintenanceReport:
        if maintenance_running(self.store):
            raise Conflict(
                "a decay maintenance run is already in progress; wait for it to "
                "finish and try again"
            )
        _tell(self.index, "before_maintenance")
        with self.index if self.index is not None else nullcontext():
            try:
                report = run_maintenance(self.store, self.policy, self.metrics, self.clock, dry_run)
            except Conflict:
                raise
            except BaseException as exc:
                if not dry_run:
                    self._finished(None, exc)
                raise
            if not dry_run:
                _tell(self.index, "states_changed")
        if not dry_run:
            self._prune_audit()
            self._finished(report, None)
        return report

    def _prune_audit(self) -> None:
        if self.audit_retention_days is None:
            return
        before = as_utc(self.clock()) - timedelta(days=self.audit_retention_days)
        pruned = prune_audit(self.store, before)
        if pruned:
            log.info(
                "pruned %d audit_log rows older than %g days", pruned, self.audit_retention_days
            )

    def _finished(self, report: MaintenanceReport | None, error: BaseException | None) -> None:
        with self._cond:
            self.last_report = report or self.last_report
            self.last_error = error
            self._runs += 1
            self._cond.notify_all()

    def _loop(self) -> None:
        delay = self.first_run_seconds
        while True:
            self.next_scheduled = as_utc(self.clock()) + timedelta(seconds=delay)
            if self._stop.wait(delay):
                return
            delay = self.interval_hours * 3600.0
            wait = self._ran_elsewhere()
            if wait is not None:
                delay = wait
                continue
            try:
                self.classify_pending()
                self._run(dry_run=False)
            except Conflict:
                log.info("scheduled decay maintenance skipped: another run is in progress")
            except Exception:  # noqa: BLE001 - logged; the next interval tries again
                log.exception("scheduled decay maintenance failed")

    def _ran_elsewhere(self) -> float | None:
        """On a store shared by several processes, each schedules maintenance and the first
        due runs it: seconds until the next run is due when another process ran one within
        the interval (skip this one), else None."""
        if not self.store.shared:
            return None
        last = sql.last_run(self.store, "success")
        if last is None:
            return None
        due: datetime = last["started_at"] + timedelta(hours=self.interval_hours)
        left = (due - as_utc(self.clock())).total_seconds()
        if left > 0.05 * self.interval_hours * 3600.0:
            log.info(
                "decay maintenance ran in another process at %s: next due at %s",
                iso_utc(last["started_at"]),
                iso_utc(due),
            )
            return left
        return None


__all__ = [
    "MAX_RUN_SECONDS",
    "MaintenanceReport",
    "MaintenanceScheduler",
    "decay_health",
    "iso_utc",
    "maintenance_running",
    "recover_soft_deleted",
    "refresh_gauges",
    "run_maintenance",
]
