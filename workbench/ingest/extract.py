"""Episode → entities and facts, the LLM side: two calls (three when deduplication is
ambiguous), and nothing written.

1. ``extract_entities`` lists the episode's entities with importance and stability.
2. Entities are resolved against the group's existing ones: exact normalised name first,
   then embedding similarity; only ambiguous candidates go to ``resolve_nodes`` (one call).
3. ``extract_edges`` states the facts between them, classified, and names the current facts
   they invalidate (bi-temporal: the old fact gets ``invalid_at``/``expired_at``, it is not
   deleted).

:meth:`Extractor.prepare` makes the LLM calls, reads and embeddings of one episode and returns a
:class:`~workbench.ingest.records.PreparedEpisode`; :mod:`workbench.ingest.write` writes it. The
graph is read through the search engine's rows (:class:`~workbench.ingest.reads.CachedReads`)
and its vector index (``similar``), both reached through its
:class:`~workbench.index.publish.Publisher`.
"""

from __future__ import annotations

import logging
import time
import uuid as uuidlib
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray
from pydantic import BaseModel

from workbench.clock import as_utc
from workbench.errors import LLMNotConfigured
from workbench.ingest.context import IngestContext
from workbench.ingest.reads import CachedReads, FactKey
from workbench.ingest.recent import RecentEpisodes
from workbench.ingest.records import (
    EpisodeChanges,
    EpisodeRow,
    PreparedEpisode,
    ResolvedEntity,
    entity_text,
    merge_summary,
)
from workbench.ingest.reembed import ReembedPolicy
from workbench.names import name_key, relation_name
from workbench.prompts import extract_edges, extract_entities, resolve_nodes
from workbench.store import graph as g

log = logging.getLogger("workbench.ingest.extract")

_Reply = TypeVar("_Reply", bound=BaseModel)  # the structured reply a prompt's call parses


@dataclass
class Thresholds:
    duplicate: float = 0.93  # cosine at or above: same entity, no LLM needed
    ambiguous: float = 0.80  # cosine in [ambiguous, duplicate): ask resolve_nodes

    @classmethod
    def for_baseline(cls, baseline: float) -> Thresholds:
        """The thresholds on the raw cosine of a model whose unrelated texts score
        ``baseline`` (the embedder's ``similarity_baseline``: 0 for MiniLM, 0.7 for E5, whose
        cosines crowd into 0.7-1). The defaults are on MiniLM's scale; mapped through the same
        calibration search uses, ``b + t (1 - b)``, a model whose every pair of names looks
        alike does not merge distinct entities (0.93 becomes 0.979 for E5)."""
        default = cls()
        if not baseline:
            return default
        return cls(
            duplicate=baseline + default.duplicate * (1 - baseline),
            ambiguous=baseline + default.ambiguous * (1 - baseline),
        )


