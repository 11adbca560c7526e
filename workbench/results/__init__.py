"""What the facade's tool methods return, declared once: typed dicts (``TypedDict``), so an
answer is the plain JSON-ready dict a notebook indexes and the service sends as is, and a type
checker holds the facade to its shape.

The service publishes these as its OpenAPI response schemas (``service.api.responses`` turns
each into a pydantic model); a live service's client (``service.client.live``) returns the
same types. Identifiers and timestamps travel as strings: :data:`Uuid` and :data:`Timestamp`
say which strings they are (the published schema reads ``format: uuid`` / ``date-time``).
Answers may carry fields added later: a client reads the ones it knows.
"""

from typing import Annotated, Any, Literal, NotRequired, TypedDict

from pydantic import Field

# the string kinds of the answers: the service maps them to their JSON-schema formats
Uuid = Annotated[str, "uuid"]
Timestamp = Annotated[str, "date-time"]

State = Literal["ACTIVE", "DORMANT", "ARCHIVED", "EXPIRED", "SOFT_DELETED", "PERMANENT"]
EpisodeStatus = Literal["queued", "processing", "done", "failed", "stored"]

# --- scoring -----------------------------------------------------------------------------


class ScoreParts(TypedDict):
    similarity: float
    keyword: float
    freshness: float
    importance: float
    time: NotRequired[
        Annotated[
            float,
            Field(
                description="Inside the window the query's time words name: "
                "1, falling to 0 one window length away (search_memory)."
            ),
        ]
    ]
    recency: NotRequired[
        Annotated[
            float,
            Field(
                description="How new among the candidates, 0 to 1, for a "
                "question about the present (search_memory)."
            ),
        ]
    ]


class MemoryState(TypedDict):
    group_id: str
    created_at: Timestamp
    lifecycle_state: State
    importance: int | None
    stability: int | None
    decay_score: float | None
    last_accessed_at: Timestamp | None
    access_count: int


class Scored(TypedDict):
    score: Annotated[float, Field(description="The ranking score (weighted sum of the parts).")]
    score_parts: ScoreParts
    score_weights: dict[str, float]


# --- tools -------------------------------------------------------------------------------


class AddMemoryResult(TypedDict):
    message: str
    episode_uuid: Uuid
    group_id: str
    status: EpisodeStatus
    detail: Annotated[str, Field(description="Why the episode waits, or its status.")]


class Node(Scored, MemoryState):
    uuid: Uuid
    name: str
    entity_type: str
    summary: str


# the ``note`` of an empty search of entities or facts
_UNEXTRACTED = (
    "Present when nothing was found and the searched groups have episodes not extracted yet "
    "(waiting for an LLM, or being extracted): how many, and why."
)


class NodesFound(TypedDict):
    message: str
    nodes: list[Node]
    note: NotRequired[Annotated[str, Field(description=_UNEXTRACTED)]]


# --- provenance ----------------------------------------------------------------------------


class SourcePassage(TypedDict):
    uuid: Uuid
    position: Annotated[int, Field(description="The passage's place in its episode, from 0.")]
    text: str


class SourceEpisode(TypedDict):
    episode_uuid: Uuid
    episode_name: str
    reference_time: Timestamp
    passages: Annotated[
        list[SourcePassage],
        Field(description="The passages of the episode that best say it (by shared words)."),
    ]


class ImportSource(TypedDict):
    file: str
    imported_at: Timestamp


class Sources(TypedDict):
    episodes: Annotated[
        list[SourceEpisode],
        Field(
            description="The episodes that stated it, in time order (in a search: the first "
            "and the latest two; get_sources lists all)."
        ),
    ]
    episode_count: Annotated[int, Field(description="Every episode that stated it.")]
    first_said: Timestamp | None
    last_said: Timestamp | None
    imported: Annotated[
        ImportSource | None, Field(description="The file it was imported from, and when.")
    ]
    complete: Annotated[
        bool,
        Field(description="False when episodes, or passages for lack of room, were left out."),
    ]


class Fact(Scored, MemoryState):
    uuid: Uuid
    fact: str
    relation: str
    source_node_uuid: Uuid
    source_node_name: str | None
    target_node_uuid: Uuid
    target_node_name: str | None
    episode_uuid: Uuid | None
    valid_at: Timestamp | None
    invalid_at: Timestamp | None
    expired_at: Timestamp | None
    sources: Annotated[Sources, Field(description="Where it came from (bounded in a search).")]
    superseded_by: NotRequired[
        Annotated[
            Uuid | None,
            Field(
                description="For a superseded fact, the fact that replaced it when it can "
                "be told; null for a current fact."
            ),
        ]
    ]


_OMITTED = (
    "How many superseded facts (no longer true) were left out that would have ranked among "
    "the results: ask again with include_superseded to see them."
)


