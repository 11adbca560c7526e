"""Docs and public API are kept honest by tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import voice
from voice.server import build_parser, create_app
from voice.settings import ENVIRONMENT
from voice.voices import KOKORO_VOICES

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "voice.md").read_text(encoding="utf-8")


def test_every_setting_is_documented():
    assert [name for name in ENVIRONMENT if f"`{name}`" not in DOC] == []


def test_every_flag_is_documented():
    flags = [a.option_strings[-1] for a in build_parser()._actions if a.option_strings]
    assert [f for f in flags if f != "--help" and f"`{f}`" not in DOC] == []


def test_every_route_is_documented():
    app = create_app(engine=voice.ToneEngine(), sink=voice.RecordingSink())
    paths = {route.path for route in app.routes if not route.path.startswith("/schema")}
    assert paths == {"/notify", "/health", "/metrics", "/v1/audio/speech"}
    assert "`/schema/openapi.json`" in DOC
    assert [p for p in paths if f"`{p}`" not in DOC and f" {p}`" not in DOC] == []


def test_every_voice_and_error_is_documented():
    assert sorted(v for v in KOKORO_VOICES if v not in DOC) == []
    errors = [name for name in voice.__all__ if isinstance(getattr(voice, name), type)
              and issubclass(getattr(voice, name), voice.VoiceError)]  # fmt: skip
    assert len(errors) == 8
    assert [e for e in errors if f"`{e}`" not in DOC] == []


def test_public_api_is_sorted_and_importable():
    assert voice.__all__ == sorted(voice.__all__)
    assert all(hasattr(voice, name) for name in voice.__all__)


def test_importing_voice_stays_light():
    heavy = ("onnxruntime", "kokoro_onnx", "litestar", "sounddevice", "torch", "spacy", "misaki")
    code = f"import sys, voice; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_core_does_not_import_voice():
    if not (ROOT / "workbench" / "__init__.py").exists():
        return
    code = "import sys, workbench; print([m for m in sys.modules if m.split('.')[0] == 'voice'])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT
    ).stdout
    assert out.strip() in ("[]", "")


def voice_metric_names() -> set[str]:
    """Every series name the voice metrics can expose (counters with ``_total``)."""
    from voice.metrics import VoiceMetrics

    names = set()
    for family in VoiceMetrics().registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + s for s in ("", "_bucket", "_count", "_sum"))
        else:
            names.add(family.name)
    return names


def test_every_voice_metric_is_documented_and_follows_the_conventions():
    names = voice_metric_names()
    assert len([n for n in names if not n.endswith(("_bucket", "_count", "_sum"))]) >= 11
    documented = {n for n in names if not n.endswith(("_bucket", "_count", "_sum"))}
    assert [n for n in sorted(documented) if f"`{n}`" not in DOC] == []
    assert all(n.startswith("voice_") for n in names)
    histograms = {n.removesuffix("_bucket") for n in names if n.endswith("_bucket")}
    assert histograms and all(h.endswith("_seconds") for h in histograms)


def test_the_dashboard_and_alerts_use_only_existing_voice_metrics():
    import json
    import re

    import yaml

    names = voice_metric_names()
    dashboard = json.loads((ROOT / "ops" / "grafana" / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {n for e in exprs for n in re.findall(r"(?<![$\w])voice_\w+", e)}
    assert {"voice_stalls_total", "voice_notifications_total", "voice_queue_depth",
            "voice_first_audio_seconds_bucket", "voice_cache_requests_total"} <= used  # fmt: skip
    assert used <= names, used - names
    rules = yaml.safe_load((ROOT / "ops" / "prometheus" / "alerts.yml").read_text())
    voice_rules = [r for g in rules["groups"] for r in g["rules"] if "voice_" in r["expr"]]
    assert [r["alert"] for r in voice_rules] == ["VoiceStalls"]
    assert set(re.findall(r"\bvoice_\w+", voice_rules[0]["expr"])) <= names
