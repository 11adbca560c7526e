"""The whole metrics catalog of the spec, read back from the text exposition.

Exact names, label names, bucket boundaries and values after known record calls; the behaviour
rules (series only after the first call/error, cache metrics only when caching is enabled,
everything a no-op when metrics are disabled, thread safety).
"""

from __future__ import annotations

import math
import threading

import pytest

from tests.prom import buckets, family_types, label_sets, parse, sample_names, value
from workbench.metrics import Metrics

INF = math.inf
SPEC_TOKEN_BUCKETS = [
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
]
SPEC_COST_BUCKETS = [
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
]
SPEC_DURATION_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0]
SPEC_MAINTENANCE_BUCKETS = [1, 5, 30, 60, 120, 300, 600]
SPEC_CLASSIFICATION_BUCKETS = [0.1, 0.5, 1, 2, 5]
SPEC_ACCESS_BUCKETS = [1, 7, 30, 90, 180, 365, 730, 1095]
SPEC_QUEUE_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10]
# The spec gives no boundaries for the weighted-search latency; these are the module's.
SEARCH_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5]

# family name (as exposed) -> (type, label names)
CATALOG: dict[str, tuple[str, tuple[str, ...]]] = {
    "graph_prompt_tokens": ("counter", ("model",)),
    "graph_completion_tokens": ("counter", ("model",)),
    "graph_total_tokens": ("counter", ("model",)),
    "graph_prompt_tokens_all_models": ("counter", ()),
    "graph_completion_tokens_all_models": ("counter", ()),
    "graph_total_tokens_all_models": ("counter", ()),
    "graph_api_cost": ("counter", ("model",)),
    "graph_api_input_cost": ("counter", ("model",)),
    "graph_api_output_cost": ("counter", ("model",)),
    "graph_api_cost_all_models": ("counter", ()),
    "graph_api_input_cost_all_models": ("counter", ()),
    "graph_api_output_cost_all_models": ("counter", ()),
    "graph_prompt_tokens_per_request": ("histogram", ("model",)),
    "graph_completion_tokens_per_request": ("histogram", ("model",)),
    "graph_total_tokens_per_request": ("histogram", ("model",)),
    "graph_api_cost_per_request": ("histogram", ("model",)),
    "graph_api_input_cost_per_request": ("histogram", ("model",)),
    "graph_api_output_cost_per_request": ("histogram", ("model",)),
    "graph_llm_request_duration_seconds": ("histogram", ("model",)),
    "graph_cache_enabled": ("gauge", ()),
    "graph_cache_hit_rate": ("gauge", ()),
    "graph_cache_hits": ("counter", ("model",)),
    "graph_cache_misses": ("counter", ("model",)),
    "graph_cache_tokens_saved": ("counter", ("model",)),
    "graph_cache_cost_saved": ("counter", ("model",)),
    "graph_cache_write_tokens": ("counter", ("model",)),
    "graph_cache_tokens_saved_per_request": ("histogram", ("model",)),
    "graph_cache_cost_saved_per_request": ("histogram", ("model",)),
    "graph_cache_cost_saved_all_models": ("counter", ()),
    "graph_cache_tokens_saved_all_models": ("counter", ()),
    "graph_cache_write_tokens_all_models": ("counter", ()),
    "graph_cache_requests": ("counter", ()),
    "graph_llm_errors": ("counter", ("model", "error_type")),
    "graph_llm_errors_all_models": ("counter", ()),
    "graph_episodes_processed": ("counter", ("group_id",)),
    "graph_episodes_processed_all_groups": ("counter", ()),
    "knowledge_decay_maintenance_runs": ("counter", ("status",)),
    "knowledge_decay_scores_updated": ("counter", ()),
    "knowledge_maintenance_duration_seconds": ("histogram", ()),
    "knowledge_memories_purged": ("counter", ()),
    "knowledge_lifecycle_transitions": ("counter", ("from_state", "to_state")),
    "knowledge_memories_by_state": ("gauge", ("state",)),
    "knowledge_memories_total": ("gauge", ()),
    "knowledge_classification_requests": ("counter", ("status",)),
    "knowledge_classification_latency_seconds": ("histogram", ()),
    "knowledge_decay_score_avg": ("gauge", ()),
    "knowledge_importance_avg": ("gauge", ()),
    "knowledge_stability_avg": ("gauge", ()),
    "knowledge_weighted_searches": ("counter", ()),
    "knowledge_search_weighted_latency_seconds": ("histogram", ()),
    "knowledge_access_by_importance": ("counter", ("level",)),
    "knowledge_access_by_state": ("counter", ("state",)),
    "knowledge_days_since_last_access": ("histogram", ()),
    "knowledge_reactivations": ("counter", ("from_state",)),
    "knowledge_memory_access": ("counter", ()),
    "messaging_messages_processed": ("counter", ("queue_name", "status")),
    "messaging_messages_failed": ("counter", ("queue_name", "error_type")),
    "messaging_retries": ("counter", ("queue_name",)),
    "messaging_queue_depth": ("gauge", ("queue_name", "priority")),
    "messaging_active_consumers": ("gauge", ("queue_name",)),
    "messaging_consumer_saturation": ("gauge", ("queue_name",)),
    "messaging_consumer_lag_seconds": ("gauge", ("queue_name",)),
    "knowledge_groups_at_daily_budget": ("gauge", ()),
    "knowledge_passages_without_vector": ("gauge", ()),
    "knowledge_search_saves_rejected": ("counter", ("kind", "part")),
    "messaging_processing_duration_seconds": ("histogram", ()),
    "messaging_wait_time_seconds": ("histogram", ()),
    "messaging_end_to_end_latency_seconds": ("histogram", ()),
}


