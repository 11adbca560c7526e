"""Where the Kokoro model and voices live, and whether they are there.

``scripts/fetch_voice_assets.sh`` puts them in the assets directory (checksums verified); the
server only looks. Nothing is ever downloaded at request time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shlex
from dataclasses import dataclass
from pathlib import Path

from serving.install import Copy, extra_hint, where

MODEL_FILE = "kokoro-v1.0.int8.onnx"
MODEL_SIZE = 92_361_271
MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
VOICES_FILE = "voices-v1.0.npz"
VOICES_SIZE = 28_214_398
VOICES_SHA256 = "bca610b8308e8d99f32e6fe4197e7ec01679264efed0cac9140fe9c29f1fbf7d"


def install_hint(copy: Copy | None = None) -> str:
    """How to install the engine and its files, for the running copy (a clone: its scripts;
    an installed one: the voice extra, and the files fetched once from a clone)."""
    copy = copy or where()
    elsewhere = f"or point VOICE_ASSETS_DIR at a directory holding {MODEL_FILE} and {VOICES_FILE}"
    if copy.clone is not None:
        fetch = shlex.quote(str(copy.clone / "scripts" / "fetch_voice_assets.sh"))
        return (
            f"install it with {extra_hint(copy, 'voice', 'WITH_VOICE=1')} (which also runs "
            f"`{fetch}`, the model files' fetch), {elsewhere}"
        )
    return (
        f"add the engine with {extra_hint(copy, 'voice', 'WITH_VOICE=1')}, then fetch the model "
        "files once with `scripts/fetch_voice_assets.sh` of a clone of the project (it writes "
        f"~/.cache/knowledge-workbench/voice, where this server looks), {elsewhere}"
    )


_ENGINE_MODULES = ("onnxruntime", "kokoro_onnx")


@dataclass(frozen=True)
class AssetStatus:
    model: Path
    voices: Path
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def message(self) -> str:
        """What is missing and how to install it ('' when nothing is)."""
        if self.ok:
            return ""
        return "voice backend missing: " + "; ".join(self.problems) + ". To fix, " + install_hint()


def _file_problem(path: Path, size: int) -> str | None:
    if not path.is_file():
        return f"{path} not found"
    if path.stat().st_size != size:
        return f"{path} has {path.stat().st_size} bytes, expected {size} (re-fetch it)"
    return None


def check_assets(directory: Path) -> AssetStatus:
    """Check (cheaply: presence, size, engine packages) that the engine can be loaded."""
    model, voices = directory / MODEL_FILE, directory / VOICES_FILE
    problems = [
        f"Python package {name} is not installed"
        for name in _ENGINE_MODULES
        if importlib.util.find_spec(name) is None
    ]
    problems += [
        p for p in (_file_problem(model, MODEL_SIZE), _file_problem(voices, VOICES_SIZE)) if p
    ]
    return AssetStatus(model=model, voices=voices, problems=tuple(problems))


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()
