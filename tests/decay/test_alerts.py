"""ops/prometheus/alerts.yml: the spec's five alerts plus the queue alerts, with metric names
from the real catalog. ``promtool check rules`` also runs when promtool is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from workbench.metrics import Metrics

RULES = Path(__file__).resolve().parents[2] / "ops" / "prometheus" / "alerts.yml"
RULE_TESTS = RULES.with_name("alerts_test.yml")

EXPECTED = {
    "MaintenanceTimeout": (
        "warning",
        [
            "knowledge_maintenance_duration_seconds_count",
            "knowledge_maintenance_duration_seconds_bucket",
            'le="600.0"',
        ],
    ),
    "MaintenanceFailed": (
        "critical",
        ['knowledge_decay_maintenance_runs_total{status="failure"}', "[1h]", "> 0"],
    ),
    "ClassificationDegraded": ("warning", ['{status="fallback"}', "> 0.2"]),
    "ExcessiveExpiration": ("warning", ['to_state="EXPIRED"', "[1h]", "> 100"]),
    "SoftDeleteBacklog": (
        "warning",
        ['knowledge_memories_by_state{state="SOFT_DELETED"}', "> 1000"],
    ),
    "QueueConsumerSaturation": ("warning", ["messaging_consumer_saturation", "> 0.85"]),
    "QueueDepthWarning": ("warning", ["messaging_queue_depth", "> 10"]),
    "QueueDepthCritical": ("critical", ["messaging_queue_depth", "> 50"]),
    "GroupAtDailyBudget": ("warning", ["knowledge_groups_at_daily_budget", "> 0"]),
    "VoiceStalls": ("warning", ["increase(voice_stalls_total[15m])", "> 0"]),
}


def _rules():
    data = yaml.safe_load(RULES.read_text())
    return {r["alert"]: r for g in data["groups"] for r in g["rules"]}


def _catalog() -> set[str]:
    from voice.metrics import VoiceMetrics

    names = set()
    families = [*Metrics().registry.collect(), *VoiceMetrics().registry.collect()]
    for family in families:
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_count", "_sum"))
        else:
            names.add(family.name)
    return names


def test_every_expected_alert_with_its_severity_and_condition():
    rules = _rules()
    assert set(rules) == set(EXPECTED)
    for name, (severity, fragments) in EXPECTED.items():
        rule = rules[name]
        assert rule["labels"]["severity"] == severity, name
        expr = " ".join(rule["expr"].split())
        for fragment in fragments:
            assert fragment in expr, (name, fragment)
        assert rule["annotations"]["summary"], name


def test_expressions_use_only_catalog_metrics():
    catalog = _catalog()
    for name, rule in _rules().items():
        used = set(re.findall(r"\b(?:knowledge|messaging|graph|voice)_[a-z_]+", rule["expr"]))
        assert used, name
        assert used <= catalog, (name, used - catalog)


def test_expressions_are_balanced():
    for name, rule in _rules().items():
        expr = rule["expr"]
        for a, b in ("()", "{}", "[]"):
            assert expr.count(a) == expr.count(b), name
        assert expr.count('"') % 2 == 0, name


def test_every_alert_has_firing_and_quiet_promtool_cases():
    data = yaml.safe_load(RULE_TESTS.read_text())
    assert data["rule_files"] == ["alerts.yml"]
    cases = [c for t in data["tests"] for c in t["alert_rule_test"]]
    for name in EXPECTED:
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in mine), f"{name}: no case where it fires"
        assert any(not c["exp_alerts"] for c in mine), f"{name}: no case where it is quiet"


needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool is not installed"
)


@needs_promtool
@pytest.mark.parametrize("command,path", [("check", RULES), ("test", RULE_TESTS)])
def test_promtool(command, path):  # pragma: no cover - only where promtool exists
    out = subprocess.run(
        ["promtool", command, "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