class FactsFound(TypedDict):
    message: str
    facts: list[Fact]
    note: NotRequired[Annotated[str, Field(description=_UNEXTRACTED)]]
    superseded_omitted: NotRequired[Annotated[int, Field(description=_OMITTED)]]


class RecalledFact(Fact):
    kind: Literal["fact"]
    episodes: Annotated[
        list[Uuid],
        Field(description="The episodes its sources quote, in time order (none: imported)."),
    ]


class RecalledPassage(Scored, MemoryState):
    kind: Literal["passage"]
    uuid: Uuid
    text: Annotated[
        str, Field(description="What was said, verbatim (a few turns, or a paragraph).")
    ]
    episode_uuid: Uuid
    episode_name: str | None
    speaker: Annotated[
        str | None, Field(description="Who spoke, when known (several: comma-separated).")
    ]
    position: Annotated[int, Field(description="The passage's place in its episode, from 0.")]
    reference_time: Timestamp


class TimeWindow(TypedDict):
    start: Timestamp
    end: Annotated[Timestamp, Field(description="The end of the window (not in it).")]
    text: Annotated[str, Field(description="The words of the query that named it.")]


class SearchMemoryResult(TypedDict):
    message: str
    results: Annotated[
        list[RecalledFact | RecalledPassage],
        Field(description="Facts and passages, best first, scored on one scale."),
    ]
    time_window: NotRequired[
        Annotated[
            TimeWindow | None,
            Field(
                description="The window the query's time words named (it boosts the "
                "memories about it), or null."
            ),
        ]
    ]
    superseded_omitted: NotRequired[Annotated[int, Field(description=_OMITTED)]]


class Episode(TypedDict):
    uuid: Uuid
    group_id: str
    name: str
    body: str
    source: str
    source_description: str
    reference_time: Timestamp | None
    created_at: Timestamp
    priority: int
    status: EpisodeStatus | None
    status_detail: str | None
    processed_at: Timestamp | None
    entity_count: int
    fact_count: int


class EpisodesFound(TypedDict):
    episodes: list[Episode]


class EntityEdge(TypedDict):
    uuid: Uuid
    group_id: str
    source_uuid: Uuid
    target_uuid: Uuid
    source_name: str | None
    target_name: str | None
    relation: str
    fact: str
    episode_uuid: Uuid | None
    created_at: Timestamp
    valid_at: Timestamp | None
    invalid_at: Timestamp | None
    expired_at: Timestamp | None
    importance: int | None
    stability: int | None
    classification_status: str | None
    decay_score: float | None
    lifecycle_state: State
    last_accessed_at: Timestamp | None
    access_count: int
    soft_deleted_at: Timestamp | None
    sources: Sources


class SourcesResult(TypedDict):
    uuid: Uuid
    kind: Literal["fact", "entity"]
    group_id: str
    text: Annotated[str, Field(description="The fact's text, or the entity's name.")]
    sources: Sources


class TimelineEvent(TypedDict):
    event: Annotated[
        Literal["episode", "fact_valid", "fact_invalid"],
        Field(description="An episode; a fact became true; a fact stopped being true."),
    ]
    at: Timestamp
    uuid: Uuid
    group_id: str
    name: NotRequired[Annotated[str, Field(description="An episode's name.")]]
    source: NotRequired[Annotated[str, Field(description="An episode's source kind.")]]
    fact: NotRequired[str]
    relation: NotRequired[str]
    source_node_uuid: NotRequired[Uuid]
    target_node_uuid: NotRequired[Uuid]
    valid_at: NotRequired[Timestamp | None]
    invalid_at: NotRequired[Timestamp | None]
    superseded_by: NotRequired[
        Annotated[
            list[dict[str, str]],
            Field(description="The facts (uuid, fact) that superseded it, when known."),
        ]
    ]


class TimelineResult(TypedDict):
    events: Annotated[list[TimelineEvent], Field(description="In time order.")]
    next: Annotated[
        str | None, Field(description="The cursor of the next page (None: no more events).")
    ]


class Message(TypedDict):
    message: str


class DeleteEpisodeResult(TypedDict):
    message: str
    entities_removed: int
    facts_removed: int
    passages_removed: int


class ClearGraphResult(TypedDict):
    message: str
    episodes_removed: int
    entities_removed: int
    facts_removed: int
    passages_removed: int


class QueueCounts(TypedDict):
    queued: int
    processing: int
    done: int
    failed: int


class StatusResult(TypedDict):
    status: str
    database: str
    llm: Annotated[dict[str, Any], Field(description="configured, model, detail.")]
    embedder: Annotated[dict[str, Any], Field(description="model, dimensions, provider.")]
    graph: Annotated[
        dict[str, int], Field(description="episodes, entities, facts, passages, groups.")
    ]
    queue: QueueCounts
    workers_running: bool


