"""Several consecutive episodes of one group extracted at once: a *run*.

The queue keeps a group's episodes in order, and a sequential pipeline makes each one wait for
the LLM calls of the one before it. A run takes the next ``K`` episodes of a group (claimed
together when the group has a backlog), makes their LLM calls concurrently against the graph as
it stands, then resolves their results **in order** against each other, so that what is written
is what sequential processing would write:

1. **Entities** (concurrently): ``extract_entities`` for every episode, each with the context
   sequential processing would show it (the group's latest processed episodes merged with the
   run's earlier episodes, by reference time), then placed against the graph: exact name, then
   similarity, ``resolve_nodes`` when ambiguous.
2. **In order, no LLM** (``resolve_nodes`` only when an entity is ambiguous with one an earlier
   episode of the run created): an entity not found in the graph that an earlier episode of
   the run created (same normalised name, or a near-identical vector of the same type) becomes
   that entity; summaries grow in episode order.
3. **Facts** (concurrently): ``extract_edges`` for every episode, shown the graph's current facts
   of its entities.
4. **In order, no LLM**: each episode keeps the replied facts not already stated (a fact
   counts as stated while it is current: in the graph or made by an earlier episode of the
   run, and not invalidated by an earlier one), and marks the graph facts it invalidates.
5. **Invalidations within the run** (concurrently): an episode whose entities have current
   facts made earlier in the run is asked ``extract_edges`` again, shown those facts too; of
   that reply only the invalidations of those run facts are taken (by the facts it kept).
   Step 4 is then done again with them; an episode shown a run fact it was not asked about
   yet (one a later invalidation made current again) is asked once more, at most
   ``MAX_ROUNDS`` rounds. A verdict about a fact stands once given.

An episode costs 2 calls (3 with an ambiguity) plus one per round of step 5 that concerns it;
on a history that changes its mind in every episode (``tests/ingest/test_runs.py``) that was
2.75 calls per episode, against 2 one at a time. What differs from one at a time
(``docs/architecture.md``, "Runs"): the facts step sees the run's earlier facts only in step 5,
so a model may restate an earlier fact of the run in other words; a fact two episodes of a run
invalidate keeps the earlier one's time; past ``MAX_ROUNDS`` the last verdicts stand.

When an episode's LLM call fails, the episodes before it are prepared and written, it fails
(and is retried as usual) and the ones after it go back to the queue unspent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from workbench.ingest.extract import Extractor, _parse_time, fact_key
from workbench.ingest.reads import FactKey
from workbench.ingest.recent import _in_order
from workbench.ingest.records import EpisodeChanges, EpisodeRow, PreparedEpisode, ResolvedEntity
from workbench.names import name_key
from workbench.prompts.extract_edges import ExtractedEdges

log = logging.getLogger("workbench.ingest.run")

T = TypeVar("T")
FACTS_SHOWN = 30  # as many existing facts as the sequential facts step shows
MAX_ROUNDS = 3  # rounds of second replies before the run takes what it has


@dataclass
class RunOutcome:
    """``prepared``: the run's first episodes, ready to be written together and in order;
    ``error``: why the next one failed (None: all prepared). Those after it were not
    prepared and go back to the queue."""

    prepared: list[PreparedEpisode]
    error: BaseException | None = None


@dataclass
class _RunGraph:
    """What the run's episodes so far add to the graph, as the next one must see it."""

    by_norm: dict[str, dict[str, Any]] = field(default_factory=dict)  # created, by name
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # created or grown, by uuid
    unseen: dict[str, int] = field(default_factory=dict)  # grown, vector kept: characters added
    created: list[tuple[dict[str, Any], NDArray[np.float32]]] = field(default_factory=list)

    def add(self, entities: list[ResolvedEntity], changes: EpisodeChanges) -> None:
        for entity in changes.new_entities:
            row = {k: entity[k] for k in ("uuid", "name", "entity_type", "summary", "name_norm")}
            self.by_norm.setdefault(row["name_norm"], row)
            self.rows[row["uuid"]] = row
        vectors = {e.uuid: e.vector for e in entities if e.vector is not None}
        for entity in changes.new_entities:
            if entity["uuid"] in vectors:
                self.created.append((self.rows[entity["uuid"]], vectors[entity["uuid"]]))
        for uuid, update in changes.summary_updates.items():
            self.rows[uuid] = {**self.rows.get(uuid, {}), **update}
            # characters its vector has not seen: carried on while it keeps its vector
            self.unseen[uuid] = changes.kept_vectors.get(uuid, 0)


