"""Server settings: one immutable value, built from the environment only at the edge (``main``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from voice.voices import DEFAULT_VOICE_ID

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8888


def default_assets_dir(home: Path | None = None) -> Path:
    return (home or Path.home()) / ".cache" / "knowledge-workbench" / "voice"


def default_pronunciations_path(home: Path | None = None) -> Path:
    return (home or Path.home()) / ".config" / "voice-server" / "pronunciations.json"


@dataclass(frozen=True)
class Settings:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    assets_dir: Path | None = None  # None: default_assets_dir()
    pronunciations: Path | None = None  # None: default_pronunciations_path()
    default_voice_id: str = DEFAULT_VOICE_ID
    max_message_chars: int = 5000
    queue_size: int = 16
    rate_per_minute: float = 60.0  # per client, token bucket
    rate_burst: int = 10
    threads: int = 0  # onnxruntime intra-op threads; 0 = number of CPUs (max 4)
    audio_enabled: bool = True  # False: never open an audio device (synthesize and drop)
    engine: str = "auto"  # "kokoro-onnx", "kokoro-torch", "auto" (torch if its weights are there)
    torch_model: Path | None = None  # None: <assets_dir>/kokoro-v1_0.pth
    torch_config: Path | None = None  # None: <assets_dir>/config.json
    token: str | None = None  # required (as a bearer token) when bound beyond loopback
    allowed_hosts: tuple[str, ...] = ()  # extra Host names answered (DNS-rebinding guard)
    allowed_origins: tuple[str, ...] = ()  # browser origins allowed to post
    stop_seconds: float = 30.0  # on SIGTERM: time to speak what was accepted

    def resolved_assets_dir(self) -> Path:
        return self.assets_dir or default_assets_dir()

    def resolved_pronunciations(self) -> Path:
        return self.pronunciations or default_pronunciations_path()

    def with_overrides(self, **values: object) -> Settings:
        return replace(self, **{k: v for k, v in values.items() if v is not None})


# Environment variable -> (field, converter). ``PORT`` is honoured as well as ``VOICE_PORT``.
ENVIRONMENT: dict[str, tuple[str, type]] = {
    "VOICE_HOST": ("host", str),
    "PORT": ("port", int),
    "VOICE_PORT": ("port", int),
    "VOICE_ASSETS_DIR": ("assets_dir", Path),
    "VOICE_PRONUNCIATIONS": ("pronunciations", Path),
    "VOICE_DEFAULT_ID": ("default_voice_id", str),
    "VOICE_MAX_CHARS": ("max_message_chars", int),
    "VOICE_QUEUE_SIZE": ("queue_size", int),
    "VOICE_RATE_PER_MINUTE": ("rate_per_minute", float),
    "VOICE_RATE_BURST": ("rate_burst", int),
    "VOICE_THREADS": ("threads", int),
    "VOICE_ENGINE": ("engine", str),
    "VOICE_TORCH_MODEL": ("torch_model", Path),
    "VOICE_TORCH_CONFIG": ("torch_config", Path),
    "VOICE_TOKEN": ("token", str),
    "VOICE_ALLOWED_HOSTS": ("allowed_hosts", lambda v: _names(v)),
    "VOICE_ALLOWED_ORIGINS": ("allowed_origins", lambda v: _names(v)),
    "VOICE_STOP_SECONDS": ("stop_seconds", float),
    "VOICE_AUDIO": (
        "audio_enabled",
        lambda v: v.strip().lower() not in {"0", "false", "no", "off"},
    ),
}


def _names(value: str) -> tuple[str, ...]:
    return tuple(part.strip().rstrip("/") for part in value.split(",") if part.strip())


def settings_from_env(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from environment variables (see ``ENVIRONMENT``); later names win."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for name, (field_name, convert) in ENVIRONMENT.items():
        raw = env.get(name)
        if raw not in (None, ""):
            try:
                values[field_name] = convert(raw)
            except ValueError as exc:
                raise SystemExit(f"environment variable {name}={raw!r} is invalid: {exc}") from exc
    return Settings().with_overrides(**values)
