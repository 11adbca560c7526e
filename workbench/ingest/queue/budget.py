"""The daily LLM budget of a group (``SVC_KNOWLEDGE_GROUP_DAILY_BUDGET_USD``).

Before the queue claims, :meth:`DailyBudget.hold` sums each group's LLM cost of the current
UTC day (the ``llm_calls`` of its episodes); a group at the limit has its queued episodes made
due at the next UTC midnight, their ``status_detail`` saying "daily budget". Other groups go
on; the next day the held episodes are claimed as usual. An episode already being extracted
finishes, so a group may pass its limit by one episode's calls.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store import tenancy as t

log = logging.getLogger("workbench.budget")


class DailyBudget:
    """Holds back the groups whose LLM cost today reached ``limit_usd``; looks again at most
    every ``every`` seconds (a sum over today's calls per claim would cost more than it saves)."""

    def __init__(self, store: Store, limit_usd: float, metrics: Metrics, every: float = 5.0):
        self.store = store
        self.limit = limit_usd
        self.metrics = metrics
        self.every = every
        self._checked: datetime | None = None
        self.held: list[str] = []

    def hold(self, now: datetime) -> list[str]:
        """The groups at their budget now (their queued episodes wait until tomorrow). The
        costs are summed at most every ``every`` seconds; the groups held are held again on
        every call (an episode added since waits too)."""
        today = t.day_start(now)
        if self._checked is None or (now - self._checked).total_seconds() >= self.every:
            self._checked = now
            costs = t.group_costs_since(self.store, today)
            self.held = sorted(g for g, cost in costs.items() if cost >= self.limit)
            self.metrics.groups_at_budget.set(len(self.held))
        tomorrow = today + timedelta(days=1)
        detail = (
            f"waiting: the group's daily budget of {self.limit:g} USD is spent; "
            f"resumes at {tomorrow.isoformat()}"
        )
        for group in self.held:
            if t.hold_group(self.store, group, tomorrow, detail):
                log.warning("group %s reached its daily budget: its episodes wait", group)
        return self.held
