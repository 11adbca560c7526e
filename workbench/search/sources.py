"""Where a memory came from: the ``sources`` of a fact (the episodes that stated it, the
passages of those episodes that say it, first and last time said, or the file it was
imported from) and of an entity (the episodes that mention it).

:func:`attach` adds ``sources`` to the facts of one search answer with two statements
whatever their number (:mod:`workbench.store.provenance`: their links with the times they
were said, then the quoted episodes with their passages; each through an index), bounded
so that an answer stays small: per fact the first episode and the :data:`LATEST_EPISODES`
latest ones (of ``episode_count``), :data:`PASSAGES_PER_EPISODE` passage of each, and at most
:data:`MAX_PASSAGES` passages in the whole answer (``complete`` says whether anything was
left out). :func:`of` is ``get_sources``: every episode, :data:`FULL_PASSAGES` passages
each.

Which passages: those sharing most of the memory's words (the fact's text, an entity's
name; lower-cased words but stop words), earlier first on a tie; an
episode whose passages share none with it shows its first passage (the fact was extracted
from the whole episode).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.errors import NotFound, StoreUnavailable
from workbench.index.keyword.tokens import STOP_WORDS
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


def best_passages(
    text: str, passages: Sequence[Row], k: int, terms: Callable[[Row], frozenset[str]] | None = None
) -> list[Row]:
    """The ``k`` passages (dicts with ``position`` and ``text``) sharing the most terms with
    ``text``, in their episode's order; none sharing any: the first ``k``. ``terms`` gives a
    passage's terms (default: tokenized here; a caller quoting several facts caches them)."""
    if len(passages) <= k:  # nothing to choose
        return sorted(passages, key=lambda p: p["position"])
    wanted = words(text)
    of = terms or (lambda p: words(p["text"] or ""))
    scored = sorted(((len(wanted & of(p)), p) for p in passages), key=_best)
    if scored and scored[0][0] > 0:
        scored = [(n, p) for n, p in scored if n > 0]
    return sorted((p for _, p in scored[:k]), key=lambda p: p["position"])


_WORD = re.compile(r"\w+")


def words(text: str) -> frozenset[str]:
    """The lower-cased words of ``text`` but stop words: what a passage and a fact are
    compared by (no stemming: a search answer compares a hundred passages, and the fact was
    extracted from the passage's own words)."""
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS)


def _best(scored: tuple[int, Row]) -> tuple[int, int]:
    return -scored[0], scored[1]["position"]


class _Terms:
    """Each passage's terms, tokenized once for a whole answer (facts share episodes)."""

    def __init__(self) -> None:
        self.known: dict[str, frozenset[str]] = {}

    def __call__(self, passage: Row) -> frozenset[str]:
        found = self.known.get(passage["uuid"])
        if found is None:
            found = self.known[passage["uuid"]] = words(passage["text"] or "")
        return found


def _links(rows: Iterable[Row]) -> tuple[dict[str, list[Row]], dict[str, Row]]:
    """owner -> its (episode, said_at) links in time order; owner -> its import row."""
    episodes: dict[str, list[Row]] = {}
    imports: dict[str, Row] = {}
    for row in rows:
        if row["episode_uuid"] is None:
            imports[row["owner"]] = row
        else:
            episodes.setdefault(row["owner"], []).append(row)
    for links in episodes.values():
        links.sort(key=lambda r: (r["said_at"], r["episode_uuid"]))
    return episodes, imports


