"""Server settings: one immutable value, read from the environment (and an optional ``.env``
file) only at the edge, by :func:`settings_from_env` in ``main``.

Every field maps to ``VOICE_<FIELD NAME IN UPPER CASE>`` unless ``ENVIRONMENT`` says otherwise;
pydantic-settings does the reading and the type checks, as for the knowledge service.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from dotenv import dotenv_values
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from voice.cache import default_cache_dir
from voice.voices import DEFAULT_VOICE_ID

log = logging.getLogger("voice.settings")

ENV_PREFIX = "VOICE_"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8888
# the generic name an earlier version read; still honoured when VOICE_PORT is not set
DEPRECATED_PORT = "PORT"


def default_assets_dir(home: Path | None = None) -> Path:
    return (home or Path.home()) / ".cache" / "knowledge-workbench" / "voice"


def default_pronunciations_path(home: Path | None = None) -> Path:
    return (home or Path.home()) / ".config" / "voice-server" / "pronunciations.json"


Names = Annotated[tuple[str, ...], NoDecode]  # comma-separated in the environment, not JSON
Phrases = Annotated[tuple[str, ...], NoDecode]  # "|"-separated (a phrase may hold commas)


class Settings(BaseSettings):
    """Every setting of the voice server. Frozen: a change takes effect after a restart."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="ignore",
        case_sensitive=False,
        populate_by_name=True,
    )

    host: str = DEFAULT_HOST
    port: int = Field(default=DEFAULT_PORT, ge=0, le=65535)
    assets_dir: Path | None = None  # None: default_assets_dir()
    pronunciations: Path | None = None  # None: default_pronunciations_path()
    default_voice_id: str = Field(default=DEFAULT_VOICE_ID, validation_alias="VOICE_DEFAULT_ID")
    max_message_chars: int = Field(default=5000, gt=0, validation_alias="VOICE_MAX_CHARS")
    queue_size: int = Field(default=16, gt=0)
    rate_per_minute: float = Field(default=60.0, ge=0)  # per client, token bucket; 0: unlimited
    rate_burst: int = Field(default=10, gt=0)
    threads: int = Field(default=0, ge=0)  # onnxruntime intra-op threads; 0 = CPUs (max 4)
    # False: never open an audio device (synthesize and drop)
    audio_enabled: bool = Field(default=True, validation_alias="VOICE_AUDIO")
    # "auto": the torch engine if its weights are there, else ONNX
    engine: Literal["auto", "kokoro-onnx", "kokoro-torch"] = "auto"
    torch_model: Path | None = None  # None: <assets_dir>/kokoro-v1_0.pth
    torch_config: Path | None = None  # None: <assets_dir>/config.json
    token: str | None = None  # required (as a bearer token) when bound beyond loopback
    allowed_hosts: Names = ()  # extra Host names answered (DNS-rebinding guard)
    allowed_origins: Names = ()  # browser origins allowed to post
    stop_seconds: float = Field(default=30.0, ge=0)  # on SIGTERM: time to speak what was accepted
    cache_dir: Path | None = None  # None: default_cache_dir() (XDG_CACHE_HOME)
    cache_mb: float = Field(default=64.0, ge=0)  # audio cache bound; 0: no cache
    warm_phrases: Phrases = ()  # synthesized into the cache at start ("|"-separated)
    dedupe_seconds: float = Field(default=5.0, ge=0)  # identical messages spoken once; 0: off
    max_wait_seconds: float = Field(default=120.0, ge=0)  # older when dequeued: dropped; 0: never

    @field_validator("allowed_hosts", "allowed_origins", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip().rstrip("/") for part in value.split(",") if part.strip())
        return value

    @field_validator("warm_phrases", mode="before")
    @classmethod
    def _split_phrases(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split("|") if part.strip())
        return value

    @field_validator("token", mode="before")
    @classmethod
    def _empty_token_is_none(cls, value: Any) -> Any:
        return None if value == "" else value

    def resolved_assets_dir(self) -> Path:
        return self.assets_dir or default_assets_dir()

    def resolved_pronunciations(self) -> Path:
        return self.pronunciations or default_pronunciations_path()

    def resolved_cache_dir(self) -> Path:
        return self.cache_dir or default_cache_dir()

    def with_overrides(self, **values: object) -> Settings:
        """A copy with the given (already typed) values; ``None`` leaves a field as it is."""
        return self.model_copy(update={k: v for k, v in values.items() if v is not None})


def _env_names() -> dict[str, str]:
    """Environment variable -> field, for every setting."""
    names = {}
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names[alias if isinstance(alias, str) else ENV_PREFIX + field_name.upper()] = field_name
    return names


# Environment variable -> field name (the documented table in docs/voice.md follows it)
ENVIRONMENT: dict[str, str] = _env_names()


def unknown_settings(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """``(name, closest known name or None)`` for every ``VOICE_*`` name that is no setting."""
    known = [name[len(ENV_PREFIX) :] for name in ENVIRONMENT]
    found = []
    for name in dict.fromkeys(names):
        upper = name.upper()
        if upper.startswith(ENV_PREFIX) and upper[len(ENV_PREFIX) :] not in known:
            close = difflib.get_close_matches(upper[len(ENV_PREFIX) :], known, n=1, cutoff=0.75)
            found.append((name, ENV_PREFIX + close[0] if close else None))
    return found


def settings_from_env(
    environ: Mapping[str, str] | None = None, env_file: str | Path | None = ".env"
) -> Settings:
    """Settings from the environment and the ``.env`` file (the environment wins); a bad value
    exits with one line naming the variable. ``environ`` replaces both (tests pass a dict)."""
    file_values: dict[str, str] = {}
    if environ is None and env_file and Path(env_file).is_file():
        file_values = {k: v for k, v in dotenv_values(env_file).items() if v is not None}
    env = {**file_values, **(os.environ if environ is None else environ)}
    for name, close in unknown_settings(env):
        hint = f"; did you mean {close}?" if close else ""
        log.warning("unknown setting %s is ignored%s", name, hint)
    extra: dict[str, Any] = {}
    upper = {k.upper(): v for k, v in env.items()}
    if upper.get(DEPRECATED_PORT) and not upper.get(ENV_PREFIX + "PORT"):
        log.warning("%s is deprecated; set VOICE_PORT instead", DEPRECATED_PORT)
        extra["port"] = upper[DEPRECATED_PORT]
    try:
        if environ is not None:
            data = {ENVIRONMENT[k]: v for k, v in upper.items() if k in ENVIRONMENT and v != ""}
            return Settings.model_validate({**data, **extra})
        return Settings(_env_file=str(env_file) if file_values else None, **extra)  # type: ignore[call-arg]
    except ValidationError as exc:
        err = exc.errors()[0]
        field = str(err["loc"][0]) if err.get("loc") else "?"
        name = next((n for n, f in ENVIRONMENT.items() if f == field or n == field), field)
        if field == "port" and "port" in extra:
            name = DEPRECATED_PORT
        raw = upper.get(name.upper(), err.get("input"))
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        raise SystemExit(f"environment variable {name}={raw!r} is invalid: {msg}") from None
