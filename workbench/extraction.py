"""Episode → entities and facts, in two LLM calls (three when deduplication is ambiguous).

1. ``extract_entities`` lists the episode's entities with importance and stability.
2. Entities are resolved against the group's existing ones: exact normalised name first,
   then embedding similarity; only ambiguous candidates go to ``resolve_nodes`` (one call).
3. ``extract_edges`` states the facts between them, classified, and names the current facts
   they invalidate (bi-temporal: the old fact gets ``invalid_at``/``expired_at``, it is not
   deleted).

:meth:`Extractor.prepare` makes the LLM calls and reads but writes nothing to the graph;
:meth:`Extractor.write` writes what one or several prepared episodes change in ONE transaction
together with marking them done, so a crash mid-episode leaves nothing behind and a redelivery
starts clean. Several episodes (of different groups: a group's episodes run one at a time)
share a transaction and its multi-row statements: DuckDB charges per statement and per commit,
not per row.
"""

from __future__ import annotations

import logging
import re
import time
import uuid as uuidlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from workbench.clock import Clock, as_utc
from workbench.embedder import Embedder
from workbench.graph_reads import GraphReads, StoreReads, publish
from workbench.metrics import Metrics
from workbench.prompts import extract_edges, extract_entities, resolve_nodes
from workbench.recent import RecentEpisodes
from workbench.reembed import ReembedPolicy
from workbench.store import Store
from workbench.store import graph as g

log = logging.getLogger("workbench.extraction")

# similar(kind, vectors, group_id, k) -> per row a list of (uuid, cosine)
SimilarFn = Callable[[str, np.ndarray, str, int], list[list[tuple[str, float]]]]
UpsertFn = Callable[[str, list[dict], np.ndarray], None]

_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")


def normalise_name(name: str) -> str:
    """Case-, whitespace- and punctuation-insensitive key for entity names."""
    return _SPACE.sub(" ", _PUNCT.sub(" ", name.casefold())).strip()


def entity_text(name: str, entity_type: str, summary: str) -> str:
    """The text embedded for an entity (shared with import)."""
    return f"{name} ({entity_type}): {summary}".strip()


def merge_summary(old: str, new: str, limit: int = 1200) -> str:
    old, new = old.strip(), new.strip()
    if not new or new.lower() in old.lower():
        return old
    if not old:
        return new[:limit]
    return f"{old} {new}"[-limit:]


@dataclass
class Thresholds:
    duplicate: float = 0.93   # cosine at or above: same entity, no LLM needed
    ambiguous: float = 0.80   # cosine in [ambiguous, duplicate): ask resolve_nodes


@dataclass
class EpisodeChanges:
    new_entities: list[dict] = field(default_factory=list)
    new_entity_vectors: list[np.ndarray] = field(default_factory=list)  # from resolution
    summary_updates: dict[str, dict] = field(default_factory=dict)
    # summary updates that keep their vector (ReembedPolicy): uuid -> characters added
    kept_vectors: dict[str, int] = field(default_factory=dict)
    mentioned: list[str] = field(default_factory=list)
    new_facts: list[dict] = field(default_factory=list)
    invalidated: list[str] = field(default_factory=list)
    llm_calls: int = 0


@dataclass
class PreparedEpisode:
    """An episode's extraction result, ready to be written (``changes`` None: nothing to
    write, e.g. the episode was deleted while queued or is already done)."""

    episode_uuid: str
    group_id: str = ""
    changes: EpisodeChanges | None = None
    vectors: np.ndarray | None = None
    reference_time: datetime | None = None
    name: str = ""
    body: str = ""
    created_at: datetime | None = None  # tells the episode from one re-added under its uuid


