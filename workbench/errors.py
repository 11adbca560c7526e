"""One error tree for the whole core. The service maps it to HTTP in one place.

    WorkbenchError                 base; ``kind`` is the short name shown to users
    ├── ConfigError                a setting is missing or malformed (start-up stops)
    ├── InvalidInput               a caller sent something unusable           -> 400
    ├── Forbidden                  the caller's token does not allow this      -> 403
    ├── NotFound                   the named episode/entity/fact does not exist -> 404
    ├── Conflict                   the request clashes with the current state   -> 409
    ├── QueueFull                  the extraction queue holds its cap of episodes -> 429
    ├── StoreError                 the DuckDB file cannot be opened/used        -> 503
    │   ├── StoreLocked            another process holds the database file
    │   ├── StoreFull              the disk is full: a write was not stored
    │   └── StoreUnavailable       the database server is unreachable (fails fast until back)
    ├── EmbedderError              the embedder failed or is unreachable       -> 503
    │   ├── DimensionMismatch      the embedder returns vectors of another size
    │   └── ModelMismatch          the database holds another model's vectors (start-up stops)
    └── LLMError                   a chat-completion call failed                -> 502
        ├── LLMNotConfigured       no LLM settings; episodes wait in the queue  -> 503
        ├── LLMTransientError      rate limit, timeout, connection: retryable
        │   ├── LLMRateLimited
        │   └── LLMTimeout
        └── StructuredOutputError  the reply does not conform to the requested structure
            ├── SchemaEchoError    the reply is a JSON schema instead of data
            └── TruncatedOutput    the reply was cut off (finish_reason == "length")

Every message says what was wrong and, where it helps, what to do. An error of a condition
that passes by itself carries ``retry_after``: the whole seconds after which a retry may
succeed (the service sends it as HTTP ``Retry-After``): ``QueueFull`` 60, ``StoreUnavailable``
1, ``EmbedderError`` 5 (not its mismatches); None where waiting will not help.
"""

from __future__ import annotations


class WorkbenchError(Exception):
    kind = "error"
    http_status = 500
    retry_after: int | None = None  # seconds until a retry may succeed; None: waiting won't help

    def __init__(self, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.message = message
        if retry_after is not None:
            self.retry_after = retry_after


class ConfigError(WorkbenchError):
    kind = "config_error"
    http_status = 500


class InvalidInput(WorkbenchError):
    kind = "invalid_input"
    http_status = 400


class Forbidden(WorkbenchError):
    kind = "forbidden"
    http_status = 403


class NotFound(WorkbenchError):
    kind = "not_found"
    http_status = 404


class Conflict(WorkbenchError):
    kind = "conflict"
    http_status = 409


class QueueFull(WorkbenchError):
    kind = "queue_full"
    http_status = 429
    retry_after: int | None = 60  # the queue drains at extraction's pace (seconds an episode)


class StoreError(WorkbenchError):
    kind = "store_error"
    http_status = 503


class StoreLocked(StoreError):
    kind = "store_locked"


class StoreFull(StoreError):
    kind = "disk_full"


class StoreUnavailable(StoreError):
    """The shared database server does not answer: raised at once (no waiting for it) until
    a probe finds it back."""

    kind = "store_unavailable"
    retry_after: int | None = 1  # probed every 0.5 s while down (store.availability)


class EmbedderError(WorkbenchError):
    kind = "embedder_error"
    http_status = 503
    retry_after: int | None = 5  # an embedder server restarting, or a timeout under load


class DimensionMismatch(EmbedderError):
    kind = "dimension_mismatch"
    retry_after = None  # a setting to change


class ModelMismatch(EmbedderError):
    """The database's vectors were written by another model than the configured one: two
    models' vectors are never compared (both local models have 384 dimensions, so the size
    cannot tell them apart)."""

    kind = "model_mismatch"
    retry_after = None


class LLMError(WorkbenchError):
    kind = "llm_error"
    http_status = 502


class LLMNotConfigured(LLMError):
    kind = "llm_not_configured"
    http_status = 503


class LLMTransientError(LLMError):
    kind = "llm_unavailable"
    error_type = "ConnectionError"


class LLMRateLimited(LLMTransientError):
    kind = "llm_rate_limited"
    error_type = "RateLimitError"


class LLMTimeout(LLMTransientError):
    kind = "llm_timeout"
    error_type = "TimeoutError"


class StructuredOutputError(LLMError):
    """The reply does not conform to ``structure`` (e.g. ``ExtractedEntities``)."""

    kind = "validation_error"

    def __init__(self, structure: str, detail: str):
        super().__init__(f"{structure}: {detail}")
        self.structure = structure
        self.detail = detail


class SchemaEchoError(StructuredOutputError):
    kind = "schema_echo"


class TruncatedOutput(StructuredOutputError):
    kind = "truncated_output"
