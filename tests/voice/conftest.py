"""Fixtures for the voice server tests.

Unit and HTTP tests use ``ToneEngine`` (the real Engine protocol, no model) and a recording
sink. Tests marked with the ``kokoro`` fixture use the real model and skip, saying why, only
when the assets are absent (``scripts/fetch_voice_assets.sh`` installs them).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest

from voice.assets import check_assets
from voice.audio import AudioStatus, RecordingSink
from voice.fakes import ToneEngine
from voice.settings import Settings, settings_from_env


class GateSink(RecordingSink):
    """A recording sink whose ``play`` waits until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def play(self, chunks: Iterable[np.ndarray], sample_rate: int) -> None:
        self.entered.set()
        assert self.gate.wait(10), "test never opened the gate"
        super().play(chunks, sample_rate)

    def status(self) -> AudioStatus:
        return AudioStatus(True, "gate sink")


@pytest.fixture
def gate_sink() -> GateSink:
    return GateSink()


@pytest.fixture
def tone() -> ToneEngine:
    return ToneEngine()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        assets_dir=tmp_path / "no-assets",
        pronunciations=tmp_path / "pronunciations.json",
        cache_dir=tmp_path / "audio-cache",
        rate_per_minute=6000,
        rate_burst=1000,
        allowed_hosts=("testserver.local",),  # the name Litestar's TestClient sends
    )


def real_assets_dir() -> Path:
    return settings_from_env().resolved_assets_dir()


@pytest.fixture(scope="session")
def kokoro():
    """The real Kokoro engine, loaded once per test session."""
    status = check_assets(real_assets_dir())
    if not status.ok:
        pytest.skip(f"Kokoro assets absent ({status.message()})")
    from voice.engine import KokoroEngine

    engine = KokoroEngine(real_assets_dir(), warm_languages=())
    engine.load()
    return engine