@dataclass
class _Asked:
    """What an episode's second replies said about the run's facts they were shown: which
    fact keys it was asked about, and per replied fact (its text) the keys it invalidates and
    since when. A fact asked about once is not asked about again (when an earlier episode
    ends some of the facts shown, the verdicts on the others stand)."""

    keys: set[FactKey] = field(default_factory=set)
    # (replied fact's text, the keys it invalidates, its valid_at)
    verdicts: list[tuple[str, set[FactKey], str | None]] = field(default_factory=list)

    def covers(self, later: list[dict[str, Any]]) -> bool:
        return all(_key(f) in self.keys for f in later)

    def learn(
        self, reply: ExtractedEdges, shown: list[dict[str, Any]], later: list[dict[str, Any]]
    ) -> None:
        self.keys.update(_key(f) for f in later)
        for edge in reply.edges:
            refs = [r - len(shown) for r in edge.invalidates if r > len(shown)]
            hits = {_key(later[r - 1]) for r in refs if 1 <= r <= len(later)}
            if hits:
                self.verdicts.append((edge.fact.strip().lower(), hits, edge.valid_at))

    def apply(
        self, episode: EpisodeRow, later: list[dict[str, Any]], changes: EpisodeChanges
    ) -> None:
        """Invalidate the shown run facts the episode's kept facts invalidate (an edge it did
        not keep invalidates nothing, as one at a time)."""
        kept = {f["fact"].strip().lower() for f in changes.new_facts}
        for text, hits, valid_at in self.verdicts:
            ended = [f["uuid"] for f in later if text in kept and _key(f) in hits]
            if not ended:
                continue
            changes.invalidated += ended
            since = _parse_time(valid_at) or episode["reference_time"]
            if changes.invalid_from is None or since < changes.invalid_from:
                changes.invalid_from = since


class _Stopwatch:
    """Where a run's time went (logged at debug level)."""

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.laps: list[str] = []

    def lap(self, what: str) -> None:
        now = time.perf_counter()
        self.laps.append(f"{what} {now - self.last:.3f}s")
        self.last = now

    def __str__(self) -> str:
        return ", ".join(self.laps)


def _key(fact: dict[str, Any]) -> FactKey:
    return fact_key(fact["source_uuid"], fact["target_uuid"], fact["fact"])


