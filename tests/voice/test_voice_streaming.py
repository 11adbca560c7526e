"""Streaming and the playback queue, with the tone engine and a recording sink (no model)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from voice.audio import DropSink, RecordingSink
from voice.errors import QueueFull, SynthesisFailed
from voice.fakes import ToneEngine
from voice.notifier import Notification, Notifier
from voice.pronunciation import compile_rules
from voice.speech import (
    CUT_PAUSE,
    SENTENCE_PAUSE,
    Speech,
    chunks_for,
    pauses_after,
    sentences_for,
    stream_speech,
    trim_quiet_edges,
)
from voice.text import Chunk
from voice.voices import resolve_voice

VOICE = resolve_voice("1")


def test_stream_yields_one_chunk_per_sentence_in_order(tone):
    sentences = ["a" * 10, "b" * 20, "c" * 30]
    chunks = list(stream_speech(tone, Speech("", VOICE), sentences))
    pause = int(SENTENCE_PAUSE * tone.sample_rate)
    sizes = [int(n * tone.seconds_per_char * tone.sample_rate) for n in (10, 20, 30)]
    assert [len(c) for c in chunks] == [sizes[0] + pause, sizes[1] + pause, sizes[2]]
    assert [text for text, _, _ in tone.calls] == sentences


def test_each_chunk_is_followed_by_its_boundary_pause(tone):
    plan = [Chunk("a" * 10, "word"), Chunk("b" * 20, "clause"), Chunk("c" * 30), Chunk("d" * 5)]
    chunks = list(stream_speech(tone, Speech("", VOICE), plan))
    rate = tone.sample_rate
    sizes = [int(n * tone.seconds_per_char * rate) for n in (10, 20, 30, 5)]
    pauses = [int(CUT_PAUSE * rate), int(CUT_PAUSE * rate), int(SENTENCE_PAUSE * rate), 0]
    assert [len(c) for c in chunks] == [s + p for s, p in zip(sizes, pauses, strict=True)]
    assert [text for text, _, _ in tone.calls] == [c.text for c in plan]
    assert all(not c[sizes[i] :].any() for i, c in enumerate(chunks))  # the pause is silence


def test_no_pause_is_added_at_a_cut_inside_a_sentence_nor_at_the_end():
    plan = [Chunk("a", "word"), Chunk("b", "clause"), Chunk("c"), Chunk("d")]
    assert pauses_after(plan, 1000) == [0, 0, 200, 0]
    assert pauses_after([Chunk("a", "clause")], 1000) == [0]
    assert pauses_after([], 1000) == []


class PaddedTone(ToneEngine):
    """The tone engine with 0.2 s of silence on each side, like the model's trimmed chunks."""

    def synthesize(self, text, voice, speed=1.0):
        pad = np.zeros(int(0.2 * self.sample_rate), dtype=np.float32)
        return np.concatenate([pad, super().synthesize(text, voice, speed), pad])


def test_quiet_edges_are_trimmed_only_at_cuts_inside_a_sentence():
    padded = PaddedTone()
    plan = [Chunk("a" * 10, "word"), Chunk("b" * 10), Chunk("c" * 10)]
    chunks = list(stream_speech(padded, Speech("", VOICE), plan))
    rate = padded.sample_rate
    tone, pad, margin, pause = (int(x * rate) for x in (0.1, 0.2, 0.02, SENTENCE_PAUSE))
    assert [len(c) for c in chunks] == [
        pad + tone + margin,  # cut after: its quiet tail trimmed to the margin
        margin + tone + pad + pause,  # cut before: its quiet start trimmed
        pad + tone + pad,  # after a whole sentence: untouched
    ]


def test_trim_quiet_edges():
    rate = 1000
    loud = np.ones(100, dtype=np.float32)
    audio = np.concatenate([np.zeros(300), 0.001 * loud, loud, np.zeros(200)]).astype(np.float32)
    assert len(trim_quiet_edges(audio, rate, start=True, end=True)) == 20 + 100 + 20
    assert len(trim_quiet_edges(audio, rate, start=True, end=False)) == 20 + 100 + 200
    assert len(trim_quiet_edges(audio, rate, start=False, end=True)) == 400 + 100 + 20
    assert len(trim_quiet_edges(audio, rate, start=False, end=False)) == len(audio)
    silent = np.zeros(500, dtype=np.float32)
    assert len(trim_quiet_edges(silent, rate, start=True, end=True)) == 500
    assert len(trim_quiet_edges(np.zeros(0, dtype=np.float32), rate, True, True)) == 0