class FailedEpisode(TypedDict):
    episode_uuid: Uuid
    group_id: str
    name: str | None
    attempts: int
    error_type: str | None
    error_message: str | None
    finished_at: Timestamp | None


class BacklogGroup(TypedDict):
    group_id: str
    passages: int
    estimated_end: Timestamp | None


class PassageBacklog(TypedDict):
    """Passages stored without a vector yet (found by their words, not yet by meaning)."""

    passages: int
    rate_per_second: Annotated[
        float | None, Field(description="Passages embedded a second lately (None: no batch yet).")
    ]
    estimated_end: Timestamp | None
    groups: Annotated[list[BacklogGroup], Field(description="Per group, the largest first.")]


class QueueStatusResult(TypedDict):
    counts: QueueCounts
    depth_by_priority: dict[str, int]
    oldest_waiting_seconds: float
    failed: Annotated[list[FailedEpisode], Field(description="The 20 most recent failures.")]
    workers: int
    llm_configured: bool
    passages_without_vector: NotRequired[PassageBacklog]


class RetryResult(TypedDict):
    message: str
    episode_uuids: list[Uuid]


class Transition(TypedDict):
    from_state: State
    to_state: State
    count: int


class MaintenanceResult(TypedDict):
    run_id: str | int | None
    status: str
    dry_run: bool
    started_at: Timestamp
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


class KnowledgeHealthResult(TypedDict):
    status: str
    decay_enabled: bool
    reason: NotRequired[str | None]
    last_maintenance: NotRequired[Any]
    last_run: NotRequired[Any]
    last_success: NotRequired[Any]
    next_scheduled: NotRequired[Any]
    interval_hours: NotRequired[float | None]
    memories_by_state: dict[str, int]
    memories_total: int
    awaiting_purge: NotRequired[int | None]
    decay_score_avg: NotRequired[float | None]
    policy: NotRequired[dict[str, float] | None]
    metrics_endpoint: NotRequired[str | None]


class ClassifyResult(TypedDict):
    importance: Annotated[int, Field(ge=1, le=5)]
    stability: Annotated[int, Field(ge=1, le=5)]
    status: Annotated[str, Field(description="'llm' when the LLM rated the text, else 'fallback'.")]
    error: NotRequired[str | None]


class ImportResult(TypedDict):
    entities_created: int
    entities_existing: int
    facts_created: int
    facts_existing: int
    errors: Annotated[list[str], Field(description="Refused lines, with their line numbers.")]
    error_count: int
    # a conversation import (format chatgpt, claude or jsonl): workbench.jobs.history
    format: NotRequired[str]
    conversations: NotRequired[int]
    episodes_created: NotRequired[int]
    episodes_existing: NotRequired[int]
    passages: NotRequired[int]
    extraction_queued: NotRequired[int]
    dry_run: NotRequired[bool]
    estimate: NotRequired[
        Annotated[
            dict[str, Any] | None,
            Field(description="With extract: the predicted LLM calls, tokens and USD."),
        ]
    ]


class SnapshotResult(TypedDict):
    directory: str
    tables: Annotated[dict[str, str], Field(description="Table name → Parquet file path.")]


class RecoverResult(TypedDict):
    uuid: Uuid
    kind: Literal["entity", "fact"]
    from_state: State
    to_state: State
    recovered_at: Timestamp


class ReextractResult(TypedDict):
    """One shape for the five answers; each adds its own fields (see the CLI docs)."""

    group_id: str
    run_id: NotRequired[
        Annotated[str | None, Field(description="The run (absent from a dry run's estimate).")]
    ]
    state: NotRequired[
        Annotated[str | None, Field(description="running, built, promoted or discarded.")]
    ]
    calls: NotRequired[
        Annotated[
            int | dict[str, Any] | None,
            Field(
                description="Dry run: the predicted LLM calls; a run or a comparison: the "
                "calls it made, their tokens and USD."
            ),
        ]
    ]


class GroupCounts(TypedDict):
    group_id: str
    episodes: int
    entities: int
    facts: int


class GroupsResult(TypedDict):
    groups: list[GroupCounts]


class TokenInfo(TypedDict):
    name: str
    groups: list[str]
    read_only: bool
    admin: bool
    created_at: Timestamp
    last_used_at: Timestamp | None


class TokensResult(TypedDict):
    tokens: list[TokenInfo]


class NewToken(TypedDict):
    name: str
    groups: list[str]
    read_only: bool
    admin: bool
    token: Annotated[str, Field(description="The token: shown this once, only its hash is stored.")]


class RevokeResult(Message):
    name: str
