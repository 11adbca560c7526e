"""The real engine and model: one voice per language, speed, and the full /notify path.

Skips (saying why) only when the model and voices are absent; `scripts/fetch_voice_assets.sh`
installs them.
"""

from __future__ import annotations

import numpy as np
import pytest
from litestar.testing import TestClient

from voice.audio import RecordingSink
from voice.server import create_app
from voice.voices import resolve_voice

# (voice id, text, plausible duration range in seconds at speed 1.0)
CASES = [
    ("1", "The build finished successfully.", (1.0, 4.5)),  # en-us af_heart
    ("21", "Your tea is ready in the garden.", (1.0, 4.5)),  # en-gb bf_emma
    ("29", "こんにちは。今日は良い天気です。", (1.2, 6.0)),  # ja jf_alpha
    ("34", "你好。今天天气很好。", (1.0, 6.0)),  # zh zf_xiaoxiao
    ("39", "Olá. A compilação terminou.", (1.0, 5.0)),  # pt-br pf_dora
]


def rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(audio)))) if len(audio) else 0.0


@pytest.mark.parametrize(("voice_id", "text", "bounds"), CASES, ids=[c[0] for c in CASES])
def test_each_language_speaks(kokoro, voice_id, text, bounds):
    voice = resolve_voice(voice_id)
    audio = kokoro.synthesize(text, voice)
    seconds = len(audio) / kokoro.sample_rate
    assert audio.dtype == np.float32 and np.isfinite(audio).all()
    assert bounds[0] <= seconds <= bounds[1], f"{voice.name}: {seconds:.2f}s"
    assert rms(audio) > 0.01 and np.abs(audio).max() > 0.1, f"{voice.name} is (nearly) silent"
    assert np.abs(audio).max() <= 1.0


def test_phonemes_are_real_for_each_language(kokoro):
    got = {lang: kokoro.phonemes(text, resolve_voice(vid)) for vid, text, _ in CASES
           for lang in [resolve_voice(vid).language]}  # fmt: skip
    assert all(p.strip() and "❓" not in p for p in got.values()), got
    assert "ð" in got["en-us"] or "ɪ" in got["en-us"]
    assert "↓" in got["zh"] or "→" in got["zh"]  # tone marks


def test_speed_changes_duration(kokoro):
    voice = resolve_voice("1")
    text = "Speed changes the length."
    normal = len(kokoro.synthesize(text, voice, 1.0))
    fast = len(kokoro.synthesize(text, voice, 2.0))
    slow = len(kokoro.synthesize(text, voice, 0.5))
    assert fast < 0.7 * normal < normal < 0.7 * slow, (fast, normal, slow)


def test_notify_speaks_through_the_real_engine(kokoro, settings):
    sink = RecordingSink()
    app = create_app(settings, engine=kokoro, sink=sink)
    with TestClient(app) as client:
        r = client.post(
            "/notify", json={"message": "Tests passed. Deploying now.", "voice_id": "13"}
        )
        assert r.status_code == 202
        notifier = app.state["service"].notifier
        assert notifier.wait_idle(60)
    outcome = notifier.last()
    assert outcome.result == "played" and outcome.sentences == 2
    (recording,) = sink.recordings
    assert len(recording.chunks) == 2 and rms(recording.samples()) > 0.01
    assert 1.0 < recording.seconds < 6.0
    assert outcome.first_audio_seconds < outcome.first_audio_seconds + recording.seconds


def test_streamed_head_is_short_and_keeps_all_the_speech(kokoro):
    from voice.speech import Speech, chunks_for, sentences_for, stream_speech

    text = "The nightly build finished without errors. Three new tests were added to the suite."
    speech = Speech(text, resolve_voice("1"))
    cut = list(stream_speech(kokoro, speech, chunks_for(text)))
    whole = list(stream_speech(kokoro, speech, sentences_for(text)))
    assert (len(cut), len(whole)) == (3, 2)
    assert rms(cut[0]) > 0.01 and rms(cut[1]) > 0.01
    assert len(cut[0]) < 0.75 * len(whole[0])  # the first sound needs less synthesis
    # the head and its rest say what the whole sentence said, in a little more time (the model
    # lengthens the last word of the head); the join is no longer than a gap between two words
    # (untrimmed, the chunks' quiet edges made it ~0.13 s)
    assert 1.0 < (len(cut[0]) + len(cut[1])) / len(whole[0]) < 1.3
    assert 0.01 < longest_quiet(np.concatenate(cut[:2]), kokoro.sample_rate) < 0.1
    assert len(cut[2]) == len(whole[1])


def longest_quiet(audio: np.ndarray, rate: int, frame_s: float = 0.01) -> float:
    """Longest run of 10 ms frames 40 dB below the loudest, inside the audio (not at its ends)."""
    frame = int(frame_s * rate)
    energy = np.sqrt(np.square(audio[: len(audio) // frame * frame]).reshape(-1, frame).mean(1))
    loud = np.flatnonzero(energy > energy.max() / 100)
    quiet = energy[loud[0] : loud[-1] + 1] <= energy.max() / 100
    longest = run = 0
    for q in quiet:
        run = run + 1 if q else 0
        longest = max(longest, run)
    return longest * frame_s