def exposed_name(family: str, kind: str) -> str:
    return f"{family}_total" if kind == "counter" else family


def expected_buckets(bounds: list[float], observations: list[float]) -> list[tuple[float, float]]:
    rows = [(float(b), float(sum(1 for o in observations if o <= b))) for b in bounds]
    return [*rows, (INF, float(len(observations)))]


def record_everything(m: Metrics) -> None:
    m.record_llm_call("gpt-4o-mini", 1200, 300, 0.00018, 0.00018, 0.7)
    m.record_cache("gpt-4o-mini", False, 0, 0.0, 1100)
    m.record_cache("gpt-4o-mini", True, 1100, 0.00012, 0)
    m.record_llm_error("gpt-4o-mini", "rate_limit")
    m.record_episode_processed("main")
    m.record_maintenance_run("success", 45.0, 10, {("ACTIVE", "DORMANT"): 3}, 2)
    m.set_memory_gauges({"ACTIVE": 7, "DORMANT": 3}, 10, 0.25, 3.2, 2.9)
    m.record_classification("success", 0.3)
    m.record_search(0.02)
    m.record_access(5, "DORMANT", 40.0)
    m.record_reactivation("DORMANT")
    m.record_enqueue("episodes", "normal")
    m.record_dequeue("episodes", "normal", 0.2)
    m.record_processing_complete("episodes", 1.5, False, "ValidationError", 2.0)
    m.record_retry("episodes")
    m.update_queue_depth("episodes", 4, "high")
    m.update_consumer_metrics("episodes", 2, 0.5, 12.0)
    m.passages_without_vector.set(12)
    m.search_saves_rejected.labels("fact", "graph").inc()


# --- the catalog as a whole ------------------------------------------------------------------
STANDARD = ("process_", "python_")  # prometheus_client's own process and Python collectors


def ours(types: dict[str, str]) -> dict[str, str]:
    return {name: kind for name, kind in types.items() if not name.startswith(STANDARD)}


def test_every_family_of_the_spec_is_exposed_with_its_type_and_nothing_else():
    m = Metrics(enabled=True, cache_enabled=True)
    record_everything(m)
    types = family_types(m.exposition())
    assert ours(types) == {name: kind for name, (kind, _) in CATALOG.items()}
    assert {"process_cpu_seconds", "python_info"} <= set(types)  # beside ours


