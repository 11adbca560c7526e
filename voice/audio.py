"""Audio output behind one small protocol.

``SoundDeviceSink`` plays through PortAudio (``sounddevice``; Debian package ``libportaudio2``).
``RecordingSink`` keeps what it is given (tests, notebooks). ``DropSink`` discards.
A sink consumes an iterator of chunks, so playing starts with the first chunk while later ones
are still being synthesized.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from voice.errors import AudioUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AudioStatus:
    available: bool
    detail: str


@runtime_checkable
class AudioSink(Protocol):
    def status(self) -> AudioStatus: ...

    def play(self, chunks: Iterable[np.ndarray], sample_rate: int) -> None:
        """Play mono float32 chunks in order; return when the last has been heard."""


class SoundDeviceSink:
    """The host's audio output through PortAudio. Never raises on import or probe."""

    def __init__(self, device: int | str | None = None) -> None:
        self.device = device
        self._status: AudioStatus | None = None

    def status(self) -> AudioStatus:
        if self._status is None:
            self._status = self._probe()
        return self._status

    def _probe(self) -> AudioStatus:
        try:
            import sounddevice as sd
        except (ImportError, OSError) as exc:
            return AudioStatus(
                False,
                f"sounddevice/PortAudio not usable ({exc}); "
                "install the Debian package libportaudio2 and the voice extra",
            )
        try:
            info = sd.query_devices(self.device, kind="output")
        except (sd.PortAudioError, ValueError) as exc:
            return AudioStatus(False, f"no audio output device ({exc})")
        return AudioStatus(True, f"output device: {info['name']}")

    def play(self, chunks: Iterable[np.ndarray], sample_rate: int) -> None:
        if not self.status().available:
            raise AudioUnavailable(self.status().detail)
        import sounddevice as sd

        try:
            with sd.OutputStream(
                samplerate=sample_rate, channels=1, dtype="float32", device=self.device
            ) as stream:
                for chunk in chunks:
                    stream.write(np.ascontiguousarray(chunk, dtype=np.float32).reshape(-1, 1))
        except sd.PortAudioError as exc:
            self._status = None  # probe again next time: the device may have changed
            raise AudioUnavailable(f"audio output failed: {exc}") from exc


@dataclass
class Recording:
    sample_rate: int
    chunks: list[np.ndarray] = field(default_factory=list)
    chunk_times: list[float] = field(default_factory=list)  # perf_counter at each chunk

    def samples(self) -> np.ndarray:
        if not self.chunks:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(self.chunks)

    @property
    def seconds(self) -> float:
        return sum(len(c) for c in self.chunks) / self.sample_rate


class RecordingSink:
    """Keeps every chunk it plays. ``realtime=True`` takes as long as the audio lasts."""

    def __init__(self, realtime: bool = False, available: bool = True) -> None:
        self.realtime = realtime
        self.available = available
        self.recordings: list[Recording] = []
        self.done = threading.Condition()

    def status(self) -> AudioStatus:
        return AudioStatus(
            self.available, "recording sink" if self.available else "recording sink off"
        )

    def play(self, chunks: Iterable[np.ndarray], sample_rate: int) -> None:
        if not self.available:
            raise AudioUnavailable("recording sink is switched off")
        recording = Recording(sample_rate)
        for chunk in chunks:
            recording.chunks.append(np.asarray(chunk, dtype=np.float32).copy())
            recording.chunk_times.append(time.perf_counter())
            if self.realtime:
                time.sleep(len(chunk) / sample_rate)
        with self.done:
            self.recordings.append(recording)
            self.done.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Recording]:
        """Block until ``count`` recordings are complete (or the timeout passes)."""
        with self.done:
            self.done.wait_for(lambda: len(self.recordings) >= count, timeout)
            return list(self.recordings)


class DropSink:
    """No audio output: consumes (so synthesis still runs) and drops, with a log line."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def status(self) -> AudioStatus:
        return AudioStatus(False, self.reason)

    def play(self, chunks: Iterable[np.ndarray], sample_rate: int) -> None:
        samples = sum(len(chunk) for chunk in chunks)
        log.warning(
            "audio unavailable (%s): dropped %.2fs of audio", self.reason, samples / sample_rate
        )
