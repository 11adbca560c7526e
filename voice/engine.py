"""Synthesis engines behind one small protocol.

``KokoroEngine`` runs Kokoro-82M (int8 ONNX) through ``kokoro-onnx`` with our own offline
phonemizers; ``voice.fakes.ToneEngine`` speaks the same protocol without a model.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from voice.assets import MODEL_SHA256, AssetStatus, check_assets
from voice.errors import BackendMissing, SynthesisFailed
from voice.g2p import Phonemizers
from voice.voices import Voice

log = logging.getLogger(__name__)

SAMPLE_RATE = 24_000
MIN_SPEED, MAX_SPEED = 0.5, 2.0


@runtime_checkable
class Engine(Protocol):
    """Turns one sentence into mono float32 samples in [-1, 1] at ``sample_rate``."""

    name: str
    sample_rate: int
    # (optional) ``version``: names the model; part of the audio cache key, so that audio of
    # another model is never played from the cache (the engine's ``name`` when absent)

    @property
    def loaded(self) -> bool: ...

    def missing(self) -> str:
        """'' when the engine can run; otherwise what is missing and how to install it."""

    def load(self) -> None:
        """Load the model now (idempotent); raise BackendMissing when it cannot be."""

    def synthesize(self, text: str, voice: Voice, speed: float = 1.0) -> np.ndarray: ...


def default_threads() -> int:
    return max(1, min(4, os.cpu_count() or 1))


class KokoroEngine:
    """Kokoro-82M through kokoro-onnx + onnxruntime (CPU), phonemes from ``Phonemizers``."""

    name = "kokoro-onnx"
    sample_rate = SAMPLE_RATE
    version = f"kokoro-onnx/{MODEL_SHA256[:16]}"  # part of every audio cache key

    def __init__(
        self,
        assets_dir: Path,
        threads: int = 0,
        phonemizers: Phonemizers | None = None,
        warm_languages: tuple[str, ...] = ("en-us",),
    ) -> None:
        self.assets_dir = assets_dir
        self.threads = threads or default_threads()
        self.phonemizers = phonemizers or Phonemizers()
        self.warm_languages = warm_languages
        self.load_seconds: float | None = None
        self.load_error = ""
        self._kokoro: Any = None  # a kokoro_onnx.Kokoro once loaded
        self._lock = threading.Lock()
        # One inference at a time, with every thread: two at once on a small host (a
        # notification and a /v1/audio/speech stream) would each run at half speed and both
        # fall behind playback; one after the other, the first is done sooner.
        self._inference = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._kokoro is not None

    def status(self) -> AssetStatus:
        return check_assets(self.assets_dir)

    def missing(self) -> str:
        return self.load_error or self.status().message()

    def load(self) -> None:
        with self._lock:
            if self._kokoro is None:
                started = time.perf_counter()
                try:
                    self._kokoro = self._open(self.status())
                except Exception as exc:  # onnxruntime raises its own types on a bad model
                    if isinstance(exc, BackendMissing):
                        raise
                    self.load_error = f"voice backend failed to load the model: {exc}"
                    raise BackendMissing(self.load_error) from exc
                for language in self.warm_languages:
                    self.phonemizers.get(language)
                self.load_seconds = time.perf_counter() - started
                log.info("kokoro loaded in %.2fs (%d threads)", self.load_seconds, self.threads)

    def _open(self, status: AssetStatus) -> Any:  # a kokoro_onnx.Kokoro
        if not status.ok:
            raise BackendMissing(status.message())
        import onnxruntime as ort
        from kokoro_onnx import Kokoro

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        # No busy-waiting between operators: the CPU is shared with playback, the phonemizers
        # and (here) other work; spinning threads measured slower under load, not faster.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(
            str(status.model), sess_options=options, providers=["CPUExecutionProvider"]
        )
        return Kokoro.from_session(session, str(status.voices))

    def phonemes(self, text: str, voice: Voice) -> str:
        return self.phonemizers.phonemize(text, voice.language)

    def synthesize(self, text: str, voice: Voice, speed: float = 1.0) -> np.ndarray:
        self.load()
        phonemes = self.phonemes(text, voice).strip()
        if not phonemes:
            return np.zeros(0, dtype=np.float32)
        try:
            with self._inference:
                audio, _ = self._kokoro.create(
                    phonemes, voice=voice.name, speed=speed, is_phonemes=True
                )
        except ValueError as exc:
            raise SynthesisFailed(
                f"cannot synthesize {text[:40]!r} with {voice.name}: {exc}"
            ) from exc
        return np.asarray(audio, dtype=np.float32)