def test_chunks_for_applies_rules_then_cuts_a_head_off_the_first_sentence():
    rules = compile_rules({"CI": "continuous integration"})
    assert chunks_for("CI passed without any flaky tests. Deploy next.", rules) == [
        Chunk("continuous integration passed", "word"),
        Chunk("without any flaky tests.", "sentence"),
        Chunk("Deploy next.", "sentence"),
    ]


def test_first_chunk_arrives_before_the_rest_is_synthesized():
    slow = ToneEngine(seconds_per_char=0.01, rtf=1.0)  # 0.5 s of work per 50-char sentence
    started = time.perf_counter()
    stream = stream_speech(slow, Speech("", VOICE), ["x" * 50] * 4)
    next(stream)
    first = time.perf_counter() - started
    list(stream)
    total = time.perf_counter() - started
    assert first < 0.9 and total > 1.9, (first, total)


def test_stream_synthesizes_only_once_started_or_read(tone):
    stream = stream_speech(tone, Speech("", VOICE), ["One.", "Two."])
    time.sleep(0.05)
    assert tone.calls == []  # nothing runs until asked
    assert stream.start() is stream and stream.start() is stream  # idempotent
    assert len(list(stream)) == 2 and [t for t, _, _ in tone.calls] == ["One.", "Two."]
    assert list(stream) == []  # exhausted


def test_stream_closed_before_start_never_synthesizes(tone):
    stream = stream_speech(tone, Speech("", VOICE), ["One."])
    stream.close()
    assert stream.start() is stream and list(stream) == []
    time.sleep(0.05)
    assert tone.calls == []


class SlowOpenSink(RecordingSink):
    """A sink that, like a real device, takes a while to open before it reads any chunk; it
    notes whether the engine had already started on the first chunk when it finished opening."""

    def __init__(self, engine: ToneEngine) -> None:
        super().__init__()
        self.engine = engine
        self.synthesizing_while_opening: list[bool] = []

    def play(self, chunks, sample_rate: int) -> None:
        deadline = time.perf_counter() + 2.0  # "opening the device"
        while not self.engine.calls and time.perf_counter() < deadline:
            time.sleep(0.01)
        self.synthesizing_while_opening.append(bool(self.engine.calls))
        super().play(chunks, sample_rate)


def test_notifier_starts_synthesis_before_opening_the_audio_output(tone):
    sink = SlowOpenSink(tone)
    notifier = Notifier(tone, sink)
    run(notifier, note(1, "The nightly build finished without errors. All good."))
    assert sink.synthesizing_while_opening == [True]
    assert notifier.last().result == "played" and len(sink.recordings[0].chunks) == 3


def test_stream_hands_on_engine_errors(tone):
    failing = ToneEngine(fail_on="boom")
    stream = stream_speech(failing, Speech("", VOICE), ["fine.", "boom."])
    assert len(next(stream)) > 0
    with pytest.raises(SynthesisFailed, match="boom"):
        next(stream)


def test_abandoned_stream_stops_synthesizing():
    slow = ToneEngine(seconds_per_char=0.01, rtf=0.5)
    stream = stream_speech(slow, Speech("", VOICE), ["x" * 20] * 20)
    next(stream)
    stream.close()
    time.sleep(0.5)
    assert len(slow.calls) <= 4


def test_speed_and_volume_are_applied(tone):
    speech = Speech("", VOICE, speed=2.0, volume=0.5)
    (chunk,) = stream_speech(tone, speech, ["x" * 48])
    assert len(chunk) == int(48 * 0.01 / 2.0 * tone.sample_rate)
    assert np.abs(chunk).max() == pytest.approx(0.15, abs=1e-3)
    assert tone.calls == [("x" * 48, "af_heart", 2.0)]


def test_sentences_apply_pronunciation_rules():
    rules = compile_rules({"CI": "continuous integration"})
    assert sentences_for("CI passed. Deploy next.", rules) == [
        "continuous integration passed.",
        "Deploy next.",
    ]


# -- the notifier --------------------------------------------------------------------------


def run(notifier: Notifier, *notes: Notification) -> None:
    notifier.start()
    try:
        for note in notes:
            notifier.submit(note)
        assert notifier.wait_idle(10)
    finally:
        notifier.stop()


def note(i: int, text: str, **speech) -> Notification:
    return Notification(str(i), Speech(text, VOICE, **speech))


