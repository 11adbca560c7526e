"""Where a memory came from: the ``sources`` of a fact (the episodes that stated it, the
passages of those episodes that say it, first and last time said, or the file it was
imported from) and of an entity (the episodes that mention it).

:func:`attach` adds ``sources`` to the facts of one search answer with ONE read of the store
(:func:`workbench.store.provenance.fact_source_rows`), bounded so that an answer stays
small: per fact the first episode and the :data:`LATEST_EPISODES` latest ones (of
``episode_count``), :data:`PASSAGES_PER_EPISODE` passage of each, and at most
:data:`MAX_PASSAGES` passages in the whole answer (``complete`` says whether anything was
left out). :func:`full` is ``get_sources``: every episode, :data:`FULL_PASSAGES` passages
each.

Which passages: those sharing most of the memory's words (the fact's text, an entity's
name; stemmed keyword terms, as the keyword index reads them), earlier first on a tie; an
episode whose passages share none with it shows its first passage (the fact was extracted
from the whole episode).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.errors import NotFound
from workbench.index.tokens import tokenize
from workbench.store import Store, graph
from workbench.store import provenance as sql

__all__ = [
    "LATEST_EPISODES",
    "PASSAGES_PER_EPISODE",
    "MAX_PASSAGES",
    "FULL_PASSAGES",
    "Limits",
    "attach",
    "fact_sources",
    "entity_sources",
    "best_passages",
    "of",
]

LATEST_EPISODES = 2  # a search shows a fact's first episode and this many latest ones
PASSAGES_PER_EPISODE = 1  # passages quoted per episode in a search answer
MAX_PASSAGES = 40  # passages quoted in a whole search answer
FULL_PASSAGES = 3  # passages quoted per episode by get_sources

Row = dict[str, Any]


@dataclass(frozen=True)
class Limits:
    """How much of the sources an answer quotes (None: every episode)."""

    latest: int | None = LATEST_EPISODES
    per_episode: int = PASSAGES_PER_EPISODE
    total: int = MAX_PASSAGES


SEARCH = Limits()
FULL = Limits(None, FULL_PASSAGES, 10_000)


def best_passages(text: str, passages: Sequence[Row], k: int) -> list[Row]:
    """The ``k`` passages (dicts with ``position`` and ``text``) sharing the largest part of
    the terms of ``text``, in their episode's order; none sharing any: the first ``k``."""
    terms = set(tokenize(text))

    def overlap(p: Row) -> int:
        return len(terms & set(tokenize(p["text"] or "")))

    scored = sorted(passages, key=lambda p: (-overlap(p), p["position"]))
    if scored and overlap(scored[0]) > 0:
        scored = [p for p in scored if overlap(p) > 0]
    return sorted(scored[:k], key=lambda p: p["position"])


def _group(rows: Iterable[Row]) -> dict[str, dict[str, list[Row]]]:
    """owner -> episode uuid -> its passage rows (in order); imports under the key ''."""
    out: dict[str, dict[str, list[Row]]] = {}
    for row in rows:
        episodes = out.setdefault(row["owner"], {})
        episodes.setdefault(row["episode_uuid"] or "", []).append(row)
    return out


def _shape(text: str, episodes: dict[str, list[Row]], limits: Limits, budget: list[int]) -> Row:
    """The sources of one memory from its rows; ``budget`` holds the passages the answer may
    still quote (spent here)."""
    imported = episodes.pop("", [])
    listed = []
    complete = True
    for rows in episodes.values():
        head = rows[0]
        passages = [r for r in rows if r["passage_uuid"] is not None]
        chosen = best_passages(
            text, [{**p, "text": p["text"]} for p in passages], min(limits.per_episode, budget[0])
        )
        budget[0] -= len(chosen)
        complete = complete and len(chosen) == len(passages)
        listed.append(
            {
                "episode_uuid": head["episode_uuid"],
                "episode_name": head["episode_name"],
                "reference_time": head["reference_time"],
                "passages": [
                    {"uuid": p["passage_uuid"], "position": int(p["position"]), "text": p["text"]}
                    for p in chosen
                ],
            }
        )
    listed.sort(key=lambda e: (e["reference_time"], e["episode_uuid"]))
    count = max([int(rows[0]["episode_count"]) for rows in episodes.values()] or [0])
    count = max(count, len(listed))
    times = [e["reference_time"] for e in listed]
    first_last = _first_last(episodes)
    return {
        "episodes": listed,
        "episode_count": count,
        "first_said": first_last[0] if first_last else (min(times) if times else None),
        "last_said": first_last[1] if first_last else (max(times) if times else None),
        "imported": (
            {"file": imported[0]["file"], "imported_at": imported[0]["imported_at"]}
            if imported
            else None
        ),
        "complete": complete and count == len(listed),
    }


def _first_last(episodes: dict[str, list[Row]]) -> tuple[Any, Any] | None:
    """A fact's first and last time said, from the ranks its rows carry (None: no ranks)."""
    first = [r[0]["reference_time"] for r in episodes.values() if r[0]["first_rank"] == 1]
    last = [r[0]["reference_time"] for r in episodes.values() if r[0]["last_rank"] == 1]
    return (first[0], last[0]) if first and last else None


def fact_sources(
    store: Store, facts: Sequence[tuple[str, str]], limits: Limits = SEARCH
) -> dict[str, Row]:
    """uuid -> sources of each (uuid, fact text), one read of the store."""
    uuids = list(dict.fromkeys(u for u, _ in facts))
    grouped = _group(sql.fact_source_rows(store, uuids, limits.latest))
    budget = [limits.total]
    return {uuid: _shape(text, grouped.get(uuid, {}), limits, budget) for uuid, text in facts}


def entity_sources(store: Store, uuid: str, name: str) -> Row:
    """The sources of an entity: every episode that mentions it, with the passages that
    name it best."""
    grouped = _group(sql.entity_source_rows(store, uuid))
    return _shape(name, grouped.get(uuid, {}), FULL, [FULL.total])


def attach(store: Store, hits: list[Row]) -> list[Row]:
    """The fact hits (dicts with ``uuid`` and ``fact``; other kinds pass untouched) with their
    ``sources``, in place; ``episodes`` (a ``search_memory`` fact's) lists every episode
    quoted. One read of the store for all of them."""
    facts = [h for h in hits if "fact" in h and h.get("kind", "fact") == "fact"]
    if not facts:
        return hits
    found = fact_sources(store, [(h["uuid"], h["fact"]) for h in facts])
    for hit in facts:
        hit["sources"] = found[hit["uuid"]]
        if "episodes" in hit:
            hit["episodes"] = [e["episode_uuid"] for e in hit["sources"]["episodes"]]
    return hits


def of(store: Store, uuid: str) -> Row:
    """``get_sources``: every source of the fact or entity ``uuid`` (:class:`NotFound`
    when it is neither)."""
    fact = graph.get_fact(store, uuid)
    if fact is not None:
        found = fact_sources(store, [(uuid, fact["fact"])], FULL)[uuid]
        return {"uuid": uuid, "kind": "fact", "group_id": fact["group_id"],
                "text": fact["fact"], "sources": found}  # fmt: skip
    entity = graph.entities_by_uuid(store, [uuid]).get(uuid)
    if entity is None:
        raise NotFound(f"no fact or entity with uuid {uuid}")
    found = entity_sources(store, uuid, entity["name"])
    return {"uuid": uuid, "kind": "entity", "group_id": entity["group_id"],
            "text": entity["name"], "sources": found}  # fmt: skip
