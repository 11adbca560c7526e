"""What each tool returns and what an error looks like, as pydantic models: the OpenAPI schema
publishes them (``POST /tools/<name>``: 200 and every error status; over MCP the same dicts
are a tool's ``structuredContent``). The facade returns plain dicts; these models describe
them (tests check real answers against them, schemathesis checks every response against the
schema). They allow extra fields, so a field added later does not break a client that
validates against an older schema.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

State = Literal["ACTIVE", "DORMANT", "ARCHIVED", "EXPIRED", "SOFT_DELETED", "PERMANENT"]
EpisodeStatus = Literal["queued", "processing", "done", "failed"]


class Out(BaseModel):
    model_config = ConfigDict(extra="allow")


# --- errors ------------------------------------------------------------------------------------


class ErrorDetail(Out):
    type: str = Field(
        description="Machine-readable kind: invalid_input, unauthorized, forbidden, "
        "not_found, conflict, payload_too_large, unsupported_media_type, "
        "misdirected_request, rate_limited, llm_error, llm_not_configured, store_error, "
        "internal_error, ..."
    )
    message: str = Field(description="What went wrong, for a person (never a stack trace).")
    request_id: str = Field(description="The request's id, also in the server log.")


class ErrorBody(Out):
    """The body of every error response."""

    error: ErrorDetail


# --- scoring -----------------------------------------------------------------------------------


class ScoreParts(Out):
    similarity: float
    keyword: float
    freshness: float
    importance: float


class MemoryState(Out):
    group_id: str
    created_at: datetime
    lifecycle_state: State
    importance: int | None
    stability: int | None
    decay_score: float | None
    last_accessed_at: datetime | None
    access_count: int


class Scored(Out):
    score: float = Field(description="The ranking score (weighted sum of the parts).")
    score_parts: ScoreParts
    score_weights: dict[str, float]


# --- tools -------------------------------------------------------------------------------------


class AddMemoryResult(Out):
    message: str
    episode_uuid: UUID
    group_id: str
    status: EpisodeStatus
    detail: str = Field(description="Why the episode waits, or its status.")


class Node(MemoryState, Scored):
    uuid: UUID
    name: str
    entity_type: str
    summary: str


class NodesResult(Out):
    message: str
    nodes: list[Node]
    groups: list[str] = Field(
        description="The groups this answer covered (the ones named, else every group the "
        "caller may use): an empty answer is never ambiguous."
    )


class Fact(MemoryState, Scored):
    uuid: UUID
    fact: str
    relation: str
    source_node_uuid: UUID
    source_node_name: str | None
    target_node_uuid: UUID
    target_node_name: str | None
    episode_uuid: UUID | None
    valid_at: datetime | None
    invalid_at: datetime | None
    expired_at: datetime | None


class FactsResult(Out):
    message: str
    facts: list[Fact]
    groups: list[str] = Field(
        description="The groups this answer covered (the ones named, else every group the "
        "caller may use): an empty answer is never ambiguous."
    )


class RecalledFact(Fact):
    kind: Literal["fact"]
    episodes: list[UUID] = Field(description="The episodes the fact came from (none: imported).")


class RecalledPassage(MemoryState, Scored):
    kind: Literal["passage"]
    uuid: UUID
    text: str = Field(description="What was said, verbatim (a few turns, or a paragraph).")
    episode_uuid: UUID
    episode_name: str | None
    speaker: str | None = Field(description="Who spoke, when known (several: comma-separated).")
    position: int = Field(description="The passage's place in its episode, from 0.")
    reference_time: datetime


class SearchMemoryResult(Out):
    message: str
    results: list[RecalledFact | RecalledPassage] = Field(
        description="Facts and passages, best first, scored on one scale."
    )


class Episode(Out):
    uuid: UUID
    group_id: str
    name: str
    body: str
    source: str
    source_description: str
    reference_time: datetime | None
    created_at: datetime
    priority: int
    status: EpisodeStatus | None
    status_detail: str | None
    processed_at: datetime | None
    entity_count: int
    fact_count: int


class EpisodesResult(Out):
    episodes: list[Episode]
    groups: list[str] = Field(
        description="The groups this answer covered (the ones named, else every group the "
        "caller may use): an empty answer is never ambiguous."
    )


class EntityEdge(Out):
    uuid: UUID
    group_id: str
    source_uuid: UUID
    target_uuid: UUID
    source_name: str | None
    target_name: str | None
    relation: str
    fact: str
    episode_uuid: UUID | None
    created_at: datetime
    valid_at: datetime | None
    invalid_at: datetime | None
    expired_at: datetime | None
    importance: int | None
    stability: int | None
    classification_status: str | None
    decay_score: float | None
    lifecycle_state: State
    last_accessed_at: datetime | None
    access_count: int
    soft_deleted_at: datetime | None


class Message(Out):
    message: str


class DeleteEpisodeResult(Out):
    message: str
    entities_removed: int
    facts_removed: int
    passages_removed: int


class ClearGraphResult(Out):
    message: str
    episodes_removed: int
    entities_removed: int
    facts_removed: int
    passages_removed: int


class QueueCounts(Out):
    queued: int
    processing: int
    done: int
    failed: int


class StatusResult(Out):
    status: str
    database: str
    llm: dict[str, Any] = Field(description="configured, model, detail.")
    embedder: dict[str, Any] = Field(description="model, dimensions, provider.")
    graph: dict[str, int] = Field(description="episodes, entities, facts, passages, groups.")
    queue: QueueCounts
    workers_running: bool


class FailedEpisode(Out):
    episode_uuid: UUID
    group_id: str
    name: str | None
    attempts: int
    error_type: str | None
    error_message: str | None
    finished_at: datetime | None


class QueueStatusResult(Out):
    counts: QueueCounts
    depth_by_priority: dict[str, int]
    oldest_waiting_seconds: float
    failed: list[FailedEpisode] = Field(description="The 20 most recent failures.")
    workers: int
    llm_configured: bool


class RetryResult(Out):
    message: str
    episode_uuids: list[UUID]


class Transition(Out):
    from_state: State
    to_state: State
    count: int


class MaintenanceResult(Out):
    run_id: str | int | None
    status: str
    dry_run: bool
    started_at: datetime
    duration_seconds: float
    scores_updated: int
    transitions: list[Transition]
    transitions_total: int
    purged: int
    purged_detail: dict[str, int]
    memories_by_state: dict[str, int]
    memories_total: int
    decay_score_avg: float | None
    importance_avg: float | None
    stability_avg: float | None
    error: str | None


class KnowledgeHealthResult(Out):
    status: str
    decay_enabled: bool
    reason: str | None = None
    last_maintenance: Any = None
    last_run: Any = None
    last_success: Any = None
    next_scheduled: Any = None
    interval_hours: float | None = None
    memories_by_state: dict[str, int]
    memories_total: int
    awaiting_purge: int | None = None
    decay_score_avg: float | None = None
    policy: dict[str, float] | None = None
    metrics_endpoint: str | None = None


class ClassifyResult(Out):
    importance: int = Field(ge=1, le=5)
    stability: int = Field(ge=1, le=5)
    status: str = Field(description="'llm' when the LLM rated the text, else 'fallback'.")
    error: str | None = None


class ImportResult(Out):
    entities_created: int
    entities_existing: int
    facts_created: int
    facts_existing: int
    errors: list[str] = Field(description="Refused lines, with their line numbers.")
    error_count: int


class SnapshotResult(Out):
    directory: str
    tables: dict[str, str] = Field(description="Table name → Parquet file path.")


class RecoverResult(Out):
    uuid: UUID
    kind: Literal["entity", "fact"]
    from_state: State
    to_state: State
    recovered_at: datetime


class ReextractResult(Out):
    """One shape for the five answers; each adds its own fields (see the CLI docs)."""

    group_id: str
    run_id: str | None = Field(None, description="The run (absent from a dry run's estimate).")
    state: str | None = Field(None, description="running, built, promoted or discarded.")
    calls: int | dict[str, Any] | None = Field(
        None,
        description="Dry run: the predicted LLM calls; a run or a comparison: the calls it "
        "made, their tokens and USD.",
    )


class ToolTable(Out):
    tools: list[dict[str, Any]]


class GroupCounts(Out):
    group_id: str
    episodes: int
    entities: int
    facts: int


class GroupsResult(Out):
    groups: list[GroupCounts]


class TokenInfo(Out):
    name: str
    groups: list[str]
    read_only: bool
    admin: bool
    created_at: datetime
    last_used_at: datetime | None


class TokensResult(Out):
    tokens: list[TokenInfo]


class NewToken(Out):
    name: str
    groups: list[str]
    read_only: bool
    admin: bool
    token: str = Field(description="The token: shown this once, only its hash is stored.")


class RevokeResult(Message):
    name: str


RESULTS: dict[str, type[Out]] = {
    "add_memory": AddMemoryResult,
    "search_memory_nodes": NodesResult,
    "search_memory_facts": FactsResult,
    "search_memory": SearchMemoryResult,
    "get_episodes": EpisodesResult,
    "delete_episode": DeleteEpisodeResult,
    "get_entity_edge": EntityEdge,
    "delete_entity_edge": Message,
    "clear_graph": ClearGraphResult,
    "get_status": StatusResult,
    "get_queue_status": QueueStatusResult,
    "retry_failed_episodes": RetryResult,
    "run_decay_maintenance": MaintenanceResult,
    "get_knowledge_health": KnowledgeHealthResult,
    "classify_memory": ClassifyResult,
    "import_memories": ImportResult,
    "export_snapshot": SnapshotResult,
    "recover_soft_deleted": RecoverResult,
    "list_groups": GroupsResult,
    "add_token": NewToken,
    "list_tokens": TokensResult,
    "revoke_token": RevokeResult,
    "reextract": ReextractResult,
}


# the error statuses every tool route can answer, with what they mean there
ERRORS: dict[int, str] = {
    400: "Invalid arguments (the message names each wrong field).",
    401: "Missing or wrong bearer token (only when SVC_KNOWLEDGE_API_TOKEN is set).",
    403: "A browser Origin that is not allowed, or a call the token's scope does not allow "
    "(another group, a write with a read-only token, an admin tool).",
    404: "No such item (a uuid that names nothing, or an item of a group the token may not use).",
    409: "Conflict (e.g. other content under an episode uuid already used).",
    413: "The body is over the size limit.",
    415: "The body is not JSON.",
    421: "A Host name this service does not answer (DNS-rebinding protection).",
    429: "Over the rate limit (retry after the Retry-After header's seconds), or add_memory "
    "while the extraction queue holds its cap of episodes (queue_full).",
    500: "Internal error; the message names the request id of the server log line.",
    502: "The LLM failed (extraction or classification).",
    503: "The store, the embedder or the LLM is unavailable.",
}
