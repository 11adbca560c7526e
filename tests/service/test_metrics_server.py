"""The metrics port: Prometheus text exposition of the workbench registry, and the decay health
JSON of the spec."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.sidecars.metrics_server import create_metrics_app
from workbench.config import load_settings
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics


@pytest.fixture(scope="module")
def wb():
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    workbench = Workbench.open(settings, embedder=HashEmbedder(), chat=None, metrics=Metrics())
    yield workbench
    workbench.close()


@pytest.fixture(scope="module")
def client(wb):
    with TestClient(create_metrics_app(wb)) as test_client:
        yield test_client


def test_metrics_is_prometheus_text_with_the_catalog(client, wb):
    wb.metrics.record_llm_call("m1", 100, 20, 0.001, 0.0004, 0.7)
    wb.add_memory("n", "Tom uses Python.")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert families["graph_prompt_tokens"].type == "counter"
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in families.values()
        for s in f.samples
    }
    assert samples[("graph_prompt_tokens_total", (("model", "m1"),))] == 100
    assert samples[("graph_total_tokens_all_models_total", ())] == 120
    buckets = [
        s
        for s in families["graph_llm_request_duration_seconds"].samples
        if s.name.endswith("_bucket")
    ]
    assert [b.labels["le"] for b in buckets][-1] == "+Inf"
    assert "messaging_queue_depth" in families


def test_health_decay_has_the_spec_fields(client):
    body = client.get("/health/decay").json()
    assert body["status"] in ("healthy", "degraded", "unhealthy")
    assert isinstance(body["decay_enabled"], bool)
    assert body["metrics_endpoint"] == "/metrics"
    assert "last_maintenance" in body


def test_after_a_maintenance_run_health_is_healthy_with_a_utc_timestamp(client, wb):
    wb.run_decay_maintenance()
    body = client.get("/health/decay").json()
    assert body["status"] == "healthy"
    assert body["last_maintenance"].endswith(("Z", "+00:00"))
    metrics = client.get("/metrics").text
    assert 'knowledge_decay_maintenance_runs_total{status="success"} 1.0' in metrics


def test_unknown_paths_use_the_error_shape(client):
    response = client.get("/nope")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found"


def test_gauges_are_refreshed_from_the_database_at_each_scrape(client, wb):
    wb.import_jsonl([{"type": "entity", "name": "Scrape Gauge", "entity_type": "Thing"}])
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics").text)}
    total = families["knowledge_memories_total"].samples[0].value
    assert total >= 1
    states = {s.labels["state"]: s.value for s in families["knowledge_memories_by_state"].samples}
    assert states.get("ACTIVE", 0) >= 1


def test_one_charset_and_the_process_and_python_collectors(client):
    response = client.get("/metrics")
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    names = {
        line.split("{")[0].split(" ")[0]
        for line in response.text.splitlines()
        if not line.startswith("#")
    }
    assert {"process_cpu_seconds_total", "python_info"} <= names
