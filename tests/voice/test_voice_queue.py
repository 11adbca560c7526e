"""Notifications in order, no noise: priority, bound, duplicates, expiry; over HTTP too."""

from __future__ import annotations

import itertools
import logging
import threading

import pytest
from litestar.testing import TestClient

from tests.prom import value
from voice.audio import RecordingSink
from voice.errors import QueueFull
from voice.fakes import ToneEngine
from voice.metrics import VoiceMetrics
from voice.notifier import Notification, Notifier
from voice.queueing import Duplicates, PlaybackQueue, expired
from voice.server import create_app
from voice.speech import Speech
from voice.voices import resolve_voice

VOICE = resolve_voice("1")


def test_priority_first_then_arrival_order():
    queue: PlaybackQueue[str] = PlaybackQueue(10)
    pairs = [("a", "normal"), ("b", "low"), ("c", "normal"), ("d", "high"), ("e", "high")]
    places = [queue.put(n, p) for n, p in pairs]
    assert places == [1, 2, 2, 1, 2]
    assert [queue.get(0) for _ in range(5)] == ["d", "e", "a", "c", "b"]
    assert queue.get(0) is None  # empty: timeout


def test_the_queue_is_bounded_and_closable():
    queue: PlaybackQueue[int] = PlaybackQueue(2)
    queue.put(1)
    queue.put(2, "high")
    with pytest.raises(QueueFull, match="2 notifications waiting"):
        queue.put(3, "high")  # priority does not make room
    with pytest.raises(KeyError):
        queue.put(4, "urgent")
    queue.close()
    with pytest.raises(ValueError, match="closed"):
        queue.put(5)
    assert [queue.get(), queue.get(), queue.get()] == [2, 1, None]  # drained, then done


def test_duplicates_within_the_window_of_the_first_only():
    now = iter([0.0, 1.0, 1.9, 2.5, 2.6])
    dupes = Duplicates(2.0, clock=lambda: next(now))
    assert dupes.original("k", "1") is None
    assert dupes.original("k", "2") == ("1", 1.0)
    assert dupes.original("k", "3") == ("1", 1.9)
    assert dupes.original("k", "4") is None  # 2.5 s after the first: a new one
    assert dupes.original("other", "5") is None
    assert Duplicates(0).original("k", "1") is None  # switched off


def test_expiry_rule():
    assert expired(0.0, 121.0, 120.0) and not expired(0.0, 119.0, 120.0)
    assert not expired(0.0, 10_000.0, 0.0)  # 0: never


def test_a_notification_that_waited_too_long_is_dropped_logged_and_counted(gate_sink, caplog):
    metrics = VoiceMetrics()
    notifier = Notifier(ToneEngine(), gate_sink, max_wait=0.2, metrics=metrics)
    notifier.start()
    notifier.submit(Notification("1", Speech("playing", VOICE)))
    assert gate_sink.entered.wait(5)
    notifier.submit(Notification("2", Speech("stale by its turn", VOICE)))
    threading.Timer(0.4, gate_sink.gate.set).start()
    with caplog.at_level(logging.WARNING):
        assert notifier.wait_idle(5)
    notifier.stop()
    assert [(o.id, o.result) for o in notifier.outcomes] == [("1", "played"), ("2", "expired")]
    assert "notification 2 expired: it waited" in caplog.text
    text = metrics.exposition()
    assert value(text, "voice_notifications_total", outcome="expired") == 1
    assert value(text, "voice_notifications_total", outcome="played") == 1
    assert len(gate_sink.recordings) == 1


# -- over HTTP ---------------------------------------------------------------------------------


@pytest.fixture
def app_with(settings):
    def build(sink, engine=None, **changes):
        app = create_app(settings.model_copy(update=changes), engine=engine or ToneEngine(),
                         sink=sink)  # fmt: skip
        return app, app.state["service"]

    return build


