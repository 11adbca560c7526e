"""Real playback through PortAudio into an ALSA ``file`` PCM set in a temporary ``~/.asoundrc``.

ALSA reads its configuration when sounddevice is imported, so each case runs in a subprocess
with ``HOME`` pointing at a temporary directory. Needs the Debian package libportaudio2.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sounddevice", reason="voice extra not installed (pip install -e '.[voice]')")
if ctypes.util.find_library("portaudio") is None:
    pytest.skip("PortAudio missing: apt-get install libportaudio2", allow_module_level=True)

CAPTURE_RC = """
pcm.!default {{ type plug slave {{ pcm "capfile" format S16_LE rate 24000 channels 1 }} }}
pcm.capfile {{ type file slave.pcm "null" file "{capture}" format "wav" }}
"""
NO_DEVICE_RC = """
pcm.!default { type hw card 99 }
ctl.!default { type hw card 99 }
"""

# Plays two notifications through the real Notifier + SoundDeviceSink, keeping what the engine
# produced so the test can compare it with what ALSA captured.
SCRIPT = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    from voice.audio import SoundDeviceSink
    from voice.fakes import ToneEngine
    from voice.notifier import Notification, Notifier
    from voice.speech import Speech
    from voice.voices import resolve_voice

    out = sys.argv[1]
    sink = SoundDeviceSink()
    notifier = Notifier(ToneEngine(seconds_per_char=0.02), sink)
    notifier.start()
    speech = Speech("First one. Then two.", resolve_voice("4"), volume=0.5)
    notifier.submit(Notification("a", speech))
    assert notifier.wait_idle(30)
    notifier.stop()
    o = notifier.last()
    json.dump({"status": sink.status().__dict__, "result": o.result, "seconds": o.audio_seconds,
               "error": o.error}, open(out + ".json", "w"))
    """
)


def run_script(home: Path, rc: str) -> dict:
    (home / ".asoundrc").write_text(rc)
    env = {**os.environ, "HOME": str(home)}
    out = home / "result"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads((home / "result.json").read_text())


def expected_audio() -> np.ndarray:
    from voice.fakes import ToneEngine
    from voice.speech import Speech, sentences_for, stream_speech
    from voice.voices import resolve_voice

    speech = Speech("First one. Then two.", resolve_voice("4"), volume=0.5)
    engine = ToneEngine(seconds_per_char=0.02)
    return np.concatenate(list(stream_speech(engine, speech, sentences_for(speech.text))))


def test_captured_audio_equals_what_was_synthesized(tmp_path):
    soundfile = pytest.importorskip("soundfile")
    capture = tmp_path / "capture.wav"
    result = run_script(tmp_path, CAPTURE_RC.format(capture=capture))
    assert result["status"]["available"] is True and result["result"] == "played", result
    captured, rate = soundfile.read(capture, dtype="int16")
    expected = (expected_audio() * 32767).round().astype(np.int16)
    assert rate == 24000
    assert len(captured) >= len(expected)
    assert np.abs(captured[: len(expected)].astype(int) - expected).max() <= 1
    assert not captured[len(expected) :].any()  # anything after is silence padding
    assert result["seconds"] == pytest.approx(len(expected) / 24000)


def test_no_output_device_drops_without_crashing(tmp_path):
    result = run_script(tmp_path, NO_DEVICE_RC)
    assert result["status"]["available"] is False
    assert result["result"] == "dropped" and result["seconds"] > 0  # synthesized, then dropped
