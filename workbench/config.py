"""Typed, frozen settings.

The environment (and an optional ``.env`` file) is read exactly once, at the edge, by
:func:`load_settings`; the core receives the resulting :class:`Settings` object (or parts of it)
explicitly. Nothing in ``workbench`` reads ``os.environ`` at import time.

Names follow the interface spec (``SVC_KNOWLEDGE_*`` plus ``LOG_LEVEL``); every field below maps
to ``SVC_KNOWLEDGE_<FIELD NAME IN UPPER CASE>`` unless it says otherwise.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse, urlsplit

from dotenv import dotenv_values
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from workbench.errors import ConfigError
from workbench.names import GROUP_ID_RULE, is_group_id

log = logging.getLogger("workbench.config")

ENV_PREFIX = "SVC_KNOWLEDGE_"
APP_DIR = "knowledge-workbench"
DB_FILE = "knowledge.duckdb"
LOCAL_EMBEDDER_MODEL = "multilingual-e5-small"


def _check_url(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError("expected an http(s) URL with a host, e.g. http://127.0.0.1:8001/v1")
    return value.rstrip("/")


class Settings(BaseSettings):
    """Every setting of the service. Frozen: a change takes effect after a restart."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        frozen=True,
        extra="ignore",
        case_sensitive=False,
        populate_by_name=True,
    )

    # --- the spec's table -------------------------------------------------------------
    llm_provider: Literal["compat"] | None = None
    model_name: str | None = None
    compat_base_url: str | None = None
    compat_api_key: SecretStr | None = None
    embedder_provider: Literal["compat", "local"] | None = None
    embedder_base_url: str | None = None
    embedder_model: str | None = None
    embedder_dimensions: int | None = Field(default=None, gt=0, le=65536)
    embedder_api_key: SecretStr | None = None  # ours: for a hosted embedder
    embedder_input_type: bool = False  # ours: send input_type query/passage (compat)
    prompt_cache_metrics_enabled: bool = True
    prompt_cache_log_requests: bool = False
    prompt_cache_enabled: bool = False
    log_level: str = Field(default="INFO", validation_alias="LOG_LEVEL")

    # --- ours: storage and servers ------------------------------------------------------
    db_path: str | None = None  # unset: knowledge.duckdb in the per-user data folder
    database_url: SecretStr | None = None  # postgresql://…: the shared store (db_path unused)
    database_pool_size: int = Field(default=8, ge=2, le=200)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    embed_server_port: int = Field(default=8001, ge=0, le=65535)
    api_token: SecretStr | None = None
    default_group_id: str = "main"
    max_episode_chars: int = Field(default=50_000, gt=0)
    inline_passages: int = Field(default=4, ge=0, le=64)  # embedded before add_memory returns
    rate_limit_per_minute: int = Field(default=600, ge=0)
    # a client must send a request's headers, then its body, within these (slow clients)
    header_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    body_timeout_seconds: float = Field(default=60.0, gt=0, le=3600)
    mcp_idle_seconds: float = Field(default=60.0, ge=0)  # the shared service after its clients

    # --- ours: exposure (who may call the servers) ----------------------------------------
    allowed_hosts: str = ""  # extra Host names the tools and /mcp answer (comma-separated)
    allowed_origins: str = ""  # browser origins allowed to call them (scheme://host[:port])
    trusted_proxies: str = ""  # their X-Forwarded-For names the client (rate limits)
    metrics_host: str = "127.0.0.1"
    metrics_token: SecretStr | None = None
    metrics_max_groups: int = Field(default=100, ge=0)

    # --- ours: LLM behaviour ------------------------------------------------------------
    llm_structured_output: Literal["json_schema", "json_object", "tool"] = "json_schema"
    llm_requests_per_minute: int = Field(default=120, ge=0)
    llm_timeout_seconds: float = Field(default=60.0, gt=0)
    llm_max_retries: int = Field(default=4, ge=0, le=20)
    llm_max_tokens: int = Field(default=4096, gt=0)
    llm_profile: Literal["hosted", "local"] = "hosted"
    price_table_path: str | None = None

    # --- ours: local embedder -----------------------------------------------------------
    local_embedder_model: str = LOCAL_EMBEDDER_MODEL
    local_embedder_threads: int = Field(default=1, ge=1, le=64)
    local_embedder_backend: Literal["onnx", "torch"] | None = None
    model_cache_dir: str | None = None

    # --- ours: queue --------------------------------------------------------------------
    queue_concurrency: int = Field(default=4, ge=1, le=256)
    queue_lease_seconds: float = Field(default=300.0, gt=0)
    queue_max_attempts: int = Field(default=6, ge=1, le=100)
    queue_poll_seconds: float = Field(default=0.5, gt=0)
    queue_batch_size: int = Field(default=16, ge=1, le=1000)
    queue_group_run: int = Field(default=16, ge=1, le=64)
    queue_max_crashes: int = Field(default=3, ge=1, le=100)
    max_queued_episodes: int = Field(default=100_000, ge=1)  # add_memory past it: 429
    # a group's LLM cost of the current UTC day that holds its episodes until tomorrow
    group_daily_budget_usd: float | None = Field(default=None, gt=0)
    audit_retention_days: float = Field(default=365.0, gt=0)  # audit_log rows kept this long

    # --- ours: extraction ---------------------------------------------------------------
    entity_reembed_fraction: float = Field(default=0.2, ge=0, le=1)

    # --- ours: decay and lifecycle (docs/decay.md) ---------------------------------------
    decay_enabled: bool = True
    decay_half_life_days: float = Field(default=180.0, gt=0)
    decay_dormant_days: float = Field(default=30.0, ge=0)
    decay_archived_days: float = Field(default=90.0, ge=0)
    decay_expire_threshold: float = Field(default=0.9, ge=0, le=1)
    decay_expire_max_importance: int = Field(default=3, ge=1, le=5)
    decay_purge_days: float = Field(default=90.0, ge=0)
    decay_permanent_min_importance: int = Field(default=4, ge=1, le=5)
    decay_permanent_min_stability: int = Field(default=4, ge=1, le=5)
    maintenance_interval_hours: float = Field(default=24.0, gt=0)
    maintenance_first_run_seconds: float = Field(default=60.0, ge=0)

    # --- ours: search -------------------------------------------------------------------
    search_weight_similarity: float = Field(default=0.60, ge=0)
    search_weight_freshness: float = Field(default=0.25, ge=0)
    search_weight_importance: float = Field(default=0.15, ge=0)
    # unset: the embedder's own (0.2 with multilingual-e5-small, else 0.3)
    search_weight_keyword: float | None = Field(default=None, ge=0)
    search_max_results: int = Field(default=100, ge=1, le=10_000)
    search_min_similarity: float = Field(default=0.0, ge=-1.0, le=1.0)
    search_follow_links: bool = True
    # a running process saves the search indexes it changed this often (0: at a stop only)
    search_save_seconds: float = Field(default=900.0, ge=0)

    @field_validator("default_group_id")
    @classmethod
    def _group(cls, value: str) -> str:
        if not is_group_id(value):
            raise ValueError(f"not a valid group name: {GROUP_ID_RULE}")
        return value

    @field_validator("compat_base_url", "embedder_base_url", mode="before")
    @classmethod
    def _urls(cls, value: Any) -> str | None:
        return _check_url(value)

    @field_validator("database_url", mode="before")
    @classmethod
    def _database_url(cls, value: Any) -> Any:
        text = value.get_secret_value() if isinstance(value, SecretStr) else value
        if text in (None, ""):
            return None
        if not str(text).startswith(("postgresql://", "postgres://")):
            raise ValueError(
                "must be a PostgreSQL URL, postgresql://user:password@host:5432/database "
                "(unset: the DuckDB file of SVC_KNOWLEDGE_DB_PATH)"
            )
        return text

    @field_validator("log_level", mode="before")
    @classmethod
    def _level(cls, value: Any) -> str:
        text = str(value or "INFO").upper()
        if text not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError("expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL")
        return text

    # --- derived views ------------------------------------------------------------------
    @property
    def llm_configured(self) -> bool:
        return bool(self.compat_base_url and self.model_name)

    @property
    def embedder_kind(self) -> Literal["compat", "local"]:
        """``compat`` when an embedder base URL is set (or asked for), else ``local``."""
        if self.embedder_provider == "local":
            return "local"
        if self.embedder_provider == "compat" or self.embedder_base_url:
            return "compat"
        return "local"

    def resolved_metrics_port(self, dev: bool = False) -> int:
        if self.metrics_port is not None:
            return self.metrics_port
        return 9091 if dev else 9090

    @staticmethod
    def _list(value: str) -> tuple[str, ...]:
        return tuple(part.strip() for part in value.split(",") if part.strip())

    @property
    def allowed_host_list(self) -> tuple[str, ...]:
        return self._list(self.allowed_hosts)

    @property
    def allowed_origin_list(self) -> tuple[str, ...]:
        return tuple(o.rstrip("/") for o in self._list(self.allowed_origins))

    @property
    def trusted_proxy_list(self) -> tuple[str, ...]:
        return self._list(self.trusted_proxies)

    def secrets(self) -> list[str]:
        """The secret values of these settings (to scrub from stored and returned text)."""
        values = (self.compat_api_key, self.embedder_api_key, self.api_token, self.metrics_token)
        found = [v.get_secret_value() for v in values if v is not None and v.get_secret_value()]
        if self.database_url is not None:
            password = urlsplit(self.database_url.get_secret_value()).password
            if password:
                found.append(password)
        return found

    def db_location(self) -> str:
        """Where the store is: the PostgreSQL URL when one is set, else the DuckDB file."""
        if self.database_url is not None and self.database_url.get_secret_value():
            return self.database_url.get_secret_value()
        if self.db_path == ":memory:":
            return self.db_path
        if not self.db_path:  # a Settings built without load_settings (which fills it in)
            return str(default_db_path(os.environ))
        return str(Path(self.db_path).expanduser())