@pytest.mark.parametrize("family", sorted(CATALOG))
def test_label_names_of_each_family(family):
    m = Metrics(enabled=True, cache_enabled=True)
    record_everything(m)
    kind, labels = CATALOG[family]
    name = exposed_name(family, kind) if kind != "histogram" else f"{family}_count"
    sets = label_sets(m.exposition(), name)
    assert sets, f"{name} has no series"
    for found in sets:
        assert tuple(sorted(found)) == tuple(sorted(labels))


def test_names_carry_no_unit_suffix_beyond_the_spec():
    m = Metrics(enabled=True, cache_enabled=True)
    record_everything(m)
    for family in ours(family_types(m.exposition())):
        assert not family.endswith(("_usd", "_dollars", "_bytes", "_tokens_count"))


# --- LLM series --------------------------------------------------------------------------------
def test_no_llm_series_before_the_first_call():
    m = Metrics(enabled=True, cache_enabled=False)
    graph = {n for n in sample_names(m.exposition()) if n.startswith("graph_")}
    assert graph == {"graph_cache_enabled", "graph_cache_hit_rate"}
    assert value(m.exposition(), "graph_cache_enabled") == 0.0


def test_token_and_cost_counters_after_two_calls():
    m = Metrics()
    m.record_llm_call("gpt-4o-mini", 1000, 200, 0.00015, 0.00012, 0.4)
    m.record_llm_call("claude-haiku-4-5", 30, 5, 0.00003, 0.000025, 2.0)
    text = m.exposition()
    assert value(text, "graph_prompt_tokens_total", model="gpt-4o-mini") == 1000
    assert value(text, "graph_completion_tokens_total", model="gpt-4o-mini") == 200
    assert value(text, "graph_total_tokens_total", model="gpt-4o-mini") == 1200
    assert value(text, "graph_prompt_tokens_total", model="claude-haiku-4-5") == 30
    assert value(text, "graph_prompt_tokens_all_models_total") == 1030
    assert value(text, "graph_completion_tokens_all_models_total") == 205
    assert value(text, "graph_total_tokens_all_models_total") == 1235
    assert value(text, "graph_api_input_cost_total", model="gpt-4o-mini") == pytest.approx(0.00015)
    assert value(text, "graph_api_output_cost_total", model="gpt-4o-mini") == pytest.approx(0.00012)
    assert value(text, "graph_api_cost_total", model="gpt-4o-mini") == pytest.approx(0.00027)
    assert value(text, "graph_api_cost_all_models_total") == pytest.approx(0.000325)
    assert value(text, "graph_api_input_cost_all_models_total") == pytest.approx(0.00018)
    assert value(text, "graph_api_output_cost_all_models_total") == pytest.approx(0.000145)


@pytest.mark.parametrize(
    ("family", "bounds", "observed"),
    [
        ("graph_prompt_tokens_per_request", SPEC_TOKEN_BUCKETS, [1000, 30]),
        ("graph_completion_tokens_per_request", SPEC_TOKEN_BUCKETS, [200, 5]),
        ("graph_total_tokens_per_request", SPEC_TOKEN_BUCKETS, [1200, 35]),
        ("graph_api_cost_per_request", SPEC_COST_BUCKETS, [0.00027, 0.000055]),
        ("graph_api_input_cost_per_request", SPEC_COST_BUCKETS, [0.00015, 0.00003]),
        ("graph_api_output_cost_per_request", SPEC_COST_BUCKETS, [0.00012, 0.000025]),
        ("graph_llm_request_duration_seconds", SPEC_DURATION_BUCKETS, [0.4, 2.0]),
    ],
)
def test_llm_histograms_have_the_spec_buckets_and_cumulative_counts(family, bounds, observed):
    m = Metrics()
    m.record_llm_call("m1", 1000, 200, 0.00015, 0.00012, 0.4)
    m.record_llm_call("m1", 30, 5, 0.00003, 0.000025, 2.0)
    text = m.exposition()
    assert buckets(text, family, model="m1") == expected_buckets(bounds, observed)
    assert value(text, f"{family}_count", model="m1") == 2
    assert value(text, f"{family}_sum", model="m1") == pytest.approx(sum(observed))


