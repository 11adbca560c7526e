"""Pure pieces of the hardening: token buckets, loopback detection, exposure rule, binding."""

from __future__ import annotations

import socket

import pytest
from pydantic import SecretStr

from service.control.runner import StartupError, bind_socket, check_exposure, is_loopback
from serving.middleware import TokenBuckets
from workbench.config import load_settings
from workbench.errors import ConfigError


class Tick:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_buckets_allow_a_burst_then_refill_at_the_rate():
    tick = Tick()
    buckets = TokenBuckets(60, clock=tick)  # one a second, bursts of 60
    assert all(buckets.take("a") == 0 for _ in range(60))
    assert buckets.take("a") == pytest.approx(1.0)
    assert buckets.take("b") == 0  # clients are independent
    tick.now += 0.5
    assert buckets.take("a") == pytest.approx(0.5)
    tick.now += 0.5
    assert buckets.take("a") == 0


def test_buckets_stay_bounded():
    buckets = TokenBuckets(10, clock=Tick(), max_keys=3)
    for key in "abcde":
        buckets.take(key)
    assert list(buckets._buckets) == ["c", "d", "e"]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("192.168.1.5", False),
        ("::", False),
        ("example.org", False),
    ],
)
def test_is_loopback(host, loopback):
    assert is_loopback(host) is loopback


def test_exposure_rule():
    base = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    check_exposure(base)
    with pytest.raises(StartupError, match="SVC_KNOWLEDGE_API_TOKEN"):
        check_exposure(base.model_copy(update={"host": "0.0.0.0"}))
    check_exposure(base.model_copy(update={"host": "0.0.0.0", "api_token": SecretStr("x" * 16)}))
    assert issubclass(StartupError, ConfigError)


def test_bind_socket_reports_a_busy_port():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(StartupError, match=f"port {port} on 127.0.0.1 is already in use"):
            bind_socket("127.0.0.1", port, "the tools port", "--port")
    sock = bind_socket("127.0.0.1", 0, "x", "--port")
    sock.close()


def test_health_probe_reports_a_loading_model_without_blocking():
    import threading

    from service.api.health import EmbedderProbe
    from workbench.fakes.embedder import HashEmbedder

    loaded = threading.Event()
    probe = EmbedderProbe(HashEmbedder(), loaded=loaded)
    assert probe.check()["loading"] is True and probe.check()["ok"] is False
    loaded.set()
    assert probe.check()["ok"] is True


def test_background_warm_up_sets_the_event_or_reports_the_failure():
    import threading

    from service.control.runner import warm_in_background
    from workbench.errors import EmbedderError
    from workbench.fakes.embedder import HashEmbedder

    loaded = threading.Event()
    warm_in_background(HashEmbedder(), loaded, lambda m: None).join(10)
    assert loaded.is_set()

    class Broken(HashEmbedder):
        def embed(self, texts):
            raise EmbedderError("cannot load the local embedding model 'x' from /nowhere")

    failures: list[str] = []
    loaded = threading.Event()
    warm_in_background(Broken(), loaded, failures.append).join(10)
    assert not loaded.is_set() and "/nowhere" in failures[0]


def test_bound_sockets_are_tcp_with_nodelay():
    """Kept-alive responses must not wait for a delayed ACK (asyncio sets TCP_NODELAY only on
    sockets whose proto is TCP; ~40 ms a request otherwise)."""
    sock = bind_socket("127.0.0.1", 0, "x", "--port")
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
    finally:
        sock.close()


def test_freezing_exempts_what_is_loaded_from_full_collections():
    import gc

    from service.control.bootstrap import freeze_loaded_memory

    loaded = [{"uuid": str(i)} for i in range(1000)]  # containers, like the row caches
    try:
        assert freeze_loaded_memory() >= len(loaded)
        assert gc.get_freeze_count() >= len(loaded)
    finally:
        gc.unfreeze()


def test_serve_freezes_the_loaded_workbench_before_it_starts_the_workers(monkeypatch):
    import service.control.runner as runner

    calls: list[str] = []

    class FakeWorkbench:
        def start(self):
            calls.append("start")
            raise RuntimeError("stop the test here")

        def stop(self, timeout=None):
            calls.append("stop")

        def close(self):
            calls.append("close")

    def fake_open(settings, embedder=None, llm_health=None):
        calls.append("open")
        return FakeWorkbench()

    def fake_freeze():
        calls.append("freeze")
        return 0

    monkeypatch.setattr(runner, "prepare_embedder", lambda settings, background: object())
    monkeypatch.setattr(runner, "open_workbench", fake_open)
    monkeypatch.setattr(runner, "freeze_loaded_memory", fake_freeze)
    monkeypatch.setattr(runner, "setup_logging", lambda *a, **k: None)
    settings = load_settings(
        {"SVC_KNOWLEDGE_PORT": "0", "SVC_KNOWLEDGE_METRICS_PORT": "0"}, env_file=None
    )
    with pytest.raises(RuntimeError, match="stop the test here"):
        runner.serve(settings)
    assert calls == ["open", "freeze", "start", "stop", "close"]
