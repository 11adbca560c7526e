"""Prepared episodes → the graph, the transaction side.

:meth:`EpisodeWriter.write` writes what one or several prepared episodes change in ONE
transaction together with marking them done (and the queue's acknowledgement), so a crash
mid-episode leaves nothing behind and a redelivery starts clean. Several episodes (of different
groups: a group's episodes run one at a time) share a transaction and its multi-row statements:
DuckDB charges per statement and per commit, not per row. Then, still under the publish gate,
the search engine is told (:class:`~workbench.index.publish.Publisher`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench.ingest import reads
from workbench.ingest.context import IngestContext
from workbench.ingest.queue.setbacks import PrepareAgain
from workbench.ingest.recent import RecentEpisodes
from workbench.ingest.records import PreparedEpisode, entity_text
from workbench.ingest.reembed import ReembedPolicy
from workbench.store import graph as g
from workbench.store import provenance


class EpisodeWriter:
    """Writes prepared episodes and tells the search engine (see the module docstring)."""

    def __init__(self, ctx: IngestContext, recent: RecentEpisodes | None, reembed: ReembedPolicy):
        parts = ctx.episode_parts()
        self.store = ctx.store
        self.model = parts.embedder.model  # the embedding model the vectors come from
        self.dimensions = parts.embedder.dimensions
        self.clock = ctx.clock
        self.index = parts.publisher
        self.recent = recent
        self.reembed = reembed

    def write(
        self, items: list[PreparedEpisode], also: Callable[[], None] | None = None
    ) -> list[PreparedEpisode]:
        """Write the prepared episodes in one transaction (with ``also()``, e.g. the queue's
        acknowledgement), then update the search indexes; returns those written. An episode
        that is already done (written by an earlier delivery) or was deleted meanwhile (even if
        added again under its uuid) writes nothing. Call it under the publish gate."""
        now = self.clock()
        # one result per episode (a second one would write its entities and facts twice)
        items = list({i.episode_uuid: i for i in items if i.changes is not None}.values())
        with self.store.transaction():
            self.store.lock_groups(sorted({i.group_id for i in items}))
            pending = g.unprocessed_episodes(self.store, [i.episode_uuid for i in items])
            kept = [
                item
                for item in items
                if item.episode_uuid in pending and pending[item.episode_uuid] == item.created_at
            ]
            _check_runs(items, kept)
            items = kept
            rows = _Rows.of(items, self.dimensions)
            _check_still_new(rows, *self._stored_meanwhile(rows))
            g.insert_entities(self.store, rows.new_entities)
            g.update_entity_summaries(self.store, rows.summaries, now)
            # an episode's mentions are written once, with it (checked above): no conflicts
            g.insert_mention_rows(self.store, rows.mentions)
            g.insert_facts(self.store, rows.facts)
            provenance.insert_fact_sources(self.store, rows.sources)
            provenance.record_restated(self.store, rows.restated)
            g.invalidate_facts_from(self.store, rows.invalid, now)
            g.insert_embeddings(
                self.store,
                "entity",
                [e["uuid"] for e in rows.entities],
                rows.entity_vectors,
                self.model,
            )
            g.insert_embeddings(
                self.store, "fact", [f["uuid"] for f in rows.facts], rows.fact_vectors, self.model
            )
            g.mark_episodes_done(self.store, rows.done, now)
            if also is not None:
                also()
        self._remember_done(items)
        self.reembed.written([e["uuid"] for e in rows.entities], rows.kept.items())
        self._tell_indexes(rows)
        return items

    def _stored_meanwhile(self, rows: _Rows) -> tuple[set[tuple[str, str]], set[str]]:
        """Inside the write's transaction, its groups locked: which of the entities it creates
        exist now (group, normalised name), and which of its new facts are stored already
        (their uuids; a fact the write itself invalidates does not count). On a DuckDB file
        the search rows answer (every writer of the one process tells them under the gate,
        which this write holds: they are the store's, and cost no scan); a shared store is
        asked (another process's write may not have reached the rows yet)."""
        invalidated = {uuid for uuid, _ in rows.invalid}
        keys = [(e["group_id"], e["name_norm"]) for e in rows.new_entities]
        facts = [(f["group_id"], f["source_uuid"], f["target_uuid"], f["fact"]) for f in rows.facts]
        if not self.store.shared:
            with self.index.cached_rows() as (entities, fact_rows):
                made = {k for k in keys if reads.entities_by_norm(entities, k[0], [k[1]])}
                stored = {k for k in facts if reads.stored_fact(fact_rows, k, invalidated)}
        else:
            made = set(g.entities_by_key(self.store, keys))
            stored = g.existing_facts(self.store, facts, ignore=sorted(invalidated))
        return made, {f["uuid"] for f, k in zip(rows.facts, facts) if k in stored}

    def _remember_done(self, items: list[PreparedEpisode]) -> None:
        """The committed episodes are their groups' latest processed ones now."""
        if self.recent is None:
            return
        by_group: dict[str, list[dict[str, Any]]] = {}
        for item in items:
            by_group.setdefault(item.group_id, []).append(
                {
                    "uuid": item.episode_uuid,
                    "name": item.name,
                    "body": item.body,
                    "reference_time": item.reference_time,
                }
            )
        for group_id, episodes in by_group.items():
            self.recent.add(group_id, episodes)

    def _tell_indexes(self, rows: _Rows) -> None:
        """Tell the search engine what was just committed. Grown summaries that keep their
        vector and invalidated facts are re-read from the store with the vectors they have."""
        entities = [
            {**e, "text": entity_text(e["name"], e["entity_type"], e["summary"])}
            for e in rows.entities
        ]
        self.index.upserted(
            [
                ("entity", entities + rows.kept_rows, rows.entity_vectors),
                ("fact", [{**f, "text": f["fact"]} for f in rows.facts], rows.fact_vectors),
                ("fact", rows.reread, None),
            ],
            "a write",
        )


class RunBroken(RuntimeError):
    """An episode of a run was deleted (or written by another delivery) while the run was
    prepared: the later episodes of its group were resolved against what it made, so they
    are not written (the queue prepares them again, one at a time)."""


class StalePreparation(PrepareAgain):
    """An entity an episode would create was made by another writer (an import, another
    process) after the episode was prepared against the graph: it is prepared again, and
    then finds it."""


def _check_still_new(rows: _Rows, made: set[tuple[str, str]], stored: set[str]) -> None:
    """The entities the write creates do not exist yet (``made``: else
    :class:`StalePreparation`), and the new facts someone stored meanwhile (``stored``) are
    left out."""
    if made:
        names = ", ".join(sorted(f"{name!r} in {group}" for group, name in made))
        raise StalePreparation(f"entities made since the episodes were prepared: {names}")
    if stored:
        rows.drop_facts(sorted(stored))


def _check_runs(items: list[PreparedEpisode], kept: list[PreparedEpisode]) -> None:
    written = {id(i) for i in kept}
    gone: set[str] = set()  # groups with an episode dropped so far in this write
    for item in items:
        if id(item) not in written:
            gone.add(item.group_id)
        elif item.group_id in gone:
            raise RunBroken(
                f"episode {item.episode_uuid} follows an episode of group {item.group_id} "
                "that was deleted or written elsewhere while they were prepared together"
            )


@dataclass
class _Rows:
    """What prepared episodes write: the rows of each table, and the vectors."""

    new_entities: list[dict[str, Any]] = field(default_factory=list)
    summaries: list[tuple[str, str]] = field(default_factory=list)
    mentions: list[tuple[str, str]] = field(default_factory=list)
    facts: list[dict[str, Any]] = field(default_factory=list)
    invalid: list[tuple[str, datetime]] = field(default_factory=list)
    # (fact, episode, its reference time) of the new facts; (group, source, target, fact
    # text, episode, its reference time) of the facts stated again
    sources: list[tuple[str, str, datetime]] = field(default_factory=list)
    restated: list[tuple[str, str, str, str, str, datetime]] = field(default_factory=list)
    done: list[tuple[str, int, int]] = field(default_factory=list)
    entities: list[dict[str, Any]] = field(default_factory=list)  # new and updated: (re-)embedded
    kept: dict[str, int] = field(default_factory=dict)  # grown summaries that keep their vector
    kept_rows: list[dict[str, Any]] = field(default_factory=list)  # (their rows, to be re-read)
    reread: list[dict[str, Any]] = field(default_factory=list)  # invalidated facts
    # set by of(): new and updated entities' vectors, new facts' vectors
    entity_vectors: NDArray[np.float32] = field(default_factory=lambda: _stack([], 0))
    fact_vectors: NDArray[np.float32] = field(default_factory=lambda: _stack([], 0))

    @classmethod
    def of(cls, items: list[PreparedEpisode], dim: int) -> _Rows:
        rows = cls()
        ent_vecs: list[NDArray[np.float32]] = []
        fact_vecs: list[NDArray[np.float32]] = []
        for item in items:
            changes, vectors, when = item.changes, item.vectors, item.reference_time
            # write() passes only items with changes: made by PreparedEpisode.of, with vectors
            # and the episode's (NOT NULL) reference time
            assert changes is not None and vectors is not None and when is not None
            entities = [*changes.new_entities, *changes.reembedded()]
            invalid_from = changes.invalid_from or when
            invalidated = sorted(set(changes.invalidated))
            rows.new_entities += changes.new_entities
            rows.summaries += [(u, upd["summary"]) for u, upd in changes.summary_updates.items()]
            rows.mentions += [(item.episode_uuid, u) for u in changes.mentioned]
            rows.facts += changes.new_facts
            rows.sources += [(f["uuid"], item.episode_uuid, when) for f in changes.new_facts]
            rows.restated += [
                (item.group_id, *key, item.episode_uuid, when) for key in changes.restated
            ]
            rows.invalid += [(u, invalid_from) for u in invalidated]
            rows.done.append(
                (item.episode_uuid, len(set(changes.mentioned)), len(changes.new_facts))
            )
            rows.entities += entities
            rows.kept.update(changes.kept_vectors)
            rows.kept_rows += [{"uuid": u, "group_id": item.group_id} for u in changes.kept_vectors]
            if len(vectors) != len(entities) + len(changes.new_facts):
                # a vector on another row's uuid would corrupt search silently: refuse
                raise ValueError(
                    f"episode {item.episode_uuid}: {len(vectors)} vectors for "
                    f"{len(entities)} entities and {len(changes.new_facts)} facts"
                )
            ent_vecs.append(vectors[: len(entities)])
            fact_vecs.append(vectors[len(entities) :])
            rows.reread += [{"uuid": u, "group_id": item.group_id} for u in invalidated]
        rows.entity_vectors, rows.fact_vectors = _stack(ent_vecs, dim), _stack(fact_vecs, dim)
        rows._one_row_each()
        return rows

    def drop_facts(self, uuids: list[str]) -> None:
        """Leave these new facts (and their vectors) out of the write."""
        gone = set(uuids)
        keep = [i for i, f in enumerate(self.facts) if f["uuid"] not in gone]
        said = {episode: when for _, episode, when in self.sources}
        self.sources = [s for s in self.sources if s[0] not in gone]
        dropped: dict[str, int] = {}
        for fact in self.facts:
            if fact["uuid"] in gone:
                episode = fact.get("episode_uuid") or ""
                dropped[episode] = dropped.get(episode, 0) + 1
                # stored by another writer meanwhile: this episode stated it again
                key = (fact["group_id"], fact["source_uuid"], fact["target_uuid"], fact["fact"])
                if episode in said:
                    self.restated.append((*key, episode, said[episode]))
        self.facts = [self.facts[i] for i in keep]
        self.fact_vectors = self.fact_vectors[keep]
        self.done = [(u, m, n - dropped.get(u, 0)) for u, m, n in self.done]

    def _one_row_each(self) -> None:
        """Consecutive episodes of one group written together (a run) may touch one entity
        or fact twice: an entity made by one and grown by a later one takes the later summary
        and vector; a fact invalidated twice keeps the first (earliest episode's) time. One
        statement must not name a row twice (which update wins would be arbitrary)."""
        last = {e["uuid"]: i for i, e in enumerate(self.entities)}
        if len(last) < len(self.entities):
            keep = sorted(last.values())
            self.entities = [self.entities[i] for i in keep]
            self.entity_vectors = self.entity_vectors[keep]
        self.summaries = list(dict(self.summaries).items())
        first: dict[str, datetime] = {}
        for uuid, since in self.invalid:
            first.setdefault(uuid, since)
        self.invalid = list(first.items())
        self.reread = list({r["uuid"]: r for r in self.reread}.values())


def _stack(parts: list[NDArray[np.float32]], dim: int) -> NDArray[np.float32]:
    parts = [p for p in parts if len(p)]
    return np.vstack(parts).astype(np.float32) if parts else np.zeros((0, dim), np.float32)