def test_bucket_boundary_is_inclusive():
    m = Metrics()
    m.record_llm_call("m1", 100, 10, 0.0, 0.0, 0.05)
    text = m.exposition()
    rows = dict(buckets(text, "graph_prompt_tokens_per_request", model="m1"))
    assert rows[50.0] == 0 and rows[100.0] == 1
    assert dict(buckets(text, "graph_llm_request_duration_seconds", model="m1"))[0.05] == 1


def test_error_series_appear_only_after_the_first_error():
    m = Metrics()
    m.record_llm_call("m1", 10, 1, 0.0, 0.0, 0.1)
    assert not {n for n in sample_names(m.exposition()) if "errors" in n}
    m.record_llm_error("m1", "rate_limit")
    m.record_llm_error("m1", "rate_limit")
    m.record_llm_error("m1", "timeout")
    m.record_llm_error("m2", "BadRequestError")
    text = m.exposition()
    assert value(text, "graph_llm_errors_total", model="m1", error_type="rate_limit") == 2
    assert value(text, "graph_llm_errors_total", model="m1", error_type="timeout") == 1
    assert value(text, "graph_llm_errors_total", model="m2", error_type="BadRequestError") == 1
    assert value(text, "graph_llm_errors_all_models_total") == 4


def test_episodes_processed_per_group_and_all_groups():
    m = Metrics()
    m.record_episode_processed("main")
    m.record_episode_processed("main")
    m.record_episode_processed("work")
    text = m.exposition()
    assert value(text, "graph_episodes_processed_total", group_id="main") == 2
    assert value(text, "graph_episodes_processed_total", group_id="work") == 1
    assert value(text, "graph_episodes_processed_all_groups_total") == 3


# --- cache -------------------------------------------------------------------------------------
def test_cache_metrics_when_caching_is_enabled():
    m = Metrics(enabled=True, cache_enabled=True)
    m.record_cache("claude-sonnet-4-5", False, 0, 0.0, 1500)
    m.record_cache("claude-sonnet-4-5", True, 1500, 0.00405, 0)
    m.record_cache("claude-sonnet-4-5", True, 1500, 0.00405, 0)
    m.record_cache("claude-sonnet-4-5", False, 0, 0.0, 2000)
    text = m.exposition()
    model = "claude-sonnet-4-5"
    assert value(text, "graph_cache_enabled") == 1
    assert value(text, "graph_cache_hits_total", model=model) == 2
    assert value(text, "graph_cache_misses_total", model=model) == 2
    assert value(text, "graph_cache_hit_rate") == 50.0
    assert value(text, "graph_cache_tokens_saved_total", model=model) == 3000
    assert value(text, "graph_cache_cost_saved_total", model=model) == pytest.approx(0.0081)
    assert value(text, "graph_cache_write_tokens_total", model=model) == 3500
    assert value(text, "graph_cache_tokens_saved_all_models_total") == 3000
    assert value(text, "graph_cache_cost_saved_all_models_total") == pytest.approx(0.0081)
    assert value(text, "graph_cache_write_tokens_all_models_total") == 3500
    assert value(text, "graph_cache_requests_total") == 4
    assert buckets(text, "graph_cache_tokens_saved_per_request", model=model) == (
        expected_buckets(SPEC_TOKEN_BUCKETS, [0, 1500, 1500, 0])
    )
    assert buckets(text, "graph_cache_cost_saved_per_request", model=model) == (
        expected_buckets(SPEC_COST_BUCKETS, [0, 0.00405, 0.00405, 0])
    )


