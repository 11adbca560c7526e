"""The optional torch engine, on a tiny randomly initialised Kokoro (no registry ships weights)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from voice.engine import KokoroEngine
from voice.engine_torch import TorchKokoroEngine, split_phonemes
from voice.g2p import Phonemizers
from voice.server import default_engine
from voice.settings import Settings
from voice.voices import resolve_voice


def tiny_kokoro(directory: Path) -> tuple[Path, Path, Path]:
    """config.json for a small Kokoro, an empty state dict (random weights) and one voice."""
    torch = pytest.importorskip("torch")
    kokoro_onnx = pytest.importorskip("kokoro_onnx")
    vocab = json.loads((Path(kokoro_onnx.__file__).parent / "config.json").read_text())["vocab"]
    config = {
        "istftnet": {"upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6],
                     "gen_istft_hop_size": 5, "gen_istft_n_fft": 20,
                     "resblock_dilation_sizes": [[1, 3, 5]], "resblock_kernel_sizes": [3],
                     "upsample_initial_channel": 512},
        "dim_in": 64, "dropout": 0.2, "hidden_dim": 512, "max_conv_dim": 64, "max_dur": 4,
        "multispeaker": True, "n_layer": 1, "n_mels": 80, "n_token": 178, "style_dim": 128,
        "text_encoder_kernel_size": 5, "vocab": vocab,
        "plbert": {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64,
                   "max_position_embeddings": 512, "num_hidden_layers": 1, "dropout": 0.1},
    }  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config))
    torch.save({}, directory / "kokoro-v1_0.pth")
    rng = np.random.default_rng(0)
    voice = rng.normal(size=(510, 1, 256)).astype(np.float32)
    np.savez(directory / "voices-v1.0.npz", af_heart=voice)
    return directory / "kokoro-v1_0.pth", directory / "config.json", directory / "voices-v1.0.npz"


def test_split_phonemes():
    assert split_phonemes("ab cd ef", limit=5) == ["ab cd", "ef"]
    assert split_phonemes("abcdefgh", limit=3) == ["abc", "def", "gh"]
    assert split_phonemes("") == []


def test_torch_engine_speaks_and_follows_speed(tmp_path):
    pytest.importorskip("kokoro", reason="optional torch engine: pip install kokoro==0.9.4")
    model, config, voices = tiny_kokoro(tmp_path)
    phonemizers = Phonemizers({"en-us": lambda: lambda text: "həlˈO wˈɜɹld"})
    engine = TorchKokoroEngine(model, config, voices, threads=1, phonemizers=phonemizers)
    assert engine.missing() == "" and not engine.loaded
    voice = resolve_voice("1")
    normal = engine.synthesize("Hello world", voice, 1.0)
    fast = engine.synthesize("Hello world", voice, 2.0)
    assert engine.loaded and normal.dtype == np.float32 and np.isfinite(normal).all()
    assert 0 < len(fast) < len(normal)


def test_torch_engine_reports_what_is_missing(tmp_path):
    engine = TorchKokoroEngine(tmp_path / "m.pth", tmp_path / "c.json", tmp_path / "v.npz")
    assert "m.pth not found" in engine.missing() and "no" in engine.missing()


def test_auto_engine_prefers_torch_only_when_its_weights_are_there(tmp_path):
    settings = Settings(assets_dir=tmp_path)
    assert isinstance(default_engine(settings), KokoroEngine)
    (tmp_path / "kokoro-v1_0.pth").write_bytes(b"")
    (tmp_path / "config.json").write_text("{}")
    assert isinstance(default_engine(settings), TorchKokoroEngine)
    onnx = Settings(assets_dir=tmp_path, engine="kokoro-onnx")
    assert isinstance(default_engine(onnx), KokoroEngine)
    with pytest.raises(ValueError, match="kokoro-onnx"):  # refused when the settings are read
        Settings(engine="espeak")


def test_the_onnx_engine_warms_the_default_voices_language_too(tmp_path):
    languages = {vid: default_engine(Settings(assets_dir=tmp_path, default_voice_id=vid))
                 for vid in ("1", "21", "bf_emma", "jf_alpha", "99")}  # fmt: skip
    assert {vid: e.warm_languages for vid, e in languages.items()} == {
        "1": ("en-us",),
        "21": ("en-us", "en-gb"),
        "bf_emma": ("en-us", "en-gb"),
        "jf_alpha": ("en-us", "ja"),
        "99": ("en-us",),  # an invalid default is reported elsewhere, not here
    }