class Extractor:
    """Runs the extraction prompts for one episode and writes the result."""

    def __init__(
        self,
        store: Store,
        chat: Any,
        embedder: Embedder,
        metrics: Metrics,
        clock: Clock,
        similar: SimilarFn,
        on_upsert: UpsertFn | None = None,
        context_episodes: int = 2,
        thresholds: Thresholds | None = None,
        reads: GraphReads | None = None,
        resync: Callable[[], None] | None = None,
        reembed: ReembedPolicy | None = None,
    ):
        self.store = store
        self.reads = reads or StoreReads(store)
        self.chat = chat
        self.embedder = embedder
        self.metrics = metrics
        self.clock = clock
        self.similar = similar
        self.on_upsert = on_upsert
        self.resync = resync  # re-reads the search indexes when on_upsert fails after a commit
        self.context_episodes = context_episodes
        # each group's latest processed episodes, with room for some that arrive out of order
        self.recent = RecentEpisodes(2 * context_episodes) if context_episodes else None
        self.thresholds = thresholds or Thresholds()
        self.reembed = reembed if reembed is not None else ReembedPolicy()

    # --- the pipeline -------------------------------------------------------------------
    def with_context(self, episodes: list[dict]) -> list[dict]:
        """The episodes, each with its ``context``: its group's latest processed episodes up to
        its reference time (:func:`g.recent_episodes`), from :attr:`recent` (the store is read
        once per group, and exactly for an episode older than the ones kept)."""
        if self.recent is None:
            return [{**e, "context": []} for e in episodes]
        contexts = self.recent.contexts(
            episodes, self.context_episodes,
            load=lambda groups, keep: g.latest_episodes(self.store, groups, keep),
            fallback=lambda e: g.recent_episodes(
                self.store, e["group_id"], e["reference_time"], e["uuid"],
                self.context_episodes))
        return [{**e, "context": contexts[e["uuid"]]} for e in episodes]

    def forget_groups(self, group_ids: list[str]) -> None:
        """Episodes of these groups were deleted: their context is read again when needed."""
        if self.recent is not None:
            self.recent.forget(group_ids)

    def prepare(self, episode: dict) -> PreparedEpisode:
        """The LLM calls, reads and embeddings of one episode; writes nothing to the graph.
        A ``context`` key (from :meth:`with_context`) saves reading the group's recent
        episodes."""
        changes = EpisodeChanges()
        extracted = self._extract_entities(episode, changes)
        resolved = self._resolve(episode, extracted, changes)
        self._extract_facts(episode, resolved, changes)
        vectors = self._embed(changes)
        return PreparedEpisode(episode["uuid"], episode["group_id"], changes, vectors,
                               episode["reference_time"], episode["name"], episode["body"],
                               episode["created_at"])

    def _call(self, prompt_name: str, messages, model, episode_uuid: str, changes):
        started = time.perf_counter()
        changes.llm_calls += 1
        result = self.chat.complete(prompt_name, messages, model, episode_uuid=episode_uuid)
        return result, time.perf_counter() - started

    def _extract_entities(self, episode: dict, changes: EpisodeChanges) -> list[dict]:
        context = episode.get("context")
        if context is None:
            context = self.with_context([episode])[0]["context"]
        reply, latency = self._call(
            extract_entities.PROMPT_NAME,
            extract_entities.build_messages(episode, context),
            extract_entities.ExtractedEntities, episode["uuid"], changes,
        )
        self.metrics.record_classification("success", latency)
        unique: dict[str, dict] = {}
        for item in reply.entities:
            name = item.name.strip()
            key = normalise_name(name)
            if key and key not in unique:
                unique[key] = {**item.model_dump(), "name": name, "name_norm": key}
        return list(unique.values())

    def _resolve(self, episode: dict, extracted: list[dict], changes: EpisodeChanges) -> list[dict]:
        """Attach ``uuid`` (existing or new) to every extracted entity."""
        group = episode["group_id"]
        known = self.reads.entities_by_norm(group, [e["name_norm"] for e in extracted])
        pending = []
        for ent in extracted:
            hit = known.get(ent["name_norm"])
            if hit:
                ent["existing"] = hit
            else:
                pending.append(ent)
        if pending:
            self._resolve_by_similarity(episode, pending, changes)
        now = self.clock()
        for ent in extracted:
            existing = ent.get("existing")
            if existing:
                uuid = ent["uuid"] = existing["uuid"]
                ent["name"] = existing["name"]
                ent["entity_type"] = existing["entity_type"]
                # two names of this episode may resolve to one entity: the second grows
                # the summary the first already grew, and the text added is their sum
                earlier = changes.summary_updates.get(uuid)
                current = earlier["summary"] if earlier else existing["summary"]
                merged = merge_summary(current, ent["summary"])
                if merged != current:
                    changes.summary_updates[uuid] = {
                        "uuid": uuid, "group_id": group, "name": ent["name"],
                        "entity_type": ent["entity_type"], "summary": merged}
                    already_due = earlier is not None and uuid not in changes.kept_vectors
                    added = min(len(merged), len(ent["summary"].strip()) + 1
                                + changes.kept_vectors.pop(uuid, 0))
                    if not already_due and not self.reembed.due(uuid, added, len(merged)):
                        changes.kept_vectors[uuid] = added
            else:
                ent["uuid"] = str(uuidlib.uuid4())
                changes.new_entities.append({
                    "uuid": ent["uuid"], "group_id": group, "name": ent["name"],
                    "name_norm": ent["name_norm"], "entity_type": ent["entity_type"],
                    "summary": ent["summary"], "created_at": now,
                    "importance": ent["importance"], "stability": ent["stability"],
                    "classification_status": "success", "lifecycle_state": "ACTIVE",
                })
                changes.new_entity_vectors.append(ent["vector"])
            changes.mentioned.append(ent["uuid"])
        return extracted

    def _resolve_by_similarity(self, episode: dict, pending: list[dict], changes) -> None:
        texts = [entity_text(e["name"], e["entity_type"], e["summary"]) for e in pending]
        vectors = self.embedder.embed(texts)
        for ent, vec in zip(pending, vectors):
            ent["vector"] = vec
        neighbours = self.similar("entity", vectors, episode["group_id"], 3)
        candidates = {u for row in neighbours for u, _ in row}
        rows = self.reads.entities_by_uuid(sorted(candidates))
        questions = []
        for i, (ent, row) in enumerate(zip(pending, neighbours)):
            close = [(u, s) for u, s in row if u in rows and s >= self.thresholds.ambiguous]
            best = close[0] if close else None
            if best and best[1] >= self.thresholds.duplicate and \
                    rows[best[0]]["entity_type"] == ent["entity_type"]:
                ent["existing"] = rows[best[0]]
            elif close:
                questions.append((i, ent, [rows[u] for u, _ in close]))
        if questions:
            self._ask_resolutions(episode, questions, changes)

    def _ask_resolutions(self, episode: dict, questions, changes) -> None:
        payload, index = [], {}
        for qid, (_, ent, cands) in enumerate(questions):
            cand_ids = []
            for c in cands:
                cid = len(index)
                index[cid] = c
                cand_ids.append({"id": cid, "name": c["name"], "entity_type": c["entity_type"],
                                 "summary": c["summary"][:300]})
            payload.append({"id": qid, "name": ent["name"], "entity_type": ent["entity_type"],
                            "summary": ent["summary"], "candidates": cand_ids})
        reply, _ = self._call(
            resolve_nodes.PROMPT_NAME, resolve_nodes.build_messages(payload),
            resolve_nodes.NodeResolutions, episode["uuid"], changes,
        )
        for res in reply.entity_resolutions:
            if 0 <= res.id < len(questions) and res.duplicate_of in index:
                questions[res.id][1]["existing"] = index[res.duplicate_of]

    def _extract_facts(self, episode: dict, entities: list[dict], changes) -> None:
        if len(entities) < 2:
            return
        by_name = {normalise_name(e["name"]): e for e in entities}
        existing_ids = [e["uuid"] for e in entities if e.get("existing")]
        existing = self.reads.facts_between(existing_ids, 30)
        reply, latency = self._call(
            extract_edges.PROMPT_NAME,
            extract_edges.build_messages(episode, entities, existing),
            extract_edges.ExtractedEdges, episode["uuid"], changes,
        )
        self.metrics.record_classification("success", latency)
        now = self.clock()
        keyed = []
        for edge in reply.edges:
            src = by_name.get(normalise_name(edge.source))
            dst = by_name.get(normalise_name(edge.target))
            if not src or not dst or src["uuid"] == dst["uuid"]:
                log.info("episode %s: skipped a fact naming unknown entities: %s -> %s",
                         episode["uuid"], edge.source, edge.target)
                continue
            keyed.append(((src["uuid"], dst["uuid"], edge.fact.strip().lower()), edge, src, dst))
        seen = self.reads.existing_fact_keys(episode["group_id"], [k for k, *_ in keyed])
        for key, edge, src, dst in keyed:
            if key in seen:
                continue
            seen.add(key)
            valid_at = _parse_time(edge.valid_at)
            changes.new_facts.append({
                "uuid": str(uuidlib.uuid4()), "group_id": episode["group_id"],
                "source_uuid": src["uuid"], "target_uuid": dst["uuid"],
                "relation": _relation(edge.relation), "fact": edge.fact.strip(),
                "episode_uuid": episode["uuid"], "created_at": now, "valid_at": valid_at,
                "invalid_at": _parse_time(edge.invalid_at), "importance": edge.importance,
                "stability": edge.stability, "classification_status": "success",
                "lifecycle_state": "ACTIVE",
            })
            for ref in edge.invalidates:
                if 1 <= ref <= len(existing):
                    changes.invalidated.append(existing[ref - 1]["uuid"])
            if edge.invalidates:
                changes.new_facts[-1]["_invalid_from"] = valid_at or episode["reference_time"]

    def _embed(self, changes: EpisodeChanges) -> np.ndarray:
        """Vectors in write order: new entities (already embedded while resolving them), grown
        summaries due a new vector, then new facts."""
        texts = [entity_text(e["name"], e["entity_type"], e["summary"])
                 for e in _reembedded(changes)]
        texts += [f["fact"] for f in changes.new_facts]
        fresh = self.embedder.embed(texts) if texts else np.zeros((0, self.embedder.dimensions))
        return np.vstack([*changes.new_entity_vectors, fresh]).astype(np.float32)

    def write(self, items: list[PreparedEpisode],
              also: Callable[[], None] | None = None) -> list[PreparedEpisode]:
        """Write the prepared episodes in one transaction (with ``also()``, e.g. the queue's
        acknowledgement), then update the search indexes; returns those written. An episode
        that is already done (written by an earlier delivery) or was deleted meanwhile (even if
        added again under its uuid) writes nothing."""
        now = self.clock()
        # one result per episode (a second one would write its entities and facts twice)
        items = list({i.episode_uuid: i for i in items if i.changes is not None}.values())
        rows = _Rows.of(items, self.embedder.dimensions)
        model = self.embedder.model
        with self.store.transaction():
            pending = g.unprocessed_episodes(self.store, [i.episode_uuid for i in items])
            current = [item for item in items if item.episode_uuid in pending
                       and pending[item.episode_uuid] == item.created_at]
            if len(current) < len(items):  # done, deleted, or deleted and added again
                items = current
                rows = _Rows.of(items, self.embedder.dimensions)
            g.insert_entities(self.store, rows.new_entities)
            g.update_entity_summaries(self.store, rows.summaries, now)
            # an episode's mentions are written once, with it (checked above): no conflicts
            g.insert_mention_rows(self.store, rows.mentions)
            g.insert_facts(self.store, rows.facts)
            g.invalidate_facts_from(self.store, rows.invalid, now)
            g.insert_embeddings(self.store, "entity", [e["uuid"] for e in rows.entities],
                                rows.entity_vectors, model)
            g.insert_embeddings(self.store, "fact", [f["uuid"] for f in rows.facts],
                                rows.fact_vectors, model)
            g.mark_episodes_done(self.store, rows.done, now)
            if also is not None:
                also()
        self._remember_done(items)
        self.reembed.written([e["uuid"] for e in rows.entities], rows.kept.items())
        if self.on_upsert:
            self._tell_indexes(rows.entities, rows.entity_vectors, rows.facts,
                               rows.fact_vectors, rows.reread, rows.kept_rows)
        return items

    def _remember_done(self, items: list[PreparedEpisode]) -> None:
        """The committed episodes are their groups' latest processed ones now."""
        if self.recent is None:
            return
        by_group: dict[str, list[dict]] = {}
        for item in items:
            by_group.setdefault(item.group_id, []).append({
                "uuid": item.episode_uuid, "name": item.name, "body": item.body,
                "reference_time": item.reference_time})
        for group_id, episodes in by_group.items():
            self.recent.add(group_id, episodes)

    def _tell_indexes(self, entities, ent_vecs, facts, fact_vecs, reread, kept) -> None:
        """Tell the search indexes what was just committed (:func:`publish`: never raises).
        ``kept``: entities whose summary grew and whose vector stays; ``reread``: invalidated
        facts (both re-read from the store, keeping their vectors)."""
        def tell() -> None:
            self.on_upsert("entity", [
                {**e, "text": entity_text(e["name"], e["entity_type"], e["summary"])}
                for e in entities] + kept, ent_vecs)
            self.on_upsert("fact", [{**f, "text": f["fact"]} for f in facts], fact_vecs)
            self.on_upsert("fact", reread, None)

        publish(tell, self.resync, "a write")