def _read(store: Store, links: list[Row], limits: Limits) -> dict[str, Row]:
    """owner -> sources, from its provenance rows and one more statement: the quoted
    episodes (each owner's first and latest ones) with their passages."""
    by_owner, imports = _links(links)
    quoted: dict[str, list[str]] = {}
    for owner, rows in by_owner.items():
        keep = len(rows) if limits.latest is None else limits.latest
        chosen = rows[:1] + rows[1:][-keep:] if keep else rows[:1]
        quoted[owner] = [r["episode_uuid"] for r in chosen]
    episodes: dict[str, Row] = {}
    passages: dict[str, list[Row]] = {}
    for row in sql.quoted_episodes(store, sorted({u for us in quoted.values() for u in us})):
        episodes.setdefault(row["uuid"], row)
        if row["passage_uuid"] is not None:
            passages.setdefault(row["uuid"], []).append(
                {"uuid": row["passage_uuid"], "position": row["position"], "text": row["text"]}
            )
    out = {}
    for owner in {*by_owner, *imports}:
        out[owner] = {
            "said": [r["said_at"] for r in by_owner.get(owner, [])],
            "quoted": [
                (episodes[u], passages.get(u, [])) for u in quoted.get(owner, []) if u in episodes
            ],
            "imported": imports.get(owner),
        }
    return out


def _shape(text: str, found: Row | None, limits: Limits, budget: list[int], terms: _Terms) -> Row:
    """The sources of one memory; ``budget`` holds the passages the answer may still quote
    (spent here)."""
    found = found or {"said": [], "quoted": [], "imported": None}
    listed, complete = [], True
    for episode, passages in found["quoted"]:
        chosen = best_passages(text, passages, min(limits.per_episode, budget[0]), terms)
        budget[0] -= len(chosen)
        complete = complete and len(chosen) == min(len(passages), limits.per_episode)
        listed.append(
            {
                "episode_uuid": episode["uuid"],
                "episode_name": episode["name"],
                "reference_time": episode["reference_time"],
                "passages": [
                    {"uuid": p["uuid"], "position": int(p["position"]), "text": p["text"]}
                    for p in chosen
                ],
            }
        )
    said, imported = found["said"], found["imported"]
    return {
        "episodes": listed,
        "episode_count": len(said),
        "first_said": said[0] if said else None,
        "last_said": said[-1] if said else None,
        "imported": (
            {"file": imported["file"], "imported_at": imported["imported_at"]} if imported else None
        ),
        "complete": complete and len(said) == len(listed),
    }


def fact_sources(
    store: Store,
    facts: Sequence[tuple[str, str]],
    limits: Limits = SEARCH,
    imported: Sequence[str] | None = None,
) -> dict[str, Row]:
    """uuid -> sources of each (uuid, fact text): two statements in all (a third for the
    facts of ``imported``, those without a first episode; None: any of them)."""
    uuids = list(dict.fromkeys(u for u, _ in facts))
    links = sql.links_of_facts(store, uuids, uuids if imported is None else imported)
    found = _read(store, links, limits)
    budget, terms = [limits.total], _Terms()
    return {uuid: _shape(text, found.get(uuid), limits, budget, terms) for uuid, text in facts}


def entity_sources(store: Store, uuid: str, name: str) -> Row:
    """The sources of an entity: every episode that mentions it, with the passages that
    name it best."""
    found = _read(store, sql.links_of_entity(store, uuid), FULL)
    return _shape(name, found.get(uuid), FULL, [FULL.total], _Terms())


# the sources of a fact while the database is unreachable: none listed, and said so
UNREACHABLE: Row = {
    "episodes": [], "episode_count": 0, "first_said": None, "last_said": None,
    "imported": None, "complete": False,
}  # fmt: skip


def attach(store: Store, hits: list[Row]) -> list[Row]:
    """The fact hits (dicts with ``uuid`` and ``fact``; other kinds pass untouched) with their
    ``sources``, in place; ``episodes`` (a ``search_memory`` fact's) lists every episode
    quoted. Two statements for all of them. While the database is unreachable a search still
    answers (from the live indexes): its facts' sources are then empty, ``complete`` false."""
    facts = [h for h in hits if "fact" in h and h.get("kind", "fact") == "fact"]
    if not facts:
        return hits
    imported = [h["uuid"] for h in facts if not h.get("episode_uuid")]
    try:
        found = fact_sources(store, [(h["uuid"], h["fact"]) for h in facts], SEARCH, imported)
    except StoreUnavailable:  # a search answers from memory through an outage: sources later
        found = {h["uuid"]: {**UNREACHABLE, "episodes": []} for h in facts}
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