def test_notifications_play_one_at_a_time_in_order(tone):
    sink = RecordingSink(realtime=True)
    notifier = Notifier(tone, sink)
    run(notifier, *(note(i, f"Message {i}. Second sentence.") for i in range(3)))
    recordings = sink.recordings
    assert [o.id for o in notifier.outcomes] == ["0", "1", "2"]
    assert all(o.result == "played" and o.sentences == 2 for o in notifier.outcomes)
    # no overlap: each recording starts after the previous one finished
    for before, after in zip(recordings, recordings[1:], strict=False):
        assert (
            after.chunk_times[0]
            >= before.chunk_times[-1] + len(before.chunks[-1]) / before.sample_rate - 0.01
        )
    assert [t for t, _, _ in tone.calls][:2] == ["Message 0.", "Second sentence."]


def test_notifier_speaks_a_short_head_first(tone, sink):
    notifier = Notifier(tone, sink)
    run(notifier, note(1, "The nightly build finished without errors. All good."))
    assert [t for t, _, _ in tone.calls] == [
        "The nightly build finished",
        "without errors.",
        "All good.",
    ]
    outcome = notifier.last()
    assert outcome.sentences == 2
    rate, spc = tone.sample_rate, tone.seconds_per_char
    expected = [
        int(26 * spc * rate),
        int(15 * spc * rate) + int(SENTENCE_PAUSE * rate),
        int(9 * spc * rate),
    ]
    assert [len(c) for c in sink.recordings[0].chunks] == expected


def test_first_audio_latency_is_measured(tone, sink):
    notifier = Notifier(tone, sink)
    run(notifier, note(1, "Hello. World."))
    outcome = notifier.last()
    assert outcome.first_audio_seconds is not None and 0 <= outcome.first_audio_seconds < 1
    assert outcome.audio_seconds == pytest.approx(sink.recordings[0].seconds)


def test_full_queue_raises(tone):
    notifier = Notifier(tone, RecordingSink(), capacity=2)  # not started: nothing is taken
    notifier.submit(note(1, "a"))
    notifier.submit(note(2, "b"))
    with pytest.raises(QueueFull, match="2 notifications waiting"):
        notifier.submit(note(3, "c"))
    assert notifier.depth == 2


def test_no_audio_device_synthesizes_and_drops(tone, caplog):
    notifier = Notifier(tone, DropSink("no device here"))
    run(notifier, note(1, "One. Two."))
    assert notifier.last().result == "dropped"
    assert len(tone.calls) == 2  # still synthesized
    assert "audio unavailable (no device here)" in caplog.text


def test_unavailable_sink_drops(tone):
    notifier = Notifier(tone, RecordingSink(available=False))
    run(notifier, note(1, "One."))
    assert notifier.last().result == "dropped"


def test_a_failing_notification_does_not_stop_the_worker(sink):
    engine = ToneEngine(fail_on="boom")
    notifier = Notifier(engine, sink)
    run(notifier, note(1, "boom."), note(2, "fine."))
    assert [(o.id, o.result) for o in notifier.outcomes] == [("1", "failed"), ("2", "played")]
    assert "boom" in notifier.outcomes[0].error


def test_notifier_applies_current_rules(tone, sink):
    notifier = Notifier(tone, sink, rules=lambda: compile_rules({"k8s": "kubernetes"}))
    run(notifier, note(1, "k8s is up."))
    assert tone.calls[0][0] == "kubernetes is up."


def test_stop_with_a_full_queue_speaks_what_was_accepted_without_hanging(tone, gate_sink):
    notifier = Notifier(tone, gate_sink, capacity=1)
    notifier.start()
    notifier.submit(note(1, "playing"))
    assert gate_sink.entered.wait(5)
    notifier.submit(note(2, "waiting"))  # the queue is now full
    started = time.perf_counter()
    gate_sink.gate.set()
    notifier.stop(timeout=5)
    assert time.perf_counter() - started < 5
    assert [o.id for o in notifier.outcomes] == ["1", "2"]  # accepted (202), so spoken


def test_what_stop_cannot_speak_in_time_is_discarded_and_logged(tone, gate_sink, caplog):
    notifier = Notifier(tone, gate_sink, capacity=4)
    notifier.start()
    notifier.submit(note(1, "playing"))
    assert gate_sink.entered.wait(5)
    notifier.submit(note(2, "waiting"))
    notifier.submit(note(3, "waiting too"))
    started = time.perf_counter()
    notifier.stop(timeout=0.3)  # the sink never finishes the first one in time
    assert time.perf_counter() - started < 2
    assert "2 queued notification(s) discarded" in caplog.text
    gate_sink.gate.set()