def test_cache_metrics_stay_empty_when_caching_is_disabled():
    m = Metrics(enabled=True, cache_enabled=False)
    m.record_cache("claude-sonnet-4-5", True, 1500, 0.00405, 0)
    names = sample_names(m.exposition())
    assert {n for n in names if n.startswith("graph_cache")} == {
        "graph_cache_enabled",
        "graph_cache_hit_rate",
    }
    assert value(m.exposition(), "graph_cache_enabled") == 0
    assert value(m.exposition(), "graph_cache_hit_rate") == 0


# --- knowledge_ families -----------------------------------------------------------------------
def test_maintenance_lifecycle_and_classification_metrics():
    m = Metrics()
    m.record_maintenance_run(
        "success", 45.0, 10, {("ACTIVE", "DORMANT"): 3, ("DORMANT", "ARCHIVED"): 0}, 2
    )
    m.record_maintenance_run("failure", 700.0)
    m.set_memory_gauges({"ACTIVE": 7, "DORMANT": 3}, 10, 0.25, 3.2, 2.9)
    m.record_classification("success", 0.3)
    m.record_classification("fallback")
    text = m.exposition()
    assert value(text, "knowledge_decay_maintenance_runs_total", status="success") == 1
    assert value(text, "knowledge_decay_maintenance_runs_total", status="failure") == 1
    assert value(text, "knowledge_decay_scores_updated_total") == 10
    assert value(text, "knowledge_memories_purged_total") == 2
    assert (
        value(
            text, "knowledge_lifecycle_transitions_total", from_state="ACTIVE", to_state="DORMANT"
        )
        == 3
    )
    assert label_sets(text, "knowledge_lifecycle_transitions_total") == [
        {"from_state": "ACTIVE", "to_state": "DORMANT"}
    ]
    assert buckets(text, "knowledge_maintenance_duration_seconds") == expected_buckets(
        SPEC_MAINTENANCE_BUCKETS, [45.0, 700.0]
    )
    assert value(text, "knowledge_memories_by_state", state="ACTIVE") == 7
    assert value(text, "knowledge_memories_by_state", state="DORMANT") == 3
    assert value(text, "knowledge_memories_total") == 10
    assert value(text, "knowledge_decay_score_avg") == 0.25
    assert value(text, "knowledge_importance_avg") == 3.2
    assert value(text, "knowledge_stability_avg") == 2.9
    assert value(text, "knowledge_classification_requests_total", status="success") == 1
    assert value(text, "knowledge_classification_requests_total", status="fallback") == 1
    assert buckets(text, "knowledge_classification_latency_seconds") == expected_buckets(
        SPEC_CLASSIFICATION_BUCKETS, [0.3]
    )


def test_search_and_access_metrics():
    m = Metrics()
    m.record_search(0.02)
    m.record_access(5, "DORMANT", 40.0)
    m.record_access(1, "ACTIVE", None)
    m.record_access(2, "ACTIVE", 0.5)
    m.record_access(3, "PERMANENT", 2000.0)
    m.record_access(4, "ARCHIVED", 100.0)
    m.record_reactivation("DORMANT")
    m.record_reactivation("ARCHIVED")
    text = m.exposition()
    assert value(text, "knowledge_weighted_searches_total") == 1
    assert buckets(text, "knowledge_search_weighted_latency_seconds") == expected_buckets(
        SEARCH_BUCKETS, [0.02]
    )
    assert value(text, "knowledge_access_by_importance_total", level="CRITICAL") == 1
    assert value(text, "knowledge_access_by_importance_total", level="LOW") == 2
    assert value(text, "knowledge_access_by_importance_total", level="MEDIUM") == 1
    assert value(text, "knowledge_access_by_importance_total", level="HIGH") == 1
    assert value(text, "knowledge_access_by_state_total", state="ACTIVE") == 2
    assert value(text, "knowledge_access_by_state_total", state="DORMANT") == 1
    assert value(text, "knowledge_memory_access_total") == 5
    # only memories with last_accessed_at are observed
    assert buckets(text, "knowledge_days_since_last_access") == expected_buckets(
        SPEC_ACCESS_BUCKETS, [40.0, 0.5, 2000.0, 100.0]
    )
    assert value(text, "knowledge_reactivations_total", from_state="DORMANT") == 1
    assert value(text, "knowledge_reactivations_total", from_state="ARCHIVED") == 1