class Extractor:
    """Runs the extraction prompts for one episode (see the module docstring)."""

    def __init__(
        self,
        ctx: IngestContext,
        recent: RecentEpisodes | None,
        reembed: ReembedPolicy,
        context_episodes: int = 2,
        thresholds: Thresholds | None = None,
    ):
        parts = ctx.episode_parts()
        embedder = parts.embedder
        self.store = ctx.store
        self.chat = ctx.chat
        self.embedder = embedder
        self.metrics = ctx.metrics
        self.clock = ctx.clock
        self.index = parts.publisher
        self.reads = CachedReads(parts.publisher.cached_rows)
        self.recent = recent
        self.reembed = reembed
        self.context_episodes = context_episodes
        self.thresholds = thresholds or Thresholds.for_baseline(
            float(getattr(embedder, "similarity_baseline", 0.0) or 0.0)
        )

    # --- the pipeline -------------------------------------------------------------------
    def with_context(self, episodes: list[EpisodeRow]) -> list[EpisodeRow]:
        """The episodes, each with its ``context``: its group's latest processed episodes up to
        its reference time (:func:`g.recent_episodes`), from :attr:`recent` (the store is read
        once per group, and exactly for an episode older than the ones kept)."""
        if self.recent is None or not self.context_episodes:
            return [{**e, "context": []} for e in episodes]
        contexts = self.recent.contexts(
            episodes,
            self.context_episodes,
            load=lambda groups, keep: g.latest_episodes(self.store, groups, keep),
            fallback=lambda e: g.recent_episodes(
                self.store, e["group_id"], e["reference_time"], e["uuid"], self.context_episodes
            ),
        )
        return [{**e, "context": contexts[e["uuid"]]} for e in episodes]

    def prepare(self, episode: EpisodeRow) -> PreparedEpisode:
        """The LLM calls, reads and embeddings of one episode; writes nothing to the graph.
        A ``context`` (from :meth:`with_context`) saves reading the group's recent episodes."""
        changes = EpisodeChanges()
        extracted = self._extract_entities(episode, changes)
        resolved = self._resolve(episode, extracted, changes)
        self._extract_facts(episode, resolved, changes)
        vectors = self._embed(changes)
        return PreparedEpisode.of(episode, changes, vectors)

    def _call(
        self,
        prompt_name: str,
        messages: list[dict[str, Any]],
        model: type[_Reply],
        episode_uuid: str,
        changes: EpisodeChanges,
    ) -> tuple[_Reply, float]:
        if self.chat is None:  # the queue runs extraction only with an LLM configured
            raise LLMNotConfigured("extraction needs an LLM; none is configured")
        started = time.perf_counter()
        changes.llm_calls += 1
        result = self.chat.complete(prompt_name, messages, model, episode_uuid=episode_uuid)
        return result, time.perf_counter() - started

    def _extract_entities(
        self, episode: EpisodeRow, changes: EpisodeChanges
    ) -> list[ResolvedEntity]:
        context = episode.get("context")
        if context is None:
            context = self.with_context([episode])[0]["context"]
        reply, latency = self._call(
            extract_entities.PROMPT_NAME,
            extract_entities.build_messages(episode, context),
            extract_entities.ExtractedEntities,
            episode["uuid"],
            changes,
        )
        self.metrics.record_classification("success", latency)
        unique: dict[str, ResolvedEntity] = {}
        for item in reply.entities:
            name = item.name.strip()
            key = name_key(name)
            if key and key not in unique:
                unique[key] = ResolvedEntity(
                    name, key, item.entity_type, item.summary, item.importance, item.stability
                )
        return list(unique.values())

    def _resolve(
        self, episode: EpisodeRow, extracted: list[ResolvedEntity], changes: EpisodeChanges
    ) -> list[ResolvedEntity]:
        """Set ``uuid`` (existing or new) on every extracted entity."""
        self._place(episode, extracted, changes)
        return self._apply(episode["group_id"], extracted, changes)

    def _place(
        self, episode: EpisodeRow, extracted: list[ResolvedEntity], changes: EpisodeChanges
    ) -> None:
        """Find each extracted entity's ``existing`` row in the group, if any: by exact
        normalised name, then by similarity (asking ``resolve_nodes`` when ambiguous); the
        ones left new get their ``vector``."""
        known = self.reads.entities_by_norm(episode["group_id"], [e.name_norm for e in extracted])
        pending = []
        for ent in extracted:
            ent.existing = known.get(ent.name_norm)
            if ent.existing is None:
                pending.append(ent)
        if pending:
            self._resolve_by_similarity(episode, pending, changes)

    def _apply(
        self, group: str, extracted: list[ResolvedEntity], changes: EpisodeChanges
    ) -> list[ResolvedEntity]:
        """Grow the summaries of the placed entities, create the new ones."""
        now = self.clock()
        for ent in extracted:
            if ent.existing:
                self._grow_summary(group, ent, changes)
            else:
                self._new_entity(group, ent, now, changes)
            changes.mentioned.append(ent.uuid)
        return extracted

    def _grow_summary(self, group: str, ent: ResolvedEntity, changes: EpisodeChanges) -> None:
        existing = ent.existing
        assert existing is not None  # _apply grows only the entities placed on a row
        uuid = ent.uuid = existing["uuid"]
        ent.name = existing["name"]
        ent.entity_type = existing["entity_type"]
        # two names of this episode may resolve to one entity: the second grows the summary
        # the first already grew, and the text added is their sum
        earlier = changes.summary_updates.get(uuid)
        current = earlier["summary"] if earlier else existing["summary"]
        merged = merge_summary(current, ent.summary)
        if merged == current:
            return
        changes.summary_updates[uuid] = {
            "uuid": uuid,
            "group_id": group,
            "name": ent.name,
            "entity_type": ent.entity_type,
            "summary": merged,
        }
        already_due = earlier is not None and uuid not in changes.kept_vectors
        added = min(len(merged), len(ent.summary.strip()) + 1 + changes.kept_vectors.pop(uuid, 0))
        if not already_due and not self.reembed.due(uuid, added, len(merged)):
            changes.kept_vectors[uuid] = added

    @staticmethod
    def _new_entity(
        group: str, ent: ResolvedEntity, now: datetime, changes: EpisodeChanges
    ) -> None:
        ent.uuid = str(uuidlib.uuid4())
        changes.new_entities.append(
            {
                "uuid": ent.uuid,
                "group_id": group,
                "name": ent.name,
                "name_norm": ent.name_norm,
                "entity_type": ent.entity_type,
                "summary": ent.summary,
                "created_at": now,
                "importance": ent.importance,
                "stability": ent.stability,
                "classification_status": "success",
                "lifecycle_state": "ACTIVE",
            }
        )
        assert ent.vector is not None  # embedded by _resolve_by_similarity while left new
        changes.new_entity_vectors.append(ent.vector)

    def _resolve_by_similarity(
        self, episode: EpisodeRow, pending: list[ResolvedEntity], changes: EpisodeChanges
    ) -> None:
        texts = [entity_text(e.name, e.entity_type, e.summary) for e in pending]
        vectors = self.embedder.embed(texts)
        for ent, vec in zip(pending, vectors):
            ent.vector = vec
        neighbours = self.index.similar("entity", vectors, episode["group_id"], 3)
        candidates = {u for row in neighbours for u, _ in row}
        rows = self.reads.entities_by_uuid(sorted(candidates))
        questions: list[tuple[ResolvedEntity, list[dict[str, Any]]]] = []
        for ent, row in zip(pending, neighbours):
            close = [(u, s) for u, s in row if u in rows and s >= self.thresholds.ambiguous]
            best = close[0] if close else None
            if (
                best
                and best[1] >= self.thresholds.duplicate
                and rows[best[0]]["entity_type"] == ent.entity_type
            ):
                ent.existing = rows[best[0]]
            elif close:
                questions.append((ent, [rows[u] for u, _ in close]))
        if questions:
            self._ask_resolutions(episode, questions, changes)

    def _ask_resolutions(
        self,
        episode: EpisodeRow,
        questions: list[tuple[ResolvedEntity, list[dict[str, Any]]]],
        changes: EpisodeChanges,
    ) -> None:
        payload: list[dict[str, Any]] = []
        index: dict[int, dict[str, Any]] = {}
        for qid, (ent, cands) in enumerate(questions):
            cand_ids = []
            for c in cands:
                cid = len(index)
                index[cid] = c
                cand_ids.append(
                    {
                        "id": cid,
                        "name": c["name"],
                        "entity_type": c["entity_type"],
                        "summary": c["summary"][:300],
                    }
                )
            payload.append(
                {
                    "id": qid,
                    "name": ent.name,
                    "entity_type": ent.entity_type,
                    "summary": ent.summary,
                    "candidates": cand_ids,
                }
            )
        reply, _ = self._call(
            resolve_nodes.PROMPT_NAME,
            resolve_nodes.build_messages(payload),
            resolve_nodes.NodeResolutions,
            episode["uuid"],
            changes,
        )
        for res in reply.entity_resolutions:
            if 0 <= res.id < len(questions) and res.duplicate_of in index:
                questions[res.id][0].existing = index[res.duplicate_of]

    def _extract_facts(
        self, episode: EpisodeRow, entities: list[ResolvedEntity], changes: EpisodeChanges
    ) -> None:
        if len(entities) < 2:
            return
        existing = self.reads.facts_between([e.uuid for e in entities if e.existing], 30)
        reply = self._ask_edges(episode, entities, existing, changes)
        self._keep_facts(episode, entities, reply.edges, existing, changes)

    def _ask_edges(
        self,
        episode: EpisodeRow,
        entities: list[ResolvedEntity],
        existing: list[dict[str, Any]],
        changes: EpisodeChanges,
    ) -> extract_edges.ExtractedEdges:
        """The ``extract_edges`` call: the facts between these entities, and which of the
        ``existing`` facts (numbered from 1) each invalidates."""
        shown = [{"name": e.name, "entity_type": e.entity_type} for e in entities]
        reply, latency = self._call(
            extract_edges.PROMPT_NAME,
            extract_edges.build_messages(episode, shown, existing),
            extract_edges.ExtractedEdges,
            episode["uuid"],
            changes,
        )
        self.metrics.record_classification("success", latency)
        return reply

    def _keep_facts(
        self,
        episode: EpisodeRow,
        entities: list[ResolvedEntity],
        edges: list[extract_edges.ExtractedEdge],
        existing: list[dict[str, Any]],
        changes: EpisodeChanges,
        seen: set[FactKey] | None = None,
        forget: Collection[FactKey] = frozenset(),
    ) -> None:
        """The replied edges between known entities that are not facts yet (current facts of
        the group, except the keys in ``forget``, or keys in ``seen``) become new facts."""
        by_name = {name_key(e.name): e for e in entities}
        keyed = []
        for edge in edges:
            src = by_name.get(name_key(edge.source))
            dst = by_name.get(name_key(edge.target))
            if not src or not dst or src.uuid == dst.uuid:
                log.info(
                    "episode %s: skipped a fact naming unknown entities: %s -> %s",
                    episode["uuid"],
                    edge.source,
                    edge.target,
                )
                continue
            keyed.append((fact_key(src.uuid, dst.uuid, edge.fact), edge))
        known = self.reads.existing_fact_keys(episode["group_id"], [k for k, _ in keyed])
        if seen is None:
            seen = set()
        now = self.clock()
        for key, edge in keyed:
            if (key not in known or key in forget) and key not in seen:
                seen.add(key)
                self._new_fact(episode, key, edge, existing, now, changes)
            else:  # stored already (or made by the run or this reply): stated again
                changes.restated.append(key)

    @staticmethod
    def _new_fact(
        episode: EpisodeRow,
        key: FactKey,
        edge: extract_edges.ExtractedEdge,
        existing: list[dict[str, Any]],
        now: datetime,
        changes: EpisodeChanges,
    ) -> None:
        valid_at = _parse_time(edge.valid_at)
        changes.new_facts.append(
            {
                "uuid": str(uuidlib.uuid4()),
                "group_id": episode["group_id"],
                "source_uuid": key[0],
                "target_uuid": key[1],
                "relation": relation_name(edge.relation),
                "fact": edge.fact.strip(),
                "episode_uuid": episode["uuid"],
                "created_at": now,
                "valid_at": valid_at,
                "invalid_at": _parse_time(edge.invalid_at),
                "importance": edge.importance,
                "stability": edge.stability,
                "classification_status": "success",
                "lifecycle_state": "ACTIVE",
            }
        )
        changes.invalidated += [
            existing[ref - 1]["uuid"] for ref in edge.invalidates if 1 <= ref <= len(existing)
        ]
        if edge.invalidates:
            since = valid_at or episode["reference_time"]
            if changes.invalid_from is None or since < changes.invalid_from:
                changes.invalid_from = since

    def _embed(self, changes: EpisodeChanges) -> NDArray[np.float32]:
        """Vectors in write order: new entities (already embedded while resolving them), grown
        summaries due a new vector, then new facts."""
        return self._embed_many([changes])[0]

    def _embed_many(self, all_changes: list[EpisodeChanges]) -> list[NDArray[np.float32]]:
        """:meth:`_embed` of consecutive episodes written together, in one embedding call. An
        entity whose summary several of them grow is embedded once, with its last summary
        (the write keeps only the last vector of a row)."""
        slots: list[list[str | tuple[str]]] = []  # per episode: fact texts, or (entity uuid,)
        last: dict[str, str] = {}  # entity uuid -> its last summary's text
        for changes in all_changes:
            mine: list[str | tuple[str]] = []
            for e in changes.reembedded():
                last[e["uuid"]] = entity_text(e["name"], e["entity_type"], e["summary"])
                mine.append((e["uuid"],))
            slots.append(mine + [f["fact"] for f in changes.new_facts])
        entities = list(last)
        facts = [text for mine in slots for text in mine if isinstance(text, str)]
        texts = [last[u] for u in entities] + facts
        fresh = self.embedder.embed(texts) if texts else np.zeros((0, self.embedder.dimensions))
        by_entity = dict(zip(entities, fresh[: len(entities)]))
        next_fact = iter(fresh[len(entities) :])
        out: list[NDArray[np.float32]] = []
        for changes, mine in zip(all_changes, slots):
            rows = [by_entity[s[0]] if isinstance(s, tuple) else next(next_fact) for s in mine]
            out.append(np.vstack([*changes.new_entity_vectors, *rows]).astype(np.float32)
                       if changes.new_entity_vectors or rows
                       else np.zeros((0, self.embedder.dimensions), np.float32))  # fmt: skip
        return out


def fact_key(source_uuid: str, target_uuid: str, fact: str) -> tuple[str, str, str]:
    """What makes two facts of a group the same: endpoints and text (case-insensitive)."""
    return (source_uuid, target_uuid, fact.strip().lower())


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return as_utc(value)
    except (TypeError, ValueError):
        return None
