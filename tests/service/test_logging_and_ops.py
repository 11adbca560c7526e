"""Structured logs redact secrets; the operations kit refers to real metric names."""

from __future__ import annotations

import io
import json
import logging
import os
import re
from pathlib import Path

import pytest

from serving.logs import (
    REQUEST_ID,
    JsonFormatter,
    Redactor,
    remove_handlers,
    setup_logging,
)
from workbench.metrics import Metrics

OPS = Path(__file__).resolve().parents[2] / "ops"


def test_redactor_hides_registered_secrets_and_secret_patterns():
    redact = Redactor(["s3cr3t-token-value", None, ""])
    text = redact(
        "token s3cr3t-token-value; Authorization: Bearer abc.def-123 "
        "api_key=sk-abcdefghijkl password: hunter22"
    )
    assert "s3cr3t" not in text and "abc.def" not in text
    assert "sk-abcdefghijkl" not in text and "hunter22" not in text
    assert text.count("[REDACTED]") >= 4


def test_json_lines_carry_the_request_id_and_never_a_secret():
    stream = io.StringIO()
    setup_logging("INFO", secrets=["top-secret-key"], stream=stream)
    try:
        token = REQUEST_ID.set("req-123")
        log = logging.getLogger("test.service")
        log.info("calling with top-secret-key", extra={"tool": "add_memory"})
        try:
            raise ValueError("boom with top-secret-key")
        except ValueError:
            log.exception("failed")
        REQUEST_ID.reset(token)
    finally:
        remove_handlers()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["request_id"] == "req-123" and lines[0]["tool"] == "add_memory"
    assert lines[0]["msg"] == "calling with [REDACTED]"
    assert "Traceback" in lines[1]["exc"] and "top-secret-key" not in lines[1]["exc"]


def test_formatter_survives_odd_extras():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m %s", ("a",), None)
    record.payload = object()
    assert json.loads(JsonFormatter().format(record))["msg"] == "m a"


def _exposed_families() -> set[str]:
    """Every metric family name the registry can expose (after one of each record)."""
    m = Metrics(cache_enabled=True)
    m.record_llm_call("m", 10, 5, 0.001, 0.002, 0.3)
    m.record_cache("m", True, 10, 0.0001, 3)
    m.record_llm_error("m", "timeout")
    m.record_episode_processed("g")
    m.record_enqueue("episodes", "normal")
    m.record_retry("episodes")
    m.record_processing_complete("episodes", 0.1, False, "UnknownError")
    names = set()
    for line in m.exposition().decode().splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            names.add(name)
            if kind == "counter":
                names.add(name + "_total")
            if kind == "histogram":
                names.add(name + "_bucket")
    return names


def test_dashboard_queries_use_existing_metrics():
    dashboard = json.loads((OPS / "grafana" / "dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {name for e in exprs for name in re.findall(r"\b(?:graph|knowledge|messaging)_\w+", e)}
    missing = used - _exposed_families()
    assert not missing, f"dashboard uses unknown metrics: {sorted(missing)}"
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("tokens", "cost", "cache", "errors", "queue", "decay"):
        assert topic in titles


def test_prometheus_config_scrapes_every_15_s_and_loads_the_alert_rules():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((OPS / "prometheus" / "prometheus.yml").read_text())
    assert config["global"]["scrape_interval"] == "15s"
    assert "alerts.yml" in config["rule_files"]
    targets = [
        t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    ]
    assert "127.0.0.1:9090" in targets


def test_uvicorn_lines_name_their_server_and_port(caplog):
    """Two servers in one process: each uvicorn line says which one it is."""
    import asyncio
    import socket

    from service.control.runner import make_server, serve_all

    async def app(scope, receive, send):  # a minimal ASGI app with a lifespan
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    socks = []
    for _ in range(2):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        socks.append(sock)
    ports = [sock.getsockname()[1] for sock in socks]
    pairs = [(make_server(app, 1, name), sock) for name, sock in zip(["tools", "metrics"], socks)]

    def stop():
        for server, _ in pairs:
            server.should_exit = True

    with caplog.at_level(logging.INFO, logger="uvicorn.error"):
        asyncio.run(serve_all(pairs, on_ready=stop))
    lines = [r.getMessage() for r in caplog.records if r.name == "uvicorn.error"]
    started = [line for line in lines if "Started server process" in line]
    assert sorted(started) == sorted(
        f"{name} on http://127.0.0.1:{port}: Started server process [{os.getpid()}]"
        for name, port in zip(["tools", "metrics"], ports)
    )
    assert all(line.startswith(("tools on", "metrics on")) for line in lines), lines


@pytest.mark.parametrize(
    "text",
    [
        "the service at http://127.0.0.1:8000 needs its token: set SVC_KNOWLEDGE_API_TOKEN",
        "send 'Authorization: Bearer <token>' with every call",
        "a Bearer token is required",
        "invalid token: expired, ask for another",
        "password: missing; api_key=required",
        "Authorization: Bearer",
    ],
)
def test_ordinary_error_text_keeps_its_words(text):
    assert Redactor()(text) == text


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("Authorization: Bearer abcdef123456", "abcdef123456"),
        ("gateway said Bearer eyJhbGciOi.eyJzdWIiOiIx.c2ln", "eyJhbGciOi.eyJzdWIiOiIx.c2ln"),
        ("Bearer QwErTyUiOpAsDfGhJkLzXc", "QwErTyUiOpAsDfGhJkLzXc"),  # letters only, both cases
        ("api_key=s3cr3tvalue99 rejected", "s3cr3tvalue99"),
        ("token: 'Zx81kLmQ0pWvT5'", "Zx81kLmQ0pWvT5"),
        ("key sk-abcdefghijklmnop leaked", "sk-abcdefghijklmnop"),
    ],
)
def test_secret_values_are_redacted(text, secret):
    redacted = Redactor()(text)
    assert secret not in redacted and "[REDACTED]" in redacted


def test_a_registered_secret_is_redacted_whatever_its_shape():
    assert Redactor(["plainword"])("the key plainword was refused") == (
        "the key [REDACTED] was refused"
    )