# --- messaging_ families -----------------------------------------------------------------------
def test_queue_exporter_operations():
    m = Metrics()
    m.record_enqueue("episodes", "normal")
    m.record_enqueue("episodes", "normal")
    m.record_enqueue("episodes", "high")
    m.record_dequeue("episodes", "normal", 0.2)
    m.record_processing_complete("episodes", 1.5, True, None, 2.0)
    m.record_processing_complete("episodes", 0.03, False, "ValidationError", 0.04)
    m.record_retry("episodes")
    m.update_consumer_metrics("episodes", 3, 1.7, -5.0)
    text = m.exposition()
    assert value(text, "messaging_queue_depth", queue_name="episodes", priority="normal") == 1
    assert value(text, "messaging_queue_depth", queue_name="episodes", priority="high") == 1
    assert (
        value(text, "messaging_messages_processed_total", queue_name="episodes", status="success")
        == 1
    )
    assert (
        value(text, "messaging_messages_processed_total", queue_name="episodes", status="failure")
        == 1
    )
    assert (
        value(
            text,
            "messaging_messages_failed_total",
            queue_name="episodes",
            error_type="ValidationError",
        )
        == 1
    )
    assert value(text, "messaging_retries_total", queue_name="episodes") == 1
    assert value(text, "messaging_active_consumers", queue_name="episodes") == 3
    assert value(text, "messaging_consumer_saturation", queue_name="episodes") == 1.0  # clamped
    assert value(text, "messaging_consumer_lag_seconds", queue_name="episodes") == 0.0
    assert buckets(text, "messaging_wait_time_seconds") == expected_buckets(
        SPEC_QUEUE_BUCKETS, [0.2]
    )
    assert buckets(text, "messaging_processing_duration_seconds") == expected_buckets(
        SPEC_QUEUE_BUCKETS, [1.5, 0.03]
    )
    assert buckets(text, "messaging_end_to_end_latency_seconds") == expected_buckets(
        SPEC_QUEUE_BUCKETS, [2.0, 0.04]
    )
    m.update_queue_depth("episodes", 9, "normal")
    assert (
        value(m.exposition(), "messaging_queue_depth", queue_name="episodes", priority="normal")
        == 9
    )


# --- behaviour rules ---------------------------------------------------------------------------
def test_disabled_metrics_expose_nothing():
    m = Metrics(enabled=False, cache_enabled=True)
    record_everything(m)
    names = sample_names(m.exposition())
    assert not {n for n in names if n.startswith("graph_")}
    assert not names


def test_each_metrics_object_has_its_own_counters():
    a, b = Metrics(), Metrics()
    a.record_llm_call("m1", 10, 1, 0.0, 0.0, 0.1)
    assert value(a.exposition(), "graph_prompt_tokens_total", model="m1") == 10
    assert value(b.exposition(), "graph_prompt_tokens_total", model="m1") is None


def test_recording_is_thread_safe():
    m = Metrics(enabled=True, cache_enabled=True)

    def work():
        for _ in range(500):
            m.record_llm_call("m1", 2, 1, 0.0, 0.0, 0.01)
            m.record_cache("m1", True, 1, 0.0, 0)
            m.record_llm_error("m1", "timeout")

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    text = m.exposition()
    assert value(text, "graph_prompt_tokens_all_models_total") == 6000
    assert value(text, "graph_cache_requests_total") == 3000
    assert value(text, "graph_cache_hit_rate") == 100.0
    assert value(text, "graph_llm_errors_all_models_total") == 3000
    assert value(text, "graph_llm_request_duration_seconds_count", model="m1") == 3000
    assert parse(text)  # the text stays parseable
