"""The audio cache: instant repeats, survives restarts, bounded (LRU), safe against concurrent
writers and corrupt files (a corrupt entry is synthesized again, never played)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from voice.audio import RecordingSink
from voice.cache import AudioCache, cache_key, decode, default_cache_dir, encode
from voice.fakes import ToneEngine
from voice.metrics import VoiceMetrics
from voice.notifier import WARM_TEXTS, Notification, Notifier
from voice.pronunciation import compile_rules
from voice.speech import Speech
from voice.voices import resolve_voice

VOICE = resolve_voice("1")
RATE = 24_000


def samples(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, n).astype(np.float32)


def test_round_trip_and_every_input_changes_the_key(tmp_path):
    cache = AudioCache(tmp_path, 10 * 2**20)
    audio = samples(1000)
    key = cache_key("Build done.", "af_heart", 1.0, "en-us", "m1")
    assert cache.get(key) == (None, "miss")
    assert cache.put(key, audio, RATE)
    (got, rate), lookup = cache.get(key)
    assert lookup == "hit" and rate == RATE and np.array_equal(got, audio)
    variants = [
        cache_key("Build done!", "af_heart", 1.0, "en-us", "m1"),
        cache_key("Build done.", "af_bella", 1.0, "en-us", "m1"),
        cache_key("Build done.", "af_heart", 1.2, "en-us", "m1"),
        cache_key("Build done.", "af_heart", 1.0, "en-gb", "m1"),
        cache_key("Build done.", "af_heart", 1.0, "en-us", "m2"),
    ]
    assert len({key, *variants}) == 6


def test_default_folder_is_the_per_user_cache(tmp_path):
    assert default_cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == (
        tmp_path / "knowledge-workbench" / "voice-audio"
    )
    assert default_cache_dir({}, home=tmp_path) == tmp_path / ".cache" / "knowledge-workbench" / (
        "voice-audio"
    )


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],  # truncated
        lambda b: b[:10],  # header cut
        lambda b: b"NOTVOICE" + b[8:],  # another file
        lambda b: b[:-4] + bytes(4),  # a sample changed: checksum
        lambda b: b"",
    ],
)
def test_a_corrupt_entry_is_a_miss_and_is_deleted(tmp_path, damage):
    cache = AudioCache(tmp_path, 2**20)
    key = cache_key("x", "v", 1.0, "en-us", "m")
    cache.put(key, samples(100), RATE)
    cache.path(key).write_bytes(damage(cache.path(key).read_bytes()))
    assert cache.get(key) == (None, "corrupt")
    assert not cache.path(key).exists()
    assert decode(encode(samples(100), RATE)) is not None


def test_least_recently_used_entries_go_first(tmp_path):
    size = len(encode(samples(1000), RATE))
    cache = AudioCache(tmp_path, 2 * size)
    keys = [cache_key(str(i), "v", 1.0, "en-us", "m") for i in range(3)]
    cache.put(keys[0], samples(1000), RATE)
    time.sleep(0.01)
    cache.put(keys[1], samples(1000), RATE)
    time.sleep(0.01)
    assert cache.get(keys[0])[1] == "hit"  # used: now the most recent
    time.sleep(0.01)
    cache.put(keys[2], samples(1000), RATE)
    assert [cache.get(k)[1] for k in keys] == ["hit", "miss", "hit"]
    assert cache.stats().bytes <= 2 * size
    assert not cache.put("big", samples(10_000), RATE)  # larger than the whole cache


def test_concurrent_writers_leave_whole_entries_and_no_temporary_files(tmp_path):
    cache = AudioCache(tmp_path, 64 * 2**20)
    other = AudioCache(tmp_path, 64 * 2**20)  # a second server on the same folder
    shared = cache_key("same", "v", 1.0, "en-us", "m")
    audio = samples(50_000, seed=1)

    def write(index: int) -> None:
        target = cache if index % 2 else other
        for round_ in range(5):
            target.put(shared, audio, RATE)
            target.put(cache_key(f"{index}-{round_}", "v", 1.0, "en-us", "m"),
                       samples(2000, seed=index), RATE)  # fmt: skip
            entry, lookup = target.get(shared)
            assert lookup in ("hit", "miss") and (entry is None or np.array_equal(entry[0], audio))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert np.array_equal(cache.get(shared)[0][0], audio)
    assert cache.stats().entries == 41
    assert [p for p in Path(tmp_path).iterdir() if p.name.endswith(".tmp")] == []


def test_temporary_files_a_crashed_writer_left_are_cleaned_up_later(tmp_path):
    cache = AudioCache(tmp_path, 2**20)
    old, fresh = tmp_path / ".k.1.aa.tmp", tmp_path / ".k.2.bb.tmp"
    old.write_bytes(b"half")
    fresh.write_bytes(b"being written")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    cache.put(cache_key("x", "v", 1.0, "en-us", "m"), samples(10), RATE)
    assert not old.exists() and fresh.exists()


def test_an_unwritable_folder_is_logged_not_raised(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = AudioCache(blocker / "cache", 2**20)
    assert not cache.put("k", samples(10), RATE)
    assert "cannot write" in caplog.text
    assert cache.get("k") == (None, "miss")


# -- through the notifier ------------------------------------------------------------------


def speak(notifier: Notifier, *texts: str, **speech) -> None:
    notifier.start()
    for index, text in enumerate(texts):
        notifier.submit(Notification(str(index), Speech(text, VOICE, **speech)))
        assert notifier.wait_idle(10)
    notifier.stop()


def test_a_repeat_plays_from_the_cache_within_50_ms_and_survives_a_restart(tmp_path):
    slow = ToneEngine(seconds_per_char=0.01, rtf=0.5)
    sink, metrics = RecordingSink(), VoiceMetrics()
    notifier = Notifier(slow, sink, cache=AudioCache(tmp_path, 2**24), metrics=metrics)
    speak(
        notifier, "The build failed. Three tests are red.", "The build failed. Three tests are red."
    )
    first, repeat = notifier.outcomes
    assert (first.source, repeat.source) == ("engine", "cache")
    assert repeat.request_to_first_audio_seconds < 0.05
    assert first.request_to_first_audio_seconds > repeat.request_to_first_audio_seconds
    assert np.array_equal(sink.recordings[1].samples(), sink.recordings[0].samples())
    calls = len(slow.calls)
    # a new server (a restart) on the same folder: still a hit, no synthesis
    again = Notifier(slow, RecordingSink(), cache=AudioCache(tmp_path, 2**24))
    speak(again, "The build failed. Three tests are red.")
    assert again.last().source == "cache" and len(slow.calls) == calls
    assert metrics.cache.labels("hit")._value.get() == 1  # noqa: SLF001
    assert metrics.cache.labels("miss")._value.get() == 1  # noqa: SLF001


def test_a_corrupt_entry_is_synthesized_again_never_played(tmp_path):
    tone, sink = ToneEngine(), RecordingSink()
    cache = AudioCache(tmp_path, 2**24)
    speak(Notifier(tone, sink, cache=cache), "Deploy finished.")
    (entry,) = tmp_path.glob("*.audio")
    data = bytearray(entry.read_bytes())
    data[-8:] = b"\x7f" * 8  # loud garbage where samples were
    entry.write_bytes(bytes(data))
    calls = len(tone.calls)
    notifier = Notifier(tone, sink, cache=cache)
    speak(notifier, "Deploy finished.")
    assert notifier.last().source == "engine" and len(tone.calls) > calls
    assert np.array_equal(sink.recordings[1].samples(), sink.recordings[0].samples())
    assert cache.get(entry.stem)[1] == "hit"  # written again, whole


def test_the_key_is_the_text_after_pronunciation_rules_and_volume_is_not_in_it(tmp_path):
    tone, sink = ToneEngine(), RecordingSink()
    cache = AudioCache(tmp_path, 2**24)
    rules = compile_rules({"CI": "continuous integration"})
    notifier = Notifier(tone, sink, rules=lambda: rules, cache=cache)
    notifier.start()
    notifier.submit(Notification("1", Speech("CI passed.", VOICE, volume=1.0)))
    notifier.submit(Notification("2", Speech("continuous integration passed.", VOICE, volume=0.5)))
    notifier.submit(Notification("3", Speech("CI passed.", VOICE, speed=1.5)))
    assert notifier.wait_idle(10)
    notifier.stop()
    assert [o.source for o in notifier.outcomes] == ["engine", "cache", "engine"]
    loud, quiet = sink.recordings[0].samples(), sink.recordings[1].samples()
    assert np.allclose(quiet, loud * 0.5)


def test_a_failed_synthesis_is_not_cached(tmp_path):
    engine = ToneEngine(fail_on="boom")
    cache = AudioCache(tmp_path, 2**24)
    speak(Notifier(engine, RecordingSink(), cache=cache), "Fine. Then boom.")
    assert list(tmp_path.glob("*.audio")) == []


def test_warm_up_phrases_are_synthesized_into_the_cache_at_start(tmp_path):
    tone, sink = ToneEngine(), RecordingSink()
    cache = AudioCache(tmp_path, 2**24)
    notifier = Notifier(tone, sink, cache=cache)
    notifier.warm_up(VOICE, ["Task complete.", "Build failed.", " "])
    notifier.start()
    deadline = time.monotonic() + 5
    while len(list(tmp_path.glob("*.audio"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    notifier.submit(Notification("1", Speech("Build failed.", VOICE)))
    assert notifier.wait_idle(5)
    notifier.stop()
    assert notifier.last().source == "cache"
    assert [c[0] for c in tone.calls[:3]] == list(WARM_TEXTS)  # the engine warmed first
    assert len(list(tmp_path.glob("*.audio"))) == 2 and os.listdir(tmp_path)


def test_cache_and_queue_settings_from_the_environment(tmp_path, monkeypatch):
    from voice.settings import Settings, settings_from_env

    env = {"VOICE_WARM_PHRASES": "Task complete.| Build failed, again. ||", "VOICE_CACHE_MB": "8",
           "VOICE_CACHE_DIR": str(tmp_path), "VOICE_DEDUPE_SECONDS": "2",
           "VOICE_MAX_WAIT_SECONDS": "0"}  # fmt: skip
    settings = settings_from_env(env)
    assert settings.warm_phrases == ("Task complete.", "Build failed, again.")
    assert (settings.cache_mb, settings.resolved_cache_dir()) == (8.0, tmp_path)
    assert (settings.dedupe_seconds, settings.max_wait_seconds) == (2.0, 0.0)
    monkeypatch.setenv("VOICE_WARM_PHRASES", "One.|Two.")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    from_env = Settings()
    assert from_env.warm_phrases == ("One.", "Two.")
    assert from_env.resolved_cache_dir() == tmp_path / "xdg" / "knowledge-workbench" / "voice-audio"
    with pytest.raises(SystemExit, match="VOICE_CACHE_MB"):
        settings_from_env({"VOICE_CACHE_MB": "-1"})


def test_over_http_a_repeat_is_handed_to_the_output_within_50_ms_of_the_request(settings):
    from litestar.testing import TestClient

    from voice.server import create_app

    sink = RecordingSink()
    app = create_app(
        settings.model_copy(update={"dedupe_seconds": 0}),
        engine=ToneEngine(seconds_per_char=0.01, rtf=0.5),
        sink=sink,
    )
    message = {"message": "I need your permission to run a command."}
    with TestClient(app) as client:
        notifier = app.state["service"].notifier
        assert notifier.wait_idle(10)
        latencies = []
        for _ in range(3):
            started = time.perf_counter()
            assert client.post("/notify", json=message).status_code == 202
            assert notifier.wait_idle(10)
            latencies.append(sink.recordings[-1].chunk_times[0] - started)
        health = client.get("/health").json()
    assert latencies[0] > 0.08  # synthesized (the head alone sleeps 0.11 s) and paced
    assert max(latencies[1:]) < 0.05, latencies
    assert health["last_notification"]["source"] == "cache"
    assert health["cache"]["entries"] == 1 and health["cache"]["enabled"]
