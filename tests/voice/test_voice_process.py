"""The ``voice-server`` command as a real process on a loopback port."""

from __future__ import annotations

import ctypes.util
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest

from voice.assets import check_assets
from voice.settings import settings_from_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command() -> list[str]:
    script = Path(sys.executable).with_name("voice-server")
    return [str(script)] if script.exists() else [sys.executable, "-m", "voice.server"]


@contextmanager
def server(home: Path, *args: str, **env: str) -> Iterator[tuple[str, float]]:
    port = free_port()
    environ = {**os.environ, "HOME": str(home), "VOICE_PORT": str(port), **env}
    started = time.perf_counter()
    proc = subprocess.Popen(
        [*command(), *args], env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.perf_counter() - started > 60:
                    raise AssertionError(
                        f"server did not start: {proc.stdout.read().decode()}"
                    ) from None
                time.sleep(0.05)
        yield url, time.perf_counter() - started
    finally:
        proc.terminate()
        proc.wait(10)


def test_starts_without_assets_and_says_so(tmp_path):
    with server(tmp_path, "--no-audio", VOICE_ASSETS_DIR=str(tmp_path / "none")) as (url, startup):
        health = httpx.get(f"{url}/health").json()
        assert health["backend_available"] is False and "fetch_voice_assets.sh" in health["message"]
        r = httpx.post(f"{url}/notify", json={"message": "hello", "voice_id": "1"})
        assert r.status_code == 503 and r.json()["status"] == "error"
    assert startup < 20


def test_refused_connection_when_not_running():
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"http://127.0.0.1:{free_port()}/notify", json={"message": "x"})


def test_notify_is_heard_on_the_host_output(tmp_path):
    """Full path: HTTP -> queue -> Kokoro -> PortAudio -> ALSA file capture."""
    if not check_assets(settings_from_env().resolved_assets_dir()).ok:
        pytest.skip("Kokoro assets absent (run scripts/fetch_voice_assets.sh)")
    soundfile = pytest.importorskip("soundfile")
    if ctypes.util.find_library("portaudio") is None:
        pytest.skip("PortAudio missing: apt-get install libportaudio2")
    capture = tmp_path / "capture.wav"
    (tmp_path / ".asoundrc").write_text(
        'pcm.!default { type plug slave { pcm "cap" format S16_LE rate 24000 channels 1 } }\n'
        f'pcm.cap {{ type file slave.pcm "null" file "{capture}" format "wav" }}\n'
    )
    assets = str(settings_from_env().resolved_assets_dir())
    with server(tmp_path, VOICE_ASSETS_DIR=assets, VOICE_THREADS="2") as (url, _):
        assert httpx.get(f"{url}/health").json()["audio_output_available"] is True
        r = httpx.post(f"{url}/notify", json={"message": "Deployment complete.", "voice_id": "21"})
        assert r.status_code == 202
        deadline = time.perf_counter() + 90
        while time.perf_counter() < deadline:
            last = httpx.get(f"{url}/health").json()["last_notification"]
            if last:
                break
            time.sleep(0.2)
    assert last["result"] == "played", last
    audio, rate = soundfile.read(capture, dtype="float32")
    assert rate == 24000 and len(audio) / rate > 0.8
    assert float(np.sqrt(np.mean(audio**2))) > 0.01
