"""What travels on the episode path, declared: an episode as extraction reads it, an entity as
the LLM named it and resolution placed it, what an episode changes, and the prepared result the
write takes. Plus the two texts made of them (an entity's embedded text, a grown summary)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NotRequired, TypedDict

import numpy as np
from numpy.typing import NDArray


class EpisodeRow(TypedDict):
    """An episode row (``workbench.store.graph.EPISODE_COLUMNS``) as extraction reads it."""

    uuid: str
    group_id: str
    name: str
    body: str
    source: str
    source_description: str
    reference_time: datetime
    created_at: datetime
    status: str
    # the group's latest processed episodes before this one (uuid, name, body,
    # reference_time), shown to the LLM; read by Extractor.with_context
    context: NotRequired[list[dict[str, Any]]]


@dataclass
class ResolvedEntity:
    """An entity the LLM named in an episode, then resolved: to an ``existing`` row of the
    group (its ``uuid``), or new (a fresh ``uuid``, embedded while resolving: ``vector``)."""

    name: str
    name_norm: str
    entity_type: str
    summary: str
    importance: int
    stability: int
    uuid: str = ""
    existing: dict[str, Any] | None = None
    vector: NDArray[np.float32] | None = None


@dataclass
class EpisodeChanges:
    """What one episode changes in the graph."""

    new_entities: list[dict[str, Any]] = field(default_factory=list)
    new_entity_vectors: list[NDArray[np.float32]] = field(default_factory=list)  # from resolution
    summary_updates: dict[str, dict[str, Any]] = field(default_factory=dict)
    # summary updates that keep their vector (ReembedPolicy): uuid -> characters added
    kept_vectors: dict[str, int] = field(default_factory=dict)
    mentioned: list[str] = field(default_factory=list)
    new_facts: list[dict[str, Any]] = field(default_factory=list)
    # facts the episode stated that are stored already (source, target, lower-cased text):
    # the episode is recorded as one of their sources
    restated: list[tuple[str, str, str]] = field(default_factory=list)
    invalidated: list[str] = field(default_factory=list)
    # when the invalidated facts stopped being true: the earliest valid_at of the facts that
    # invalidate them (else the episode's reference time)
    invalid_from: datetime | None = None
    llm_calls: int = 0

    def reembedded(self) -> list[dict[str, Any]]:
        """The grown summaries that get a new vector, in write order."""
        return [u for uuid, u in self.summary_updates.items() if uuid not in self.kept_vectors]


@dataclass
class PreparedEpisode:
    """An episode's extraction result, ready to be written (``changes`` None: nothing to
    write, e.g. the episode was deleted while queued or is already done). ``vectors``: new
    entities, re-embedded entities, then new facts, in that order."""

    episode_uuid: str
    group_id: str = ""
    changes: EpisodeChanges | None = None
    vectors: NDArray[np.float32] | None = None
    reference_time: datetime | None = None
    name: str = ""
    body: str = ""
    created_at: datetime | None = None  # tells the episode from one re-added under its uuid

    @classmethod
    def of(
        cls, episode: EpisodeRow, changes: EpisodeChanges, vectors: NDArray[np.float32]
    ) -> PreparedEpisode:
        """What extraction prepared for ``episode``."""
        return cls(
            episode["uuid"],
            episode["group_id"],
            changes,
            vectors,
            episode["reference_time"],
            episode["name"],
            episode["body"],
            episode["created_at"],
        )


def entity_text(name: str, entity_type: str, summary: str) -> str:
    """The text embedded for an entity (ingestion and import)."""
    return f"{name} ({entity_type}): {summary}".strip()


def merge_summary(old: str, new: str, limit: int = 1200) -> str:
    """An entity's summary grown by what an episode says of it (the oldest text drops off
    past ``limit`` characters)."""
    old, new = old.strip(), new.strip()
    if not new or new.lower() in old.lower():
        return old
    if not old:
        return new[:limit]
    return f"{old} {new}"[-limit:]
