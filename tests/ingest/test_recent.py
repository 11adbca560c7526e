"""Extraction's context (a group's latest processed episodes) kept in memory: always the answer
the store's exact query gives, whatever the order episodes arrive, are processed or deleted in."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from workbench.ingest.recent import RecentEpisodes
from workbench.store import Store
from workbench.store import graph as g

START = datetime(2026, 1, 1, tzinfo=UTC)


def _episode(uuid: str, group: str, day: int, status: str = "queued") -> dict:
    return {
        "uuid": uuid,
        "group_id": group,
        "name": f"name {uuid}",
        "body": f"body {uuid}",
        "source": "text",
        "source_description": "",
        "priority": 1,
        "reference_time": START + timedelta(days=day),
        "created_at": START,
        "status": status,
    }


def _exact(store: Store, episode: dict, k: int) -> list[dict]:
    return g.recent_episodes(
        store, episode["group_id"], episode["reference_time"], episode["uuid"], k
    )


def _contexts(store: Store, recent: RecentEpisodes, episodes: list[dict], k: int) -> dict:
    return recent.contexts(
        episodes,
        k,
        load=lambda groups, keep: g.latest_episodes(store, groups, keep),
        fallback=lambda e: _exact(store, e, k),
    )


def test_latest_episodes_are_each_groups_first_processed_ones_in_the_exact_order():
    store = Store.open(":memory:", dim=4)
    for i in range(14):  # days repeat: equal reference times are ordered by uuid
        g.insert_episode(
            store, _episode(f"e{i:02d}", f"g{i % 2}", (5 * i) % 4, "done" if i % 5 else "queued")
        )
    latest = g.latest_episodes(store, ["g0", "g1", "nobody"], 3)
    far = START + timedelta(days=100)
    for group in ("g0", "g1"):
        assert latest[group] == g.recent_episodes(store, group, far, "", 3)
        assert len(latest[group]) == 3
    assert latest["nobody"] == []


@pytest.mark.parametrize("seed", range(6))
def test_kept_contexts_equal_the_exact_query_through_adds_deletes_and_late_episodes(seed):
    rng = random.Random(seed)
    store = Store.open(":memory:", dim=4)
    recent = RecentEpisodes(keep=4)
    k = 2
    queued: list[dict] = []
    asked = 0
    for step in range(160):
        action = rng.random()
        if action < 0.45 or not queued:  # a new episode, sometimes older than the others
            ep = _episode(
                f"u{step:03d}",
                rng.choice("ab"),
                step // 3 - (rng.randrange(40) if rng.random() < 0.2 else 0),
            )
            g.insert_episode(store, ep)
            queued.append(g.get_episode(store, ep["uuid"]))
        elif action < 0.8:  # a batch is processed: marked done, then told to the cache
            batch = rng.sample(queued, min(len(queued), rng.randint(1, 3)))
            g.mark_episodes_done(store, [(e["uuid"], 0, 0) for e in batch], START)
            for e in batch:
                queued.remove(e)
                recent.add(
                    e["group_id"],
                    [{key: e[key] for key in ("uuid", "name", "body", "reference_time")}],
                )
        else:  # an episode (processed or not) is deleted
            done = [r[0] for r in store.fetchall("SELECT uuid FROM episodes")]
            gone = g.get_episode(store, rng.choice(done))
            g.delete_episode(store, gone["uuid"])
            queued = [e for e in queued if e["uuid"] != gone["uuid"]]
            recent.forget([gone["group_id"]])
        if queued:
            asking = rng.sample(queued, min(len(queued), 3))
            got = _contexts(store, recent, asking, k)
            for e in asking:
                assert got[e["uuid"]] == _exact(store, e, k), (seed, step, e["uuid"])
                asked += 1
    # the kept lists answered most of them; late episodes needed the exact read
    assert recent.fallbacks < asked / 2
    assert recent.loads >= 2


def test_a_late_episode_beyond_the_kept_ones_is_read_exactly():
    store = Store.open(":memory:", dim=4)
    recent = RecentEpisodes(keep=2)
    for i in range(4):
        g.insert_episode(store, _episode(f"d{i}", "g", 10 + i, "done"))
    late = _episode("late", "g", 11)
    g.insert_episode(store, late)
    late = g.get_episode(store, "late")
    got = _contexts(store, recent, [late], 2)["late"]
    assert [e["uuid"] for e in got] == ["d1", "d0"]
    assert recent.fallbacks == 1


def test_an_add_during_a_load_is_not_lost():
    store = Store.open(":memory:", dim=4)
    recent = RecentEpisodes(keep=2)
    g.insert_episode(store, _episode("old", "g", 1, "done"))
    new = _episode("new", "g", 5, "done")

    def load(groups, keep):
        rows = g.latest_episodes(store, groups, keep)
        # meanwhile another episode of the group is written and told to the cache
        g.insert_episode(store, new)
        recent.add("g", [{key: new[key] for key in ("uuid", "name", "body", "reference_time")}])
        return rows

    ask = _episode("ask", "g", 9)
    recent.contexts([ask], 2, load=load, fallback=lambda e: _exact(store, e, 2))
    again = _contexts(store, recent, [ask], 2)["ask"]
    assert [e["uuid"] for e in again] == ["new", "old"]


def test_groups_beyond_the_limit_are_evicted_and_read_again():
    store = Store.open(":memory:", dim=4)
    recent = RecentEpisodes(keep=2, max_groups=2)
    for group in "abc":
        g.insert_episode(store, _episode(f"{group}1", group, 1, "done"))
    for group in "abca":
        _contexts(store, recent, [_episode(f"{group}-q", group, 5)], 1)
    assert recent.loads == 4  # a was evicted by c, then read again


def test_a_processed_episode_is_not_its_own_context():
    store = Store.open(":memory:", dim=4)
    recent = RecentEpisodes(keep=4)
    for i in range(3):
        g.insert_episode(store, _episode(f"d{i}", "g", i, "done"))
    itself = g.get_episode(store, "d2")
    got = _contexts(store, recent, [itself], 2)["d2"]
    assert [e["uuid"] for e in got] == ["d1", "d0"] == [e["uuid"] for e in _exact(store, itself, 2)]
