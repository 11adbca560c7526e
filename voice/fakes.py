"""A model-free engine that speaks the real ``Engine`` protocol (for tests and demos).

``ToneEngine`` turns a text into a sine tone whose length follows the text and the speed, and
can take a configurable time per second of audio to stand in for a real model's cost.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from voice.engine import SAMPLE_RATE
from voice.errors import SynthesisFailed
from voice.voices import Voice


class ToneEngine:
    name = "tone"
    sample_rate = SAMPLE_RATE
    version = "tone/1"

    def __init__(
        self, seconds_per_char: float = 0.01, rtf: float = 0.0, fail_on: str | None = None
    ):
        self.seconds_per_char = seconds_per_char
        self.rtf = rtf  # seconds of (sleeping) work per second of audio
        self.fail_on = fail_on  # a text containing this raises SynthesisFailed
        self.calls: list[tuple[str, str, float]] = []
        self._loaded = False
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._loaded

    def missing(self) -> str:
        return ""

    def load(self) -> None:
        self._loaded = True

    def synthesize(self, text: str, voice: Voice, speed: float = 1.0) -> np.ndarray:
        self.load()
        with self._lock:
            self.calls.append((text, voice.name, speed))
        if self.fail_on and self.fail_on in text:
            raise SynthesisFailed(f"tone engine told to fail on {self.fail_on!r}")
        seconds = len(text) * self.seconds_per_char / speed
        if self.rtf:
            time.sleep(seconds * self.rtf)
        t = np.arange(int(seconds * self.sample_rate), dtype=np.float32) / self.sample_rate
        frequency = 220.0 + 10.0 * int(voice.id or 0)
        return (0.3 * np.sin(2 * np.pi * frequency * t)).astype(np.float32)