@dataclass
class _Rows:
    """What prepared episodes write: the rows of each table, and the vectors."""

    new_entities: list[dict] = field(default_factory=list)
    summaries: list[tuple[str, str]] = field(default_factory=list)
    mentions: list[tuple[str, str]] = field(default_factory=list)
    facts: list[dict] = field(default_factory=list)
    invalid: list[tuple[str, datetime]] = field(default_factory=list)
    done: list[tuple[str, int, int]] = field(default_factory=list)
    entities: list[dict] = field(default_factory=list)  # new and updated: (re-)embedded
    kept: dict[str, int] = field(default_factory=dict)  # grown summaries that keep their vector
    kept_rows: list[dict] = field(default_factory=list)  # (their rows, to be re-read)
    reread: list[dict] = field(default_factory=list)  # invalidated facts
    entity_vectors: np.ndarray | None = None
    fact_vectors: np.ndarray | None = None

    @classmethod
    def of(cls, items: list[PreparedEpisode], dim: int) -> _Rows:
        rows = cls()
        ent_vecs, fact_vecs = [], []
        for item in items:
            changes = item.changes
            entities = [*changes.new_entities, *_reembedded(changes)]
            invalid_from = min(
                (f["_invalid_from"] for f in changes.new_facts if "_invalid_from" in f),
                default=item.reference_time,
            )
            episode_facts = [{k: v for k, v in f.items() if not k.startswith("_")}
                             for f in changes.new_facts]
            invalidated = sorted(set(changes.invalidated))
            rows.new_entities += changes.new_entities
            rows.summaries += [(u, upd["summary"])
                               for u, upd in changes.summary_updates.items()]
            rows.mentions += [(item.episode_uuid, u) for u in changes.mentioned]
            rows.facts += episode_facts
            rows.invalid += [(u, invalid_from) for u in invalidated]
            rows.done.append(
                (item.episode_uuid, len(set(changes.mentioned)), len(episode_facts)))
            rows.entities += entities
            rows.kept.update(changes.kept_vectors)
            rows.kept_rows += [{"uuid": u, "group_id": item.group_id}
                               for u in changes.kept_vectors]
            if len(item.vectors) != len(entities) + len(episode_facts):
                # a vector on another row's uuid would corrupt search silently: refuse
                raise ValueError(
                    f"episode {item.episode_uuid}: {len(item.vectors)} vectors for "
                    f"{len(entities)} entities and {len(episode_facts)} facts")
            ent_vecs.append(item.vectors[:len(entities)])
            fact_vecs.append(item.vectors[len(entities):])
            rows.reread += [{"uuid": u, "group_id": item.group_id} for u in invalidated]
        rows.entity_vectors, rows.fact_vectors = _stack(ent_vecs, dim), _stack(fact_vecs, dim)
        return rows


def _reembedded(changes: EpisodeChanges) -> list[dict]:
    """The grown summaries that get a new vector, in write order."""
    return [u for uuid, u in changes.summary_updates.items() if uuid not in changes.kept_vectors]


def _stack(parts: list[np.ndarray], dim: int) -> np.ndarray:
    parts = [p for p in parts if len(p)]
    return np.vstack(parts).astype(np.float32) if parts else np.zeros((0, dim), np.float32)


def _relation(text: str) -> str:
    rel = re.sub(r"[^A-Za-z0-9]+", "_", text.strip()).strip("_").upper()
    return rel[:80] or "RELATES_TO"


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return as_utc(value)
    except (TypeError, ValueError):
        return None
