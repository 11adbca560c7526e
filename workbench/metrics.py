"""The complete Prometheus catalog of the interface spec, on ``prometheus_client``.

Names are fixed by the spec (``graph_*``, ``knowledge_*``, ``messaging_*``); no unit suffixes
are added. Each :class:`Metrics` owns its own ``CollectorRegistry`` so that tests and several
workbenches in one process do not share counters; counters reset when the process restarts.

Behaviour rules (spec, "Metric behavior rules"):

* LLM counter and histogram series appear only after the first LLM call; error series only
  after the first error (labelled families have no series before; the all-models twins are
  registered lazily on first use).
* Cache metrics are populated only when caching is enabled.
* Every operation is a no-op when metrics are disabled
  (``SVC_KNOWLEDGE_PROMPT_CACHE_METRICS_ENABLED=false``).
* Operations are thread-safe (``prometheus_client`` metrics are, and the lazy registration
  and the session cache counters here hold a lock).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
MAX_LABEL_CHARS = 128
_UNSAFE_LABEL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def label_value(value: object) -> str:
    """A label value from outside (a group name, a model name) as it is kept and exposed:
    control characters (a newline...) become ``_``, at most ``MAX_LABEL_CHARS`` characters.
    A scraper then never sees a value that ends a line, nor a series per long name."""
    return _UNSAFE_LABEL.sub("_", str(value))[:MAX_LABEL_CHARS]


TOKEN_BUCKETS = (
    10,
    25,
    50,
    100,
    250,
    500,
    1000,
    2000,
    3000,
    5000,
    10000,
    25000,
    50000,
    100000,
    200000,
)
COST_BUCKETS = (
    0.000005,
    0.00001,
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
)
LLM_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0)
MAINTENANCE_BUCKETS = (1, 5, 30, 60, 120, 300, 600)
CLASSIFICATION_BUCKETS = (0.1, 0.5, 1, 2, 5)
ACCESS_AGE_BUCKETS = (1, 7, 30, 90, 180, 365, 730, 1095)
QUEUE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10)
SEARCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

OTHER_GROUPS = "_other"
IMPORTANCE_LEVELS = {1: "LOW", 2: "LOW", 3: "MEDIUM", 4: "HIGH", 5: "CRITICAL"}


def importance_level(importance: int) -> str:
    """Spec labels: 1-2 LOW, 3 MEDIUM, 4 HIGH, 5 CRITICAL."""
    return IMPORTANCE_LEVELS.get(int(importance), "MEDIUM")


class Metrics:
    """All metric families and the small recording API the core uses."""

    def __init__(
        self,
        enabled: bool = True,
        cache_enabled: bool = False,
        registry: CollectorRegistry | None = None,
        max_group_labels: int = 100,
    ):
        self.enabled = enabled
        # group ids become label values: bounded, so that many groups cannot blow up the
        # series count (and group names show only up to this many); the rest count as "_other"
        self.max_group_labels = max_group_labels
        self._group_labels: set[str] = set()
        self.cache_enabled = cache_enabled
        if registry is None:  # its own registry, with the process and Python collectors
            registry = CollectorRegistry(auto_describe=True)
            for collector in (ProcessCollector, PlatformCollector, GCCollector) if enabled else ():
                collector(registry=registry)
        self.registry = registry
        self._lock = threading.Lock()
        self._lazy: dict[str, Counter] = {}
        self._cache_hits = 0
        self._cache_requests = 0
        # Disabled: the families exist (so recording code needs no checks) but are not
        # registered, so the exposition is empty - not even the unlabelled gauges.
        r = self.registry if enabled else None

        # --- graph_: tokens, cost, latency (labelled: no series before the first call) ---
        self.prompt_tokens = Counter("graph_prompt_tokens", "Prompt tokens", ["model"], registry=r)
        self.completion_tokens = Counter(
            "graph_completion_tokens", "Completion tokens", ["model"], registry=r
        )
        self.total_tokens = Counter("graph_total_tokens", "Total tokens", ["model"], registry=r)
        self.api_cost = Counter("graph_api_cost", "Cost in USD", ["model"], registry=r)
        self.api_input_cost = Counter(
            "graph_api_input_cost", "Input cost in USD", ["model"], registry=r
        )
        self.api_output_cost = Counter(
            "graph_api_output_cost", "Output cost in USD", ["model"], registry=r
        )
        self.prompt_tokens_per_request = Histogram(
            "graph_prompt_tokens_per_request",
            "Prompt tokens per request",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.completion_tokens_per_request = Histogram(
            "graph_completion_tokens_per_request",
            "Completion tokens per request",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.total_tokens_per_request = Histogram(
            "graph_total_tokens_per_request",
            "Total tokens per request",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.api_cost_per_request = Histogram(
            "graph_api_cost_per_request",
            "Cost per request in USD",
            ["model"],
            buckets=COST_BUCKETS,
            registry=r,
        )
        self.api_input_cost_per_request = Histogram(
            "graph_api_input_cost_per_request",
            "Input cost per request in USD",
            ["model"],
            buckets=COST_BUCKETS,
            registry=r,
        )
        self.api_output_cost_per_request = Histogram(
            "graph_api_output_cost_per_request",
            "Output cost per request in USD",
            ["model"],
            buckets=COST_BUCKETS,
            registry=r,
        )
        self.llm_request_duration = Histogram(
            "graph_llm_request_duration_seconds",
            "LLM request duration",
            ["model"],
            buckets=LLM_DURATION_BUCKETS,
            registry=r,
        )

        # --- graph_: cache ---
        self.cache_enabled_gauge = Gauge(
            "graph_cache_enabled", "1 when prompt caching is enabled", registry=r
        )
        self.cache_hit_rate = Gauge(
            "graph_cache_hit_rate", "Cache hit rate of this session, percent", registry=r
        )
        self.cache_hits = Counter("graph_cache_hits", "Cache hits", ["model"], registry=r)
        self.cache_misses = Counter("graph_cache_misses", "Cache misses", ["model"], registry=r)
        self.cache_tokens_saved = Counter(
            "graph_cache_tokens_saved", "Tokens read from cache", ["model"], registry=r
        )
        self.cache_cost_saved = Counter(
            "graph_cache_cost_saved", "USD saved by caching", ["model"], registry=r
        )
        self.cache_write_tokens = Counter(
            "graph_cache_write_tokens", "Tokens written to cache", ["model"], registry=r
        )
        self.cache_tokens_saved_per_request = Histogram(
            "graph_cache_tokens_saved_per_request",
            "Cached tokens per request",
            ["model"],
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.cache_cost_saved_per_request = Histogram(
            "graph_cache_cost_saved_per_request",
            "USD saved per request",
            ["model"],
            buckets=COST_BUCKETS,
            registry=r,
        )

        # --- graph_: errors and throughput ---
        self.llm_errors = Counter(
            "graph_llm_errors", "LLM errors", ["model", "error_type"], registry=r
        )
        self.episodes_processed = Counter(
            "graph_episodes_processed", "Episodes processed", ["group_id"], registry=r
        )

        # --- knowledge_: decay, lifecycle, classification ---
        self.maintenance_runs = Counter(
            "knowledge_decay_maintenance_runs", "Maintenance runs", ["status"], registry=r
        )
        self.decay_scores_updated = Counter(
            "knowledge_decay_scores_updated", "Decay scores recalculated", registry=r
        )
        self.maintenance_duration = Histogram(
            "knowledge_maintenance_duration_seconds",
            "Maintenance run duration",
            buckets=MAINTENANCE_BUCKETS,
            registry=r,
        )
        self.memories_purged = Counter(
            "knowledge_memories_purged", "Soft-deleted memories purged", registry=r
        )
        self.lifecycle_transitions = Counter(
            "knowledge_lifecycle_transitions",
            "Lifecycle transitions",
            ["from_state", "to_state"],
            registry=r,
        )
        self.memories_by_state = Gauge(
            "knowledge_memories_by_state", "Memories per lifecycle state", ["state"], registry=r
        )
        self.memories_total = Gauge(
            "knowledge_memories_total", "Memories, soft-deleted excluded", registry=r
        )
        self.passages_without_vector = Gauge(
            "knowledge_passages_without_vector",
            "Passages this process has yet to embed (found by their words meanwhile)",
            registry=r,
        )
        self.classification_requests = Counter(
            "knowledge_classification_requests", "Classification attempts", ["status"], registry=r
        )
        self.classification_latency = Histogram(
            "knowledge_classification_latency_seconds",
            "Classification latency",
            buckets=CLASSIFICATION_BUCKETS,
            registry=r,
        )
        self.decay_score_avg = Gauge("knowledge_decay_score_avg", "Average decay score", registry=r)
        self.importance_avg = Gauge("knowledge_importance_avg", "Average importance", registry=r)
        self.stability_avg = Gauge("knowledge_stability_avg", "Average stability", registry=r)
        self.weighted_searches = Counter(
            "knowledge_weighted_searches", "Weighted searches", registry=r
        )
        self.search_saves_rejected = Counter(
            "knowledge_search_saves_rejected",
            "Saved search indexes not used because a file failed its checksum (rebuilt)",
            ["kind", "part"],
            registry=r,
        )
        self.search_latency = Histogram(
            "knowledge_search_weighted_latency_seconds",
            "Weighted search latency",
            buckets=SEARCH_BUCKETS,
            registry=r,
        )

        # --- knowledge_: access patterns ---
        self.access_by_importance = Counter(
            "knowledge_access_by_importance", "Accesses by importance level", ["level"], registry=r
        )
        self.access_by_state = Counter(
            "knowledge_access_by_state", "Accesses by lifecycle state", ["state"], registry=r
        )
        self.days_since_last_access = Histogram(
            "knowledge_days_since_last_access",
            "Days since the previous access",
            buckets=ACCESS_AGE_BUCKETS,
            registry=r,
        )
        self.reactivations = Counter(
            "knowledge_reactivations", "Reactivations to ACTIVE", ["from_state"], registry=r
        )
        self.memory_access = Counter(
            "knowledge_memory_access", "Cumulative memory accesses", registry=r
        )

        # --- messaging_: queue ---
        self.messages_processed = Counter(
            "messaging_messages_processed",
            "Messages processed",
            ["queue_name", "status"],
            registry=r,
        )
        self.messages_failed = Counter(
            "messaging_messages_failed", "Failed messages", ["queue_name", "error_type"], registry=r
        )
        self.retries = Counter("messaging_retries", "Retries", ["queue_name"], registry=r)
        self.queue_depth = Gauge(
            "messaging_queue_depth", "Messages waiting", ["queue_name", "priority"], registry=r
        )
        self.active_consumers = Gauge(
            "messaging_active_consumers", "Busy consumers", ["queue_name"], registry=r
        )
        self.consumer_saturation = Gauge(
            "messaging_consumer_saturation",
            "Busy consumers / consumers",
            ["queue_name"],
            registry=r,
        )
        self.groups_at_budget = Gauge(
            "knowledge_groups_at_daily_budget",
            "Groups whose LLM cost today reached SVC_KNOWLEDGE_GROUP_DAILY_BUDGET_USD",
            registry=r,
        )
        self.consumer_lag = Gauge(
            "messaging_consumer_lag_seconds",
            "Estimated time to drain the queue",
            ["queue_name"],
            registry=r,
        )
        self.processing_duration = Histogram(
            "messaging_processing_duration_seconds",
            "Processing time per message",
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.wait_time = Histogram(
            "messaging_wait_time_seconds",
            "Wait from enqueue to start",
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.end_to_end_latency = Histogram(
            "messaging_end_to_end_latency_seconds",
            "Enqueue to completion",
            buckets=QUEUE_BUCKETS,
            registry=r,
        )

        if enabled:
            self.cache_enabled_gauge.set(1 if cache_enabled else 0)

    # --- helpers ------------------------------------------------------------------------
    def _all(self, name: str, doc: str) -> Counter:
        """An unlabelled all-models counter, registered on first use (rule 2)."""
        with self._lock:
            counter = self._lazy.get(name)
            if counter is None:
                counter = Counter(name, doc, registry=self.registry)
                self._lazy[name] = counter
            return counter

    def exposition(self) -> bytes:
        """The text exposition of this registry (what ``GET /metrics`` serves)."""
        return generate_latest(self.registry)

    # --- LLM ----------------------------------------------------------------------------
    def record_llm_call(
        self,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        input_cost: float,
        output_cost: float,
        duration: float,
    ) -> None:
        if not self.enabled:
            return
        model = label_value(model)
        total = prompt_tokens + completion_tokens
        cost = input_cost + output_cost
        self.prompt_tokens.labels(model).inc(prompt_tokens)
        self.completion_tokens.labels(model).inc(completion_tokens)
        self.total_tokens.labels(model).inc(total)
        self.api_cost.labels(model).inc(cost)
        self.api_input_cost.labels(model).inc(input_cost)
        self.api_output_cost.labels(model).inc(output_cost)
        self._all("graph_prompt_tokens_all_models", "Prompt tokens, all models").inc(prompt_tokens)
        self._all("graph_completion_tokens_all_models", "Completion tokens, all models").inc(
            completion_tokens
        )
        self._all("graph_total_tokens_all_models", "Total tokens, all models").inc(total)
        self._all("graph_api_cost_all_models", "Cost in USD, all models").inc(cost)
        self._all("graph_api_input_cost_all_models", "Input cost, all models").inc(input_cost)
        self._all("graph_api_output_cost_all_models", "Output cost, all models").inc(output_cost)
        self.prompt_tokens_per_request.labels(model).observe(prompt_tokens)
        self.completion_tokens_per_request.labels(model).observe(completion_tokens)
        self.total_tokens_per_request.labels(model).observe(total)
        self.api_cost_per_request.labels(model).observe(cost)
        self.api_input_cost_per_request.labels(model).observe(input_cost)
        self.api_output_cost_per_request.labels(model).observe(output_cost)
        self.llm_request_duration.labels(model).observe(duration)

    def record_cache(
        self,
        model: str,
        hit: bool,
        tokens_saved: int,
        cost_saved: float,
        write_tokens: int,
    ) -> None:
        """One cached-eligible request. Only when caching is enabled (spec)."""
        if not (self.enabled and self.cache_enabled):
            return
        model = label_value(model)
        (self.cache_hits if hit else self.cache_misses).labels(model).inc()
        self.cache_tokens_saved.labels(model).inc(tokens_saved)
        self.cache_cost_saved.labels(model).inc(cost_saved)
        self.cache_write_tokens.labels(model).inc(write_tokens)
        self.cache_tokens_saved_per_request.labels(model).observe(tokens_saved)
        self.cache_cost_saved_per_request.labels(model).observe(cost_saved)
        self._all("graph_cache_tokens_saved_all_models", "Cached tokens, all models").inc(
            tokens_saved
        )
        self._all("graph_cache_cost_saved_all_models", "USD saved, all models").inc(cost_saved)
        self._all("graph_cache_write_tokens_all_models", "Cache writes, all models").inc(
            write_tokens
        )
        self._all("graph_cache_requests", "Requests eligible for caching").inc()
        with self._lock:
            self._cache_requests += 1
            self._cache_hits += 1 if hit else 0
            rate = 100.0 * self._cache_hits / self._cache_requests
        self.cache_hit_rate.set(rate)

    def record_llm_error(self, model: str, error_type: str) -> None:
        if not self.enabled:
            return
        model, error_type = label_value(model), label_value(error_type)
        self.llm_errors.labels(model, error_type).inc()
        self._all("graph_llm_errors_all_models", "LLM errors, all models").inc()

    def record_episode_processed(self, group_id: str) -> None:
        if not self.enabled:
            return
        self.episodes_processed.labels(self._group_label(group_id)).inc()
        self._all("graph_episodes_processed_all_groups", "Episodes processed, all groups").inc()

    def _group_label(self, group_id: str) -> str:
        group_id = label_value(group_id)
        with self._lock:
            if group_id in self._group_labels:
                return group_id
            if len(self._group_labels) < self.max_group_labels:
                self._group_labels.add(group_id)
                return group_id
        return OTHER_GROUPS

    # --- decay, lifecycle, classification ---------------------------------------------
    def record_maintenance_run(
        self,
        status: str,
        duration: float,
        scores_updated: int = 0,
        transitions: Mapping[tuple[str, str], int] | None = None,
        purged: int = 0,
    ) -> None:
        if not self.enabled:
            return
        self.maintenance_runs.labels(status).inc()
        self.maintenance_duration.observe(duration)
        if scores_updated:
            self.decay_scores_updated.inc(scores_updated)
        for (src, dst), count in (transitions or {}).items():
            if count:
                self.lifecycle_transitions.labels(src, dst).inc(count)
        if purged:
            self.memories_purged.inc(purged)

    def set_memory_gauges(
        self,
        by_state: Mapping[str, int],
        total: int,
        decay_avg: float,
        importance_avg: float,
        stability_avg: float,
    ) -> None:
        if not self.enabled:
            return
        for state, count in by_state.items():
            self.memories_by_state.labels(state).set(count)
        self.memories_total.set(total)
        self.decay_score_avg.set(decay_avg)
        self.importance_avg.set(importance_avg)
        self.stability_avg.set(stability_avg)

    def record_classification(self, status: str, latency: float | None = None) -> None:
        if not self.enabled:
            return
        self.classification_requests.labels(status).inc()
        if latency is not None:
            self.classification_latency.observe(latency)

    # --- search and access ------------------------------------------------------------
    def record_search(self, latency: float) -> None:
        if not self.enabled:
            return
        self.weighted_searches.inc()
        self.search_latency.observe(latency)

    def record_access(
        self, importance: int, state: str, days_since_last_access: float | None
    ) -> None:
        """One returned memory. ``days_since_last_access`` is None when it had never been
        accessed (the histogram records only memories with ``last_accessed_at``)."""
        if not self.enabled:
            return
        self.access_by_importance.labels(importance_level(importance)).inc()
        self.access_by_state.labels(state).inc()
        self.memory_access.inc()
        if days_since_last_access is not None:
            self.days_since_last_access.observe(max(0.0, days_since_last_access))

    def record_reactivation(self, from_state: str) -> None:
        if not self.enabled:
            return
        self.reactivations.labels(from_state).inc()

    # --- queue exporter operations (spec rule 4) ---------------------------------------
    def record_enqueue(self, queue: str, priority: str) -> None:
        if not self.enabled:
            return
        self.queue_depth.labels(queue, priority).inc()

    def record_dequeue(
        self, queue: str, priority: str | None = None, wait_time: float | None = None
    ) -> None:
        if not self.enabled:
            return
        if priority is not None:
            self.queue_depth.labels(queue, priority).dec()
        if wait_time is not None:
            self.wait_time.observe(max(0.0, wait_time))

    def record_processing_complete(
        self,
        queue: str,
        duration: float,
        success: bool,
        error_type: str | None = None,
        end_to_end: float | None = None,
    ) -> None:
        if not self.enabled:
            return
        self.messages_processed.labels(queue, "success" if success else "failure").inc()
        self.processing_duration.observe(max(0.0, duration))
        if not success:
            self.messages_failed.labels(queue, error_type or "UnknownError").inc()
        if end_to_end is not None:
            self.end_to_end_latency.observe(max(0.0, end_to_end))

    def record_retry(self, queue: str) -> None:
        if not self.enabled:
            return
        self.retries.labels(queue).inc()

    def update_queue_depth(self, queue: str, depth: int, priority: str) -> None:
        if not self.enabled:
            return
        self.queue_depth.labels(queue, priority).set(depth)

    def update_consumer_metrics(
        self, queue: str, active: int, saturation: float, lag: float
    ) -> None:
        if not self.enabled:
            return
        self.active_consumers.labels(queue).set(active)
        self.consumer_saturation.labels(queue).set(min(1.0, max(0.0, saturation)))
        self.consumer_lag.labels(queue).set(max(0.0, lag))
