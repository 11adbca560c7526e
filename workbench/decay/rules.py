"""Decay score and lifecycle rules as pure functions (``docs/decay.md``, "The decay formula" and
"Lifecycle rules"). The maintenance SQL in ``workbench/store/maintenance.py`` implements the
very same rules set-based; ``tests/decay`` checks that both agree on a grid of cases.

Decay — 0.0 = fresh, 1.0 = fully decayed::

    decay     = 1 - 0.5 ** (days_since_last_access / half_life)
    half_life = half_life_days * (stability / 3) * (importance / 3)

Days count from ``last_accessed_at``, else ``created_at`` (never negative). PERMANENT memories
score 0. Importance and stability are clamped to 1..5.

Lifecycle (one maintenance run brings a memory to the state its age implies, counting each
step it passes through):

==============  ============  ==========================================================
from            to            when
==============  ============  ==========================================================
non-deleted     PERMANENT     importance >= 4 and stability >= 4 (one step, checked first)
ACTIVE          DORMANT       >= 30 days without access
DORMANT         ARCHIVED      >= 90 days without access
ARCHIVED        EXPIRED       decay >= 0.9 and importance <= 3
EXPIRED         SOFT_DELETED  the next maintenance run (a memory that *becomes* EXPIRED in
                              a run is soft-deleted by the following run, never the same one)
SOFT_DELETED    (purged)      >= 90 days after ``soft_deleted_at``
DORMANT,        ACTIVE        accessed by a search (a reactivation, not maintenance)
ARCHIVED
==============  ============  ==========================================================

Decisions beyond the rules above:

* "non-deleted" means every state but SOFT_DELETED (an EXPIRED memory raised to
  importance/stability >= 4 is rescued as PERMANENT).
* PERMANENT is final for maintenance: there is no rule leaving it, so lowering a permanent
  memory's importance later does not make it decay again.
* Maintenance never moves a memory backwards (only a search reactivates).
* A SOFT_DELETED memory without ``soft_deleted_at`` starts its recovery period now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.config import Settings

ACTIVE = "ACTIVE"
DORMANT = "DORMANT"
ARCHIVED = "ARCHIVED"
EXPIRED = "EXPIRED"
SOFT_DELETED = "SOFT_DELETED"
PERMANENT = "PERMANENT"
PURGED = "PURGED"  # not a state: the to_state of a decay_history row for a purged memory

STATES = (ACTIVE, DORMANT, ARCHIVED, EXPIRED, SOFT_DELETED, PERMANENT)
# The ageing chain; maintenance only moves a memory forward along it.
CHAIN = (ACTIVE, DORMANT, ARCHIVED, EXPIRED, SOFT_DELETED)
REACTIVATABLE = (DORMANT, ARCHIVED)

Step = tuple[str, str]


@dataclass(frozen=True)
class DecayPolicy:
    """Every number of the decay and lifecycle rules (all are settings)."""

    enabled: bool = True
    half_life_days: float = 180.0
    dormant_days: float = 30.0
    archived_days: float = 90.0
    expire_threshold: float = 0.9
    expire_max_importance: int = 3
    purge_days: float = 90.0
    permanent_min_importance: int = 4
    permanent_min_stability: int = 4

    def __post_init__(self) -> None:
        if self.half_life_days <= 0:
            raise ValueError("half_life_days must be > 0")
        if not 0.0 <= self.expire_threshold <= 1.0:
            raise ValueError("expire_threshold must lie in 0..1")
        if min(self.dormant_days, self.archived_days, self.purge_days) < 0:
            raise ValueError("dormant_days, archived_days and purge_days must be >= 0")

    @classmethod
    def from_settings(cls, settings: Settings) -> DecayPolicy:
        """Build from :class:`workbench.config.Settings` (its ``decay_*`` fields)."""
        return cls(
            enabled=settings.decay_enabled,
            half_life_days=settings.decay_half_life_days,
            dormant_days=settings.decay_dormant_days,
            archived_days=settings.decay_archived_days,
            expire_threshold=settings.decay_expire_threshold,
            expire_max_importance=settings.decay_expire_max_importance,
            purge_days=settings.decay_purge_days,
            permanent_min_importance=settings.decay_permanent_min_importance,
            permanent_min_stability=settings.decay_permanent_min_stability,
        )


DEFAULT_POLICY = DecayPolicy()


def clamp_level(value: int | float | None) -> int:
    """Importance/stability as an integer 1..5 (None -> the default 3)."""
    if value is None:
        return 3
    return int(min(5, max(1, round(value))))


def half_life_days(importance: int, stability: int, policy: DecayPolicy = DEFAULT_POLICY) -> float:
    """``half_life_days × (stability / 3) × (importance / 3)``."""
    return policy.half_life_days * (clamp_level(stability) / 3) * (clamp_level(importance) / 3)


def decay_score(
    days_since_access: float,
    importance: int,
    stability: int,
    policy: DecayPolicy = DEFAULT_POLICY,
) -> float:
    """``1 − 0.5 ** (days / half_life)`` in 0..1; negative ages count as 0 days."""
    days = max(0.0, float(days_since_access))
    kept: float = 0.5 ** (days / half_life_days(importance, stability, policy))
    return 1.0 - kept


def is_permanent(importance: int, stability: int, policy: DecayPolicy = DEFAULT_POLICY) -> bool:
    return (
        clamp_level(importance) >= policy.permanent_min_importance
        and clamp_level(stability) >= policy.permanent_min_stability
    )


def can_expire(decay: float, importance: int, policy: DecayPolicy = DEFAULT_POLICY) -> bool:
    return (
        decay >= policy.expire_threshold and clamp_level(importance) <= policy.expire_max_importance
    )


@dataclass(frozen=True)
class LifecycleOutcome:
    """What one maintenance run does to one memory."""

    state: str
    steps: tuple[Step, ...]
    decay: float
    purge: bool = False


def _aged_state(state: str, days: float, decay: float, importance: int, policy: DecayPolicy) -> str:
    """The furthest state along CHAIN that the rules reach from ``state`` in one run."""
    if state == EXPIRED:
        return SOFT_DELETED
    if state == ACTIVE:
        if days < policy.dormant_days:
            return ACTIVE
        state = DORMANT
    if state == DORMANT:
        if days < policy.archived_days:
            return DORMANT
        state = ARCHIVED
    if state == ARCHIVED and can_expire(decay, importance, policy):
        return EXPIRED
    return state


def chain_steps(start: str, end: str) -> tuple[Step, ...]:
    """The consecutive (from, to) steps along CHAIN from ``start`` to ``end``."""
    if start == end:
        return ()
    if start not in CHAIN or end not in CHAIN or CHAIN.index(end) < CHAIN.index(start):
        return ((start, end),)
    i, j = CHAIN.index(start), CHAIN.index(end)
    return tuple((CHAIN[k], CHAIN[k + 1]) for k in range(i, j))


def plan_lifecycle(
    state: str,
    days_since_access: float,
    importance: int,
    stability: int,
    policy: DecayPolicy = DEFAULT_POLICY,
    days_since_soft_delete: float | None = None,
) -> LifecycleOutcome:
    """Apply the lifecycle rules of one maintenance run to one memory.

    Returns the final state, every step passed through, the new decay score (0 for
    PERMANENT) and whether the memory is purged (a SOFT_DELETED memory at least
    ``purge_days`` after ``soft_deleted_at``; ``None`` means "soft-deleted just now").
    """
    if state not in STATES:
        raise ValueError(f"unknown lifecycle state {state!r}; expected one of {STATES}")
    if state == PERMANENT:
        return LifecycleOutcome(PERMANENT, (), 0.0)
    if state == SOFT_DELETED:
        decay = decay_score(days_since_access, importance, stability, policy)
        return LifecycleOutcome(SOFT_DELETED, (), decay, purge_due(days_since_soft_delete, policy))
    if is_permanent(importance, stability, policy):
        return LifecycleOutcome(PERMANENT, ((state, PERMANENT),), 0.0)
    decay = decay_score(days_since_access, importance, stability, policy)
    final = _aged_state(state, max(0.0, days_since_access), decay, importance, policy)
    return LifecycleOutcome(final, chain_steps(state, final), decay)


def purge_due(days_since_soft_delete: float | None, policy: DecayPolicy = DEFAULT_POLICY) -> bool:
    """A soft-deleted memory is purged ``purge_days`` after ``soft_deleted_at``."""
    days = 0.0 if days_since_soft_delete is None else days_since_soft_delete
    return days >= policy.purge_days


def reactivated_state(state: str) -> str | None:
    """ACTIVE when a search access reactivates a DORMANT or ARCHIVED memory, else None."""
    return ACTIVE if state in REACTIVATABLE else None


__all__ = [
    "ACTIVE",
    "ARCHIVED",
    "CHAIN",
    "DEFAULT_POLICY",
    "DORMANT",
    "DecayPolicy",
    "EXPIRED",
    "LifecycleOutcome",
    "PERMANENT",
    "PURGED",
    "REACTIVATABLE",
    "SOFT_DELETED",
    "STATES",
    "Step",
    "can_expire",
    "chain_steps",
    "clamp_level",
    "decay_score",
    "half_life_days",
    "is_permanent",
    "plan_lifecycle",
    "purge_due",
    "reactivated_state",
]