def test_ten_concurrent_distinct_notifications_play_in_order_none_lost_none_overlapping(app_with):
    sink = RecordingSink(realtime=True)
    app, service = app_with(sink, ToneEngine(seconds_per_char=0.004))
    with TestClient(app) as client:
        barrier = threading.Barrier(10)
        answers: list = [None] * 10

        def post(i: int) -> None:
            barrier.wait()
            answers[i] = client.post("/notify", json={"message": f"Distinct message {i}."})

        threads = [threading.Thread(target=post, args=(i,)) for i in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert service.notifier.wait_idle(30)
    assert [a.status_code for a in answers] == [202] * 10
    accepted = sorted((a.json()["id"] for a in answers), key=lambda i: int(i.split("-")[0]))
    assert [o.id for o in service.notifier.outcomes] == accepted  # order of acceptance
    assert [o.result for o in service.notifier.outcomes] == ["played"] * 10
    spans = [(r.chunk_times[0], r.chunk_times[-1] + len(r.chunks[-1]) / r.sample_rate)
             for r in sink.recordings]  # fmt: skip
    assert all(b[0] >= a[1] - 0.01 for a, b in itertools.pairwise(spans))  # never two at once


def test_five_identical_within_two_seconds_are_spoken_once(app_with):
    sink = RecordingSink()
    app, service = app_with(sink, dedupe_seconds=2.0)
    with TestClient(app) as client:
        answers = [client.post("/notify", json={"message": "Task complete."}) for _ in range(5)]
        other = client.post("/notify", json={"message": "Task complete.", "voice_id": "2"})
        assert service.notifier.wait_idle(5)
        metrics = client.get("/metrics").text
    assert [a.status_code for a in answers] == [202, 200, 200, 200, 200]
    first = answers[0].json()["id"]
    for dup in answers[1:]:
        body = dup.json()
        assert body["status"] == "duplicate" and body["id"] == first
        assert f"Duplicate of notification {first}" in body["message"]
    assert other.status_code == 202  # another voice is another message
    assert len(sink.recordings) == 2
    assert value(metrics, "voice_notifications_total", outcome="duplicate") == 4


def test_a_high_priority_notification_goes_next(app_with, gate_sink):
    app, service = app_with(gate_sink)
    with TestClient(app) as client:
        ids = [client.post("/notify", json={"message": "First, playing."}).json()["id"]]
        assert gate_sink.entered.wait(5)
        for text in ("Second.", "Third."):
            ids.append(client.post("/notify", json={"message": text}).json()["id"])
        urgent = client.post("/notify", json={"message": "Build broken!", "priority": "high"})
        assert urgent.status_code == 202 and urgent.json()["place"] == 1
        gate_sink.gate.set()
        assert service.notifier.wait_idle(10)
    order = [o.id for o in service.notifier.outcomes]
    assert order == [ids[0], urgent.json()["id"], ids[1], ids[2]]
    assert service.notifier.outcomes[1].priority == "high"


@pytest.mark.parametrize("priority", ["urgent", 1, ["high"], "HIGH"])
def test_an_invalid_priority_is_a_400(app_with, priority):
    app, _ = app_with(RecordingSink())
    with TestClient(app) as client:
        r = client.post("/notify", json={"message": "x", "priority": priority})
    assert r.status_code == 400
    assert "'priority' must be one of 'high', 'normal', 'low'" in r.json()["message"]


def test_a_full_queue_is_counted_and_the_refused_message_may_be_sent_again(app_with, gate_sink):
    app, service = app_with(gate_sink, queue_size=1)
    with TestClient(app) as client:
        client.post("/notify", json={"message": "playing"})
        assert gate_sink.entered.wait(5)
        assert client.post("/notify", json={"message": "waiting"}).status_code == 202
        assert client.post("/notify", json={"message": "refused"}).status_code == 429
        gate_sink.gate.set()
        assert service.notifier.wait_idle(5)
        assert client.post("/notify", json={"message": "refused"}).status_code == 202
        assert service.notifier.wait_idle(5)
        metrics = client.get("/metrics").text
    assert value(metrics, "voice_notifications_total", outcome="queue_full") == 1
    assert value(metrics, "voice_notifications_total", outcome="played") == 3
    assert value(metrics, "voice_queue_depth") == 0


def test_metrics_follow_the_conventions(app_with):
    app, service = app_with(RecordingSink())
    with TestClient(app) as client:
        client.post("/notify", json={"message": "One. Two."})
        assert service.notifier.wait_idle(5)
        client.post("/notify", json={"message": "One. Two."})  # a duplicate
        response = client.get("/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    text = response.text
    for name in ("voice_first_audio_seconds_bucket", "voice_synthesis_seconds_count",
                 "voice_queue_wait_seconds_sum", "voice_cache_requests_total", "voice_rtf",
                 "voice_stalls_total", "voice_stall_seconds_total", "voice_cache_bytes",
                 "voice_held_seconds_count"):  # fmt: skip
        assert name in text, name
    assert value(text, "voice_cache_requests_total", result="miss") == 1
    assert value(text, "voice_first_audio_seconds_count", source="engine") == 1
