"""Never starve the speaker: the start rule, the host-speed estimate, and pacing end to end with
an engine of controllable speed and a sink that plays in real time."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pytest

from voice.audio import Recording, RecordingSink
from voice.fakes import ToneEngine
from voice.metrics import VoiceMetrics
from voice.notifier import Notification, Notifier
from voice.pacing import HostSpeed, stall_after, start_delay
from voice.speech import Speech, stream_speech
from voice.voices import resolve_voice

VOICE = resolve_voice("1")


# -- the rule (pure) -------------------------------------------------------------------------


def simulate(buffered: float, pending: list[float], rate: float, delay: float) -> float:
    """Longest silence when playback starts after ``delay`` and chunk i takes rate*d_i."""
    ready, plays, worst = 0.0, delay + buffered, 0.0
    for seconds in pending:
        ready += rate * seconds
        worst = max(worst, ready - plays)
        plays = max(plays, ready) + seconds
    return worst


@pytest.mark.parametrize("rate", [0.3, 0.7, 1.0, 1.5, 3.0])
@pytest.mark.parametrize("pending", [[0.5], [2.0, 2.0], [0.4, 3.0, 0.2], [1.0] * 6])
@pytest.mark.parametrize("buffered", [0.3, 1.0, 2.5])
def test_starting_after_the_delay_never_stalls_and_a_shorter_wait_would(buffered, pending, rate):
    delay = start_delay(buffered, pending, lambda s: rate * s, margin=0.0)
    assert simulate(buffered, pending, rate, delay) <= 1e-9
    if delay > 0.01:  # the wait is no longer than needed
        assert simulate(buffered, pending, rate, delay - 0.01) > 0


def test_start_delay_edges():
    cost = lambda s: s  # noqa: E731 - real time
    assert start_delay(1.0, [], cost) == 0.0  # everything is here
    assert start_delay(3.0, [1.0], cost, margin=0.0) == 0.0
    # the chunk being synthesized has been worked on for 0.5 s: half a second less to wait
    assert start_delay(0.5, [2.0], cost, busy=0.5, margin=0.0) == pytest.approx(1.0)
    # an overdue chunk is taken as arriving now, not in the past
    assert start_delay(0.2, [1.0], cost, busy=5.0, margin=0.1) == pytest.approx(0.0)
    assert start_delay(0.0, [1.0], cost, margin=0.1) == pytest.approx(1.1)


def test_stall_tolerance():
    assert stall_after(10.0, 10.02) == 0.0
    assert stall_after(10.0, 10.5) == pytest.approx(0.5)
    assert stall_after(10.0, 9.0) == 0.0


# -- the host's speed ------------------------------------------------------------------------


def test_host_speed_fits_a_fixed_cost_per_call_and_a_rate():
    speed = HostSpeed(keep=1.0, half_life=0)
    for audio in (0.5, 1.0, 2.0, 4.0, 1.5):
        speed.record(audio, 0.3 + 0.6 * audio)
    snap = speed.snapshot()
    assert snap.per_call == pytest.approx(0.3, abs=1e-6)
    assert snap.per_second == pytest.approx(0.6, abs=1e-6)
    assert snap.rtf == pytest.approx((0.3 * 5 + 0.6 * 9) / 9)
    assert speed.cost(2.0) >= 1.5  # 0.3 + 1.2, plus the spread


def test_host_speed_follows_a_change_of_load():
    now = itertools.count(0, 1.0)
    speed = HostSpeed(keep=0.8, half_life=60, clock=lambda: next(now))
    for _ in range(10):
        speed.record(1.0, 0.5)  # quiet
    for _ in range(6):
        speed.record(1.0, 2.0)  # busy: four times slower
    assert speed.snapshot().rtf > 1.5
    assert speed.cost(1.0) > 2.0  # pessimistic while the estimate moves


def test_host_speed_before_any_call_is_cautious_and_learns_durations():
    speed = HostSpeed()
    assert speed.snapshot().rtf is None and speed.cost(1.0) >= 1.0
    assert speed.duration("abc def", "en-us") == pytest.approx(6 * 0.07)
    assert speed.duration("你好世界", "zh") > speed.duration("abcd", "en-us")
    speed.learn_duration("abcdefghij", "en-us", 1.0, 2.0)
    assert speed.duration("abcdefghij", "en-us", speed=2.0) == pytest.approx(1.0)
    speed.record(0.0, 1.0)  # nothing spoken: ignored
    assert speed.snapshot().samples == 0


# -- pacing end to end -----------------------------------------------------------------------

SENTENCES = "Alpha bravo charlie delta echo foxtrot golf hotel. " * 1 + " ".join(
    f"Sentence number {n} goes on for a while here." for n in range(4)
)


def gaps(recording: Recording) -> list[float]:
    """Silence before each chunk after the first, from when the real-time sink took it."""
    rate = recording.sample_rate
    ends = [t + len(c) / rate for t, c in zip(recording.chunk_times, recording.chunks, strict=True)]
    return [max(0.0, start - end) for start, end in zip(recording.chunk_times[1:], ends)]


def test_a_slow_engine_stalls_unpaced_but_not_paced(caplog):
    slow = ToneEngine(seconds_per_char=0.006, rtf=3.0)  # synthesis slower than real time
    unpaced = RecordingSink(realtime=True)
    unpaced.play(stream_speech(slow, Speech("", VOICE), SENTENCES.split(". ")), slow.sample_rate)
    assert max(gaps(unpaced.recordings[0])) > 0.1  # the control: this engine starves a player

    sink, metrics = RecordingSink(realtime=True), VoiceMetrics()
    notifier = Notifier(slow, sink, metrics=metrics)
    notifier.start()
    notifier.submit(Notification("1", Speech(SENTENCES, VOICE)))
    assert notifier.wait_idle(60)
    notifier.stop()
    outcome = notifier.last()
    assert outcome.result == "played" and outcome.stalls == 0, outcome
    assert outcome.held_seconds > 0.2  # the first sound waited instead
    assert max(gaps(sink.recordings[0]), default=0) < 0.05  # and the sink never ran dry
    assert metrics.stalls._value.get() == 0  # noqa: SLF001


def test_a_fast_engine_is_not_held_back(tone):
    sink = RecordingSink(realtime=True)
    notifier = Notifier(ToneEngine(seconds_per_char=0.008, rtf=0.05), sink)
    notifier.start()
    notifier.submit(Notification("1", Speech(SENTENCES, VOICE)))
    assert notifier.wait_idle(30)
    notifier.stop()
    assert notifier.last().held_seconds < 0.1 and notifier.last().stalls == 0


class SuddenlySlow(ToneEngine):
    """Fast, but for one chunk that takes far longer than anything predicted."""

    def synthesize(self, text: str, voice, speed: float = 1.0) -> np.ndarray:
        import time

        if "number 2" in text:
            time.sleep(2.0)
        return super().synthesize(text, voice, speed)


def test_a_stall_that_still_happens_is_counted_and_logged(caplog):
    notifier = Notifier(SuddenlySlow(seconds_per_char=0.005), RecordingSink(realtime=True))
    notifier.start()
    with caplog.at_level(logging.WARNING):
        notifier.submit(Notification("1", Speech(SENTENCES, VOICE)))
        assert notifier.wait_idle(30)
    notifier.stop()
    assert notifier.last().stalls == 1 and notifier.stalls == 1
    assert notifier.last().stall_seconds > 0.1
    assert "notification 1 stalled 1 time(s)" in caplog.text and "mid-speech" in caplog.text


def test_a_stall_is_reported_by_health_and_metrics(settings):
    from litestar.testing import TestClient

    from voice.server import create_app

    engine, sink = SuddenlySlow(seconds_per_char=0.005), RecordingSink(realtime=True)
    app = create_app(settings.model_copy(update={"cache_mb": 0}), engine=engine, sink=sink)
    with TestClient(app) as client:
        service = app.state["service"]
        assert service.notifier.wait_idle(10)  # after the warm-up inferences
        assert client.post("/notify", json={"message": SENTENCES}).status_code == 202
        assert service.notifier.wait_idle(30)
        assert service.notifier.last().stalls >= 1
        health = client.get("/health").json()
        metrics = client.get("/metrics").text
    assert health["synthesis"]["stalls"] >= 1 and health["synthesis"]["recent_rtf"] > 0
    assert health["last_notification"]["stalls"] >= 1
    assert "voice_stalls_total 1.0" in metrics


def test_a_host_slower_than_speech_speaks_whole_sentences():
    """No short head when the first sound must wait for most of the message anyway."""
    slow = ToneEngine(seconds_per_char=0.002, rtf=1.5)
    notifier = Notifier(slow, RecordingSink())
    notifier.start()
    text = "The nightly build finished without errors. All good."
    notifier.submit(Notification("1", Speech(text, VOICE)))  # nothing measured yet: a head
    assert notifier.wait_idle(10)
    notifier.submit(Notification("2", Speech(text + " Again.", VOICE)))
    assert notifier.wait_idle(10)
    notifier.stop()
    texts = [t for t, _, _ in slow.calls]
    assert texts[:3] == ["The nightly build finished", "without errors.", "All good."]
    assert texts[3:] == ["The nightly build finished without errors.", "All good.", "Again."]


def test_on_a_quiet_hosts_figures_the_benchmark_message_is_not_held():
    """Figures of the quiet 2-core EPYC (docs/voice.md: about 0.15 s per call plus 0.35 s per
    audio second; Kokoro speaks about 0.07 s per character): the head plays at once."""
    from voice.playback import DURATION_UNCERTAINTY
    from voice.speech import pauses_after
    from voice.text import plan_chunks

    speed = HostSpeed(keep=0.8, half_life=0)
    for audio in (0.5, 1.6, 4.2):  # the warm-up calls
        speed.record(audio, 0.15 + 0.35 * audio)
    plan = plan_chunks(
        "The nightly build finished without errors. Three new tests were added to the suite."
    )
    estimates = [
        speed.duration(c.text, "en-us") + p / 24_000
        for c, p in zip(plan, pauses_after(plan, 24_000), strict=True)
    ]
    head = estimates[0]
    for scale in (1 - DURATION_UNCERTAINTY, 1 + DURATION_UNCERTAINTY):
        pending = [d * scale for d in estimates[1:]]
        assert start_delay(head, pending, speed.cost) == 0.0
    # while a host twice as slow is held back (about half a second here)
    slow = HostSpeed(keep=0.8, half_life=0)
    for audio in (0.5, 1.6, 4.2):
        slow.record(audio, 0.3 + 0.7 * audio)
    assert start_delay(head, estimates[1:], slow.cost) > 0.2