def user_data_dir(environ: Mapping[str, str]) -> Path:
    """The per-user data folder: ``$XDG_DATA_HOME/knowledge-workbench`` (an absolute
    ``XDG_DATA_HOME`` only, as the XDG spec says), else ``~/.local/share/knowledge-workbench``."""
    xdg = environ.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / APP_DIR
    home = environ.get("HOME")
    return (Path(home) if home else Path.home()) / ".local" / "share" / APP_DIR


def default_db_path(environ: Mapping[str, str]) -> Path:
    """The database when none is configured: one per user, wherever a command runs from."""
    return user_data_dir(environ) / DB_FILE


def _env_name(loc: tuple[Any, ...]) -> str:
    field = str(loc[0]) if loc else "?"
    if field in ("log_level", "LOG_LEVEL"):
        return "LOG_LEVEL"
    return ENV_PREFIX + field.upper()


_warned: set[str] = set()


def unknown_settings(names: Iterable[str]) -> list[tuple[str, str | None]]:
    """``(name, closest known name or None)`` for every ``SVC_KNOWLEDGE_*`` name that is no
    setting (a misspelled variable would otherwise be silently ignored)."""
    known = [field.upper() for field in Settings.model_fields]
    found = []
    for name in dict.fromkeys(names):
        upper = name.upper()
        if upper.startswith(ENV_PREFIX) and upper[len(ENV_PREFIX) :] not in known:
            # compared without the shared prefix, which would make every name look close
            close = difflib.get_close_matches(upper[len(ENV_PREFIX) :], known, n=1, cutoff=0.75)
            found.append((name, ENV_PREFIX + close[0] if close else None))
    return found


