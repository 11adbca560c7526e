"""The columnar row cache: rows come back as they were put, its vectorised filters agree with the
row-by-row definition (:meth:`SearchFilters.accepts`), accesses follow the access rules, and a
load from the store equals rows put one by one."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from workbench.index.access import access_update
from workbench.index.rows import RowCache
from workbench.search.filters import SearchFilters

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STATES = ["ACTIVE", "DORMANT", "ARCHIVED", "EXPIRED", "SOFT_DELETED", "PERMANENT"]


def _when(rng: random.Random, nullable: bool = True) -> datetime | None:
    if nullable and rng.random() < 0.4:
        return None
    return T0 + timedelta(days=rng.randint(-50, 50), microseconds=rng.randint(0, 999_999))


def _rows(kind: str, n: int, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        row = {
            "uuid": f"{kind}-{i}",
            "group_id": rng.choice(["a", "b", "c"]),
            "created_at": _when(rng, nullable=False),
            "lifecycle_state": rng.choice(STATES),
            "last_accessed_at": _when(rng),
            "importance": rng.randint(1, 5),
            "stability": rng.randint(1, 5),
            "decay_score": round(rng.random(), 6),
            "access_count": rng.randint(0, 9),
        }
        if kind == "entity":
            name = rng.choice(["Maria", "Tom", "Acme", "Berlin"]) + str(rng.randint(0, 3))
            row.update(name=name, name_norm=name.lower(), entity_type=rng.choice(["Person",
                       "Organization", "Entity"]), summary=rng.choice(["", "a summary"]),
                       updated_at=_when(rng, nullable=False))  # fmt: skip
        elif kind == "passage":
            row.update(text=f"said {i}", speaker=rng.choice([None, "Ann"]), position=i % 4,
                       episode_uuid=rng.choice(["ep-1", "ep-2"]), episode_name="chat",
                       reference_time=_when(rng))  # fmt: skip
        else:
            row.update(fact=f"fact {i}", relation=rng.choice(["WORKS_AT", "LIVES_IN"]),
                       source_uuid=f"e{rng.randint(0, 5)}", target_uuid=f"e{rng.randint(0, 5)}",
                       episode_uuid=rng.choice([None, "ep-1", "ep-2"]), valid_at=_when(rng),
                       invalid_at=_when(rng), expired_at=_when(rng) if rng.random() < 0.2
                       else None)  # fmt: skip
        out.append(row)
    return out


@pytest.mark.parametrize("kind", ["entity", "fact"])
def test_rows_come_back_as_they_were_put(kind):
    rows = _rows(kind, 200)
    cache = RowCache(kind)
    cache.put(rows)
    assert len(cache) == 200
    for row in rows:
        assert cache.get(row["uuid"]) == row
    assert cache.get("missing") is None and "missing" not in cache


@pytest.mark.parametrize("kind", ["entity", "fact"])
def test_replacing_and_removing_rows_reuses_slots_and_keeps_the_links(kind):
    rows = _rows(kind, 50)
    cache = RowCache(kind)
    cache.put(rows)
    cache.remove([r["uuid"] for r in rows[:20]])
    changed = [dict(r, group_id="z") for r in _rows(kind, 30, seed=9)[:20]]
    cache.put(changed)  # new uuids in the freed slots, and the others replaced
    cache.put([dict(rows[30], group_id="y")])
    assert len(cache) == 50
    assert cache.get(rows[30]["uuid"])["group_id"] == "y"
    live = {r["uuid"]: r for r in rows[20:]} | {r["uuid"]: r for r in changed}
    live[rows[30]["uuid"]] = dict(rows[30], group_id="y")
    assert {u: cache.get(u) for u in cache.uuids()} == live
    if kind == "fact":  # the facts touching each entity follow every change
        want: dict[str, set[str]] = {}
        for r in live.values():
            for end in (r["source_uuid"], r["target_uuid"]):
                want.setdefault(end, set()).add(r["uuid"])
        assert {e: set(cache.touching_of(e)) for e in cache.touching} == want
    else:
        for r in live.values():
            assert r["uuid"] in cache.named_uuids(r["group_id"], r["name_norm"])


@pytest.mark.parametrize("kind", ["entity", "fact", "passage"])
@pytest.mark.parametrize("seed", range(8))
def test_the_vectorised_filters_agree_with_the_row_by_row_ones(kind, seed):
    rows = _rows(kind, 300, seed)
    cache = RowCache(kind)
    cache.put(rows)
    rng = random.Random(seed)
    after = _when(rng) if rng.random() < 0.5 else None
    about = _when(rng) if rng.random() < 0.6 else None  # the time a memory is about
    filters = SearchFilters(
        group_ids=tuple(rng.sample(["a", "b", "c", "nope"], rng.randint(1, 3)))
        if rng.random() < 0.7
        else None,
        states=tuple(rng.sample(STATES, 3)) if rng.random() < 0.7 else None,
        created_after=after,
        created_before=after + timedelta(days=30) if after else None,
        entity_types=("Person", "Nope") if kind == "entity" and rng.random() < 0.5 else None,
        relation_types=("WORKS_AT",) if kind == "fact" and rng.random() < 0.5 else None,
        include_invalidated=rng.random() < 0.5,
        now=T0 if rng.random() < 0.8 else None,
        about_after=about if rng.random() < 0.7 else None,
        about_before=about + timedelta(days=rng.randint(1, 20)) if about else None,
        as_of=_when(rng) if rng.random() < 0.3 else None,
    )
    asked = [r["uuid"] for r in rows] + ["missing"]
    mask = cache.accepting(cache.slots(asked), filters)
    want = [filters.accepts(kind, r) for r in rows] + [False]
    assert mask.tolist() == want


def test_an_access_follows_the_access_rules():
    rows = _rows("fact", 100)
    cache = RowCache("fact")
    cache.put(rows)
    now = T0 + timedelta(days=60)
    cache.access([r["uuid"] for r in rows] + ["missing"], now)
    for row in rows:
        assert cache.get(row["uuid"]) == access_update(row, now)[0]


def test_a_load_from_the_store_equals_the_rows_put(store):
    rows = _rows("fact", 40)
    for r in rows:  # every column written through the store's own SQL
        store.execute(
            "INSERT INTO facts (uuid, group_id, source_uuid, target_uuid, relation, fact, "
            "episode_uuid, created_at, valid_at, invalid_at, expired_at, importance, stability, "
            "decay_score, lifecycle_state, last_accessed_at, access_count) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [r["uuid"], r["group_id"], r["source_uuid"], r["target_uuid"], r["relation"],
             r["fact"], r["episode_uuid"], r["created_at"], r["valid_at"], r["invalid_at"],
             r["expired_at"], r["importance"], r["stability"], r["decay_score"],
             r["lifecycle_state"], r["last_accessed_at"], r["access_count"]],
        )  # fmt: skip
    loaded = RowCache("fact")
    loaded.load(store)
    assert {u: loaded.get(u) for u in loaded.uuids()} == {r["uuid"]: r for r in rows}


def test_the_newest_facts_of_an_entity_come_first():
    rows = _rows("fact", 120)
    cache = RowCache("fact")
    cache.put(rows)
    facts, neighbours = cache.neighbourhood("e1", limit=5)
    touching = [r for r in rows if "e1" in (r["source_uuid"], r["target_uuid"])]
    newest = sorted(touching, key=lambda r: r["created_at"], reverse=True)[:5]
    assert facts == [r["uuid"] for r in newest]
    assert neighbours == {e for r in newest for e in (r["source_uuid"], r["target_uuid"])} - {"e1"}
    assert np.all(cache.slots(facts) >= 0)


@pytest.mark.parametrize("kind", ["entity", "fact"])
def test_an_empty_cache_accepts_nothing(kind):
    """A search between a reload that found no rows and the indexes' catching up asks about
    uuids the cache no longer holds."""
    cache = RowCache(kind)
    assert cache.accepting(cache.slots(["gone", "also gone"]), SearchFilters()).tolist() == [
        False,
        False,
    ]
    cache.put(_rows(kind, 3))
    cache.remove(cache.uuids())
    assert cache.accepting(cache.slots(["gone"]), SearchFilters()).tolist() == [False]


@pytest.mark.parametrize("seed", range(5))
def test_the_bulk_maps_equal_the_ones_built_a_row_at_a_time(seed):
    """``grouped`` (the facts touching each entity, the entities of each name, at a load) and
    ``positions_in`` (a saved layout's slots) against the one-at-a-time reference: repeated
    keys, a fact whose two ends are one entity, None keys and holes."""
    from workbench.index.arrays import grouped, positions_in
    from workbench.index.rows import _add, _discard

    rng = random.Random(seed)
    ents = [f"e{i}" for i in range(rng.randint(1, 40))]
    facts = [f"f{i}" for i in range(rng.randint(0, 120))]
    ends = [(rng.choice(ents), rng.choice(ents + [None])) for _ in facts]
    want: dict = {}
    for uuid, (source, target) in zip(facts, ends):
        for end in (source, target):
            if end is not None:
                _add(want, end, uuid)
    keys = [s for s, _ in ends] + [t for _, t in ends]
    got = grouped(keys, facts + facts)
    assert {k: v if isinstance(v, str) else set(v) for k, v in got.items()} == want
    assert all(isinstance(v, str) or len(v) == len(set(v)) > 1 for v in got.values())
    for uuid, (source, target) in list(zip(facts, ends))[:10]:  # then changed row by row
        for end in (source, target):
            if end is not None:
                _discard(got, end, uuid)
                _discard(want, end, uuid)
    _add(got, ents[0], "new")
    _add(want, ents[0], "new")
    assert {k: v if isinstance(v, str) else set(v) for k, v in got.items()} == want

    layout = [rng.choice([None, f"u{i}"]) for i in range(rng.randint(0, 60))]
    asked = [f"u{i}" for i in rng.sample(range(80), 30)]
    where = {u: i for i, u in enumerate(layout) if u is not None}
    assert positions_in(asked, layout).tolist() == [where.get(u, -1) for u in asked]
