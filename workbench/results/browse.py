"""What the browsing tools return (``get_group_stats``, ``list_episodes``, ``get_episode``,
``list_facts``, ``list_entities``, ``get_entity``, ``delete_entity``): pages of one group's
memories, declared like the other answers (:mod:`workbench.results`)."""

from typing import Annotated, Literal, TypedDict

from pydantic import Field

from workbench.results import Episode, EpisodeStatus, QueueCounts, State, Timestamp, Uuid

_TOTAL = Field(description="How many items the listing pages through (all pages).")


class GroupStats(TypedDict):
    group_id: str
    episodes: int
    entities: int
    facts: int
    facts_current: Annotated[int, Field(description="Facts neither invalidated nor expired.")]
    passages: int
    queue: QueueCounts
    last_activity: Annotated[
        Timestamp | None, Field(description="Latest episode stored or processed.")
    ]
    llm_cost_today_usd: Annotated[
        float, Field(description="USD of the LLM calls for the group's episodes today (UTC).")
    ]


class GroupStatsResult(TypedDict):
    groups: list[GroupStats]


class EpisodeLine(TypedDict):
    uuid: Uuid
    group_id: str
    name: str
    source: str
    source_description: str
    reference_time: Timestamp
    created_at: Timestamp
    status: EpisodeStatus | None
    status_detail: str | None
    entity_count: int
    fact_count: int
    preview: Annotated[str, Field(description="The body's first characters.")]
    body_chars: int


class EpisodePage(TypedDict):
    group_id: str
    total: Annotated[int, _TOTAL]
    offset: int
    episodes: list[EpisodeLine]


class PassageLine(TypedDict):
    uuid: Uuid
    position: int
    speaker: str | None
    text: str
    reference_time: Timestamp
    lifecycle_state: State


class EntityRef(TypedDict):
    uuid: Uuid
    name: str
    entity_type: str


class EpisodeWhole(TypedDict):
    episode: Episode
    passages: list[PassageLine]
    entities: Annotated[list[EntityRef], Field(description="The entities it mentions.")]


class FactLine(TypedDict):
    uuid: Uuid
    group_id: str
    fact: str
    relation: str
    source_uuid: Uuid
    source_name: str | None
    target_uuid: Uuid
    target_name: str | None
    valid_at: Timestamp | None
    invalid_at: Timestamp | None
    created_at: Timestamp
    expired_at: Timestamp | None
    superseded: Annotated[bool, Field(description="No longer true, or no longer believed.")]
    episode_uuid: Uuid | None
    episode_name: str | None
    episode_reference_time: Timestamp | None
    lifecycle_state: State
    importance: int
    decay_score: float


class FactPage(TypedDict):
    group_id: str
    state: Literal["current", "superseded", "all"]
    total: Annotated[int, _TOTAL]
    offset: int
    facts: list[FactLine]


class EntityLine(TypedDict):
    uuid: Uuid
    group_id: str
    name: str
    entity_type: str
    summary: str
    created_at: Timestamp
    updated_at: Timestamp
    lifecycle_state: State
    importance: int
    stability: int
    decay_score: float


class CountedEntity(EntityLine):
    fact_count: int


class EntityPage(TypedDict):
    group_id: str
    total: Annotated[int, _TOTAL]
    offset: int
    entities: list[CountedEntity]


class EpisodeRef(TypedDict):
    uuid: Uuid
    name: str
    reference_time: Timestamp


class EntityNeighbourhood(TypedDict):
    entity: EntityLine
    facts: Annotated[list[FactLine], Field(description="Facts touching it, current first.")]
    neighbours: Annotated[
        list[EntityLine], Field(description="The entities at the other ends of those facts.")
    ]
    episodes: Annotated[list[EpisodeRef], Field(description="Episodes that mention it.")]


class DeleteEntityResult(TypedDict):
    message: str
    facts_removed: int