def warn_unknown(names: Iterable[str]) -> None:
    """Log each unknown ``SVC_KNOWLEDGE_*`` name once per process, with the closest one."""
    for name, close in unknown_settings(names):
        if name not in _warned:
            _warned.add(name)
            hint = f"; did you mean {close}?" if close else ""
            log.warning("unknown setting %s is ignored%s", name, hint)


def _with_db_path(settings: Settings, environ: Mapping[str, str]) -> Settings:
    """No database configured (neither a file nor a URL): the per-user one."""
    if settings.db_path or settings.database_url is not None:
        return settings
    return settings.model_copy(update={"db_path": str(default_db_path(environ))})


def load_settings(
    environ: Mapping[str, str] | None = None,
    env_file: str | Path | None = ".env",
    **overrides: Any,
) -> Settings:
    """Read settings once. ``environ`` replaces the process environment (tests pass a dict).

    A bad value raises :class:`ConfigError` with one line naming the variable and what is
    expected; secrets never appear in the message.
    """
    names = list(os.environ if environ is None else environ)
    if environ is None and env_file and Path(env_file).is_file():
        names += list(dotenv_values(env_file))
    warn_unknown(names)
    try:
        if environ is not None:
            data = {
                k[len(ENV_PREFIX) :].lower(): v
                for k, v in environ.items()
                if k.upper().startswith(ENV_PREFIX)
            }
            if "LOG_LEVEL" in environ:
                data["LOG_LEVEL"] = environ["LOG_LEVEL"]
            data.update({k: v for k, v in overrides.items() if v is not None})
            return _with_db_path(Settings.model_validate(data), environ)
        clean = {k: v for k, v in overrides.items() if v is not None}
        env_file_arg = str(env_file) if env_file and Path(env_file).is_file() else None
        # pydantic-settings takes _env_file at construction; the model's signature lacks it
        settings = Settings(_env_file=env_file_arg, **clean)  # type: ignore[call-arg]
        return _with_db_path(settings, os.environ)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = _env_name(tuple(err.get("loc", ())))
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        if err.get("type") == "literal_error":
            msg = msg.replace("Input should be", "expected")
        raise ConfigError(f"{name}: {msg}") from None
