"""Optional engine: Kokoro-82M through the torch ``kokoro`` package, when its weights are local.

No package registry ships the ``.pth`` weights, so this engine is used only when the user has
them: ``kokoro-v1_0.pth`` and ``config.json`` in the assets directory (or ``VOICE_TORCH_MODEL``
and ``VOICE_TORCH_CONFIG``). Given both paths ``kokoro.KModel`` never downloads. The voices are the
same tensors as the ONNX engine's (``voices-v1.0.npz``) and the phonemes come from the same
offline phonemizers, so both engines accept the same voices and languages.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from voice.assets import VOICES_FILE
from voice.engine import SAMPLE_RATE, default_threads
from voice.errors import BackendMissing, SynthesisFailed
from voice.g2p import Phonemizers
from voice.voices import Voice

log = logging.getLogger(__name__)

TORCH_MODEL_FILE = "kokoro-v1_0.pth"
TORCH_CONFIG_FILE = "config.json"
MAX_PHONEMES = 510


def split_phonemes(phonemes: str, limit: int = MAX_PHONEMES) -> list[str]:
    """Cut a phoneme string into pieces of at most ``limit`` characters at spaces."""
    pieces: list[str] = []
    for word in phonemes.split(" "):
        if pieces and len(pieces[-1]) + 1 + len(word) <= limit:
            pieces[-1] = f"{pieces[-1]} {word}"
        else:
            pieces.extend(word[i : i + limit] for i in range(0, max(1, len(word)), limit))
    return [p for p in pieces if p.strip()]


class TorchKokoroEngine:
    name = "kokoro-torch"
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        model_path: Path,
        config_path: Path,
        voices_path: Path,
        threads: int = 0,
        phonemizers: Phonemizers | None = None,
        model: object | None = None,  # an already built kokoro.KModel (tests, notebooks)
    ) -> None:
        self.model_path, self.config_path, self.voices_path = model_path, config_path, voices_path
        self.threads = threads or default_threads()
        self.phonemizers = phonemizers or Phonemizers()
        self._model: Any = model
        self._voices: dict[str, np.ndarray] | None = None
        self._lock = threading.Lock()

    @property
    def version(self) -> str:
        """Names the weights (file name and size): part of every audio cache key."""
        try:
            size = self.model_path.stat().st_size
        except OSError:
            size = 0
        return f"kokoro-torch/{self.model_path.name}:{size}"

    @property
    def loaded(self) -> bool:
        return self._model is not None and self._voices is not None

    def missing(self) -> str:
        import importlib.util

        problems = [f"Python package {m} is not installed" for m in ("torch", "kokoro")
                    if importlib.util.find_spec(m) is None]  # fmt: skip
        paths = [self.voices_path]
        if self._model is None:
            paths += [self.model_path, self.config_path]
        problems += [f"{p} not found" for p in paths if not p.is_file()]
        if not problems:
            return ""
        return (
            "torch Kokoro engine missing: " + "; ".join(problems) + ". It needs the voice extra "
            f"(kokoro==0.9.4), and {TORCH_MODEL_FILE} + {TORCH_CONFIG_FILE} (which no "
            f"package registry ships) beside {VOICES_FILE}; or use the default ONNX engine"
        )

    def load(self) -> None:
        with self._lock:
            if self.loaded:
                return
            if problem := self.missing():
                raise BackendMissing(problem)
            import torch

            torch.set_num_threads(self.threads)
            if self._model is None:
                from kokoro import KModel

                model = KModel(repo_id="hexgrad/Kokoro-82M", config=str(self.config_path),
                               model=str(self.model_path))  # fmt: skip
                self._model = model.eval()
            with np.load(self.voices_path) as npz:
                self._voices = {name: npz[name] for name in npz.files}

    def synthesize(self, text: str, voice: Voice, speed: float = 1.0) -> np.ndarray:
        import torch

        self.load()
        assert self._voices is not None
        pack = self._voices.get(voice.name)
        if pack is None:
            raise SynthesisFailed(f"voice {voice.name} is not in {self.voices_path}")
        phonemes = self.phonemizers.phonemize(text, voice.language).strip()
        parts = []
        for piece in split_phonemes(phonemes):
            row = np.asarray(pack[min(len(piece), len(pack)) - 1], dtype=np.float32)
            style = torch.from_numpy(row)
            with torch.inference_mode():
                audio = self._model(piece, style.reshape(1, -1), speed)
            parts.append(np.asarray(audio, dtype=np.float32).reshape(-1))
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