class RunPreparer:
    """Prepares runs with an :class:`Extractor` (see the module docstring)."""

    def __init__(self, extractor: Extractor, max_parallel: int = 8):
        self.x = extractor
        self._pool = ThreadPoolExecutor(max(1, max_parallel), thread_name_prefix="episode-run")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def prepare(self, episodes: Sequence[EpisodeRow]) -> RunOutcome:
        """Prepare consecutive episodes of one group (in queue order)."""
        x = self.x
        clock = _Stopwatch()
        episodes = self.with_contexts(list(episodes))
        changes = [EpisodeChanges() for _ in episodes]

        def entities(i: int) -> list[ResolvedEntity]:
            found = x._extract_entities(episodes[i], changes[i])
            x._place(episodes[i], found, changes[i])
            return found

        extracted, error = self._each(entities, range(len(episodes)))
        clock.lap("entities")
        graph = _RunGraph()
        done = 0
        for i in range(len(extracted)):
            try:
                self._place_in_run(episodes[i], extracted[i], changes[i], graph)
                # what earlier episodes of the run added to a summary without a new vector
                # counts towards the re-embedding due now (as it would one at a time)
                for ent in extracted[i]:
                    if ent.existing is not None and graph.unseen.get(ent.existing["uuid"]):
                        changes[i].kept_vectors[ent.existing["uuid"]] = graph.unseen[
                            ent.existing["uuid"]
                        ]
                x._apply(episodes[i]["group_id"], extracted[i], changes[i])
            except Exception as exc:
                error = exc
                break
            graph.add(extracted[i], changes[i])
            done = i + 1
        n = done

        shown = [
            x.reads.facts_between([e.uuid for e in extracted[i] if e.existing], FACTS_SHOWN)
            if len(extracted[i]) >= 2
            else []
            for i in range(n)
        ]

        def ask(i: int) -> ExtractedEdges | None:
            if len(extracted[i]) < 2:
                return None
            return x._ask_edges(episodes[i], extracted[i], shown[i], changes[i])

        clock.lap("placed")
        replies, failed = self._each(ask, range(n))
        clock.lap("facts")
        if failed is not None:
            error, n = failed, len(replies)
        # facts in order; episodes whose entities gained facts earlier in the run are asked
        # again, shown those facts, until what each was shown is what it would have seen
        asked: dict[int, _Asked] = {}
        for _ in range(MAX_ROUNDS):
            stale = self._facts_in_order(episodes[:n], extracted, shown, replies, asked, changes)
            if not stale:
                break
            order = sorted(stale)
            jobs = [(episodes[i], extracted[i], shown[i] + stale[i], changes[i]) for i in order]
            answers, failed = self._each(partial(_ask_job, x, jobs), range(len(jobs)))
            for i, answer in zip(order, answers):
                asked.setdefault(i, _Asked()).learn(answer, shown[i], stale[i])
            clock.lap(f"round of {len(jobs)}")
            if failed is not None:
                error, n = failed, order[len(answers)]
        else:
            self._facts_in_order(episodes[:n], extracted, shown, replies, asked, changes)
        vectors = x._embed_many(changes[:n])
        prepared = [PreparedEpisode.of(episodes[i], changes[i], vectors[i]) for i in range(n)]
        clock.lap("embedded")
        log.debug("a run of %d episodes: %s", len(episodes), clock)
        if error is not None:
            log.info(
                "a run of %d episodes stopped at episode %s (%s): %d prepared, the rest "
                "return to the queue",
                len(episodes),
                episodes[n]["uuid"],
                type(error).__name__,
                n,
            )
        return RunOutcome(prepared, error)

    # --- the steps ----------------------------------------------------------------------
    def with_contexts(self, episodes: list[EpisodeRow]) -> list[EpisodeRow]:
        """Each episode's context as sequential processing would show it: the group's latest
        processed episodes and the run's earlier ones, up to its reference time."""
        keep = self.x.context_episodes
        if not keep or self.x.recent is None:
            return [{**e, "context": []} for e in episodes]
        graph = self.x.with_context(episodes)
        out: list[EpisodeRow] = []
        for i, episode in enumerate(graph):
            earlier: list[dict[str, Any]] = [
                {k: e[k] for k in ("uuid", "name", "body", "reference_time")}
                for e in episodes[:i]
                if e["reference_time"] <= episode["reference_time"]
            ]
            row = episode.copy()
            row["context"] = _in_order(earlier + episode["context"])[:keep]
            out.append(row)
        return out

    def _place_in_run(
        self,
        episode: EpisodeRow,
        entities: list[ResolvedEntity],
        changes: EpisodeChanges,
        graph: _RunGraph,
    ) -> None:
        """Entities the graph did not have, placed on those the run's earlier episodes made;
        entities the run grew, seen with their grown summary."""
        thresholds = self.x.thresholds
        questions = []
        for ent in entities:
            exact = graph.by_norm.get(ent.name_norm)
            if (
                ent.existing is not None
                and exact is not None
                and name_key(ent.existing.get("name") or "") != ent.name_norm
            ):
                # one at a time, the exact name an earlier episode made is found before any
                # similarity to an older entity of the graph
                ent.existing = None
            if ent.existing is not None:
                grown = graph.rows.get(ent.existing["uuid"])
                if grown is not None:
                    ent.existing = {**ent.existing, **grown}
                continue
            row = graph.by_norm.get(ent.name_norm)
            if row is None and ent.vector is not None and graph.created:
                matrix = np.vstack([v for _, v in graph.created])
                sims = _cosines(matrix, ent.vector)
                order = np.argsort(-sims)
                best = int(order[0])
                candidate = graph.created[best][0]
                if (
                    sims[best] >= thresholds.duplicate
                    and candidate["entity_type"] == ent.entity_type
                ):
                    row = candidate
                else:
                    close = [graph.created[int(j)][0] for j in order[:3]
                             if sims[int(j)] >= thresholds.ambiguous]  # fmt: skip
                    if close:
                        questions.append((ent, close))
            if row is not None:
                ent.existing = graph.rows.get(row["uuid"], row)
        if questions:
            self.x._ask_resolutions(episode, questions, changes)
            for ent, _ in questions:
                if ent.existing is not None:
                    ent.existing = graph.rows.get(ent.existing["uuid"], ent.existing)

    def _facts_in_order(
        self,
        episodes: list[EpisodeRow],
        extracted: list[list[ResolvedEntity]],
        shown: list[list[dict[str, Any]]],
        replies: list[ExtractedEdges | None],
        asked: dict[int, _Asked],
        changes: list[EpisodeChanges],
    ) -> dict[int, list[dict[str, Any]]]:
        """Each episode's facts and invalidations, in order, as one at a time would make them:
        a fact counts as stated only while current (one an earlier episode invalidated may be
        stated again), and the run's earlier current facts of an episode's entities are
        invalidated as its second reply (``asked``) says. Returns the episodes whose second
        reply is missing or was given a different list of those facts: uuid lists to ask."""
        x = self.x
        keys: dict[str, FactKey] = {}  # fact uuid -> key, graph facts shown and run facts
        for views in shown:
            for view in views:
                keys[view["uuid"]] = _key(view)
        run: list[dict[str, Any]] = []  # the run's facts so far, current or not
        ended: set[str] = set()  # fact uuids invalidated by the run so far
        stale: dict[int, list[dict[str, Any]]] = {}
        for i, episode in enumerate(episodes):
            mine = changes[i]
            mine.new_facts, mine.invalidated, mine.invalid_from = [], [], None
            mine.restated = []
            reply = replies[i]
            if reply is None:
                continue
            entities = {e.uuid for e in extracted[i]}
            later = self._current_touching(run, ended, entities, extracted, episodes)
            current = {keys[f["uuid"]] for f in run if f["uuid"] not in ended}
            revived = {keys[u] for u in ended}  # invalidated graph facts no longer count
            x._keep_facts(episode, extracted[i], reply.edges, shown[i], mine,
                          seen=set(current), forget=revived)  # fmt: skip
            for fact in mine.new_facts:
                keys[fact["uuid"]] = _key(fact)
            if later:
                known = asked.get(i)
                if known is None or not known.covers(later):
                    stale[i] = later
                if known is not None:  # verdicts given stand, for the facts they judged
                    known.apply(episode, later, mine)
            run += mine.new_facts
            ended.update(mine.invalidated)
        return stale

    @staticmethod
    def _current_touching(
        run: list[dict[str, Any]],
        ended: set[str],
        entities: set[str],
        extracted: list[list[ResolvedEntity]],
        episodes: Sequence[EpisodeRow],
    ) -> list[dict[str, Any]]:
        """The run's current facts touching these entities, newest first, shown as the
        facts step shows existing facts (at most ``FACTS_SHOWN``)."""
        names = {e.uuid: e.name for ents in extracted for e in ents}
        out = []
        for fact in reversed(run):
            # as the graph shows only current facts: not one ended here, nor one stated
            # with its end ("lived in Paris until 2020")
            if fact["uuid"] in ended or fact.get("invalid_at") is not None:
                continue
            if fact["source_uuid"] in entities or fact["target_uuid"] in entities:
                out.append(
                    {
                        "uuid": fact["uuid"],
                        "relation": fact["relation"],
                        "fact": fact["fact"],
                        "source_uuid": fact["source_uuid"],
                        "target_uuid": fact["target_uuid"],
                        "source_name": names.get(fact["source_uuid"]),
                        "target_name": names.get(fact["target_uuid"]),
                    }
                )
        return out[:FACTS_SHOWN]

    def _each(self, fn: Callable[[int], T], indexes: range) -> tuple[list[T], Exception | None]:
        """``fn`` over the indexes concurrently: the results before the first failure (in
        index order), and that failure."""
        futures = [self._pool.submit(fn, i) for i in indexes]
        results: list[T] = []
        error: Exception | None = None
        for future in futures:
            if error is not None:
                future.cancel()
                continue
            try:
                results.append(future.result())
            except Exception as exc:
                error = exc
        # a later call that is still running is waited for: its episode's calls are over
        # before the run returns (and the next run of the group starts)
        for future in futures:
            if not future.cancelled():
                try:
                    future.result()
                except Exception:
                    pass
        return results, error


# an extract_edges call: (episode, its entities, the facts shown, its changes)
_EdgesJob = tuple[EpisodeRow, list[ResolvedEntity], list[dict[str, Any]], EpisodeChanges]


def _ask_job(x: Extractor, jobs: list[_EdgesJob], k: int) -> ExtractedEdges:
    return x._ask_edges(*jobs[k])


def _cosines(matrix: NDArray[np.float32], vector: NDArray[np.float32]) -> NDArray[np.float64]:
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(vector) or 1.0)
    cosines: NDArray[np.float64] = (matrix @ vector) / np.where(norms == 0, 1.0, norms)
    return cosines
