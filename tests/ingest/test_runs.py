"""Runs: a group's backlog extracted concurrently, resolved in order, written in order. The
same graph as one episode at a time (the labelled set with its gold replies, and a history of
moves and job changes with the rule LLM), the claim of a run, and a failure inside a run."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from tests.ingest.test_pipeline import open_wb
from workbench.eval.extraction import (
    gold_by_key,
    parse_labelled,
    predictions_from_rows,
    score_set,
)
from workbench.fakes import rule_llm
from workbench.fakes.replay_llm import LABELS, ReplayLLM
from workbench.ingest.run import RunPreparer
from workbench.store import queue as q


def graph_of(wb) -> dict:
    """What a workbench holds, without uuids or times (they differ between two builds)."""
    names = dict(wb.store.fetchall("SELECT uuid, name FROM entities"))
    return {
        "entities": sorted(
            wb.store.fetchall("SELECT group_id, name, entity_type, summary FROM entities")
        ),  # fmt: skip
        "facts": sorted(
            (g, names[s], names[t], fact, inv is not None, exp is not None)
            for g, s, t, fact, inv, exp in wb.store.fetchall(
                "SELECT group_id, source_uuid, target_uuid, fact, invalid_at, expired_at FROM facts"
            )
        ),
        "mentions": sorted(
            wb.store.fetchall(
                "SELECT ep.name, en.name FROM mentions m JOIN episodes ep ON ep.uuid = "
                "m.episode_uuid JOIN entities en ON en.uuid = m.entity_uuid"
            )
        ),
        "episodes": sorted(
            wb.store.fetchall("SELECT name, status, entity_count, fact_count FROM episodes")
        ),  # fmt: skip
        "vectors": (
            wb.store.fetchone("SELECT count(*) FROM entity_embeddings")[0],
            wb.store.fetchone("SELECT count(*) FROM fact_embeddings")[0],
        ),
    }


def build(fake_llm, embedder, episodes, run: str):
    wb = open_wb(fake_llm, embedder, SVC_KNOWLEDGE_QUEUE_GROUP_RUN=run)
    try:
        for ep in episodes:
            wb.add_memory(**ep)
        assert wb.process_pending() == len(episodes)
        calls = wb.store.fetchone("SELECT count(*) FROM llm_calls")[0]
        frames = [
            wb.store.fetch_dicts(f"SELECT * FROM {table}")
            for table in ("episodes", "entities", "facts", "mentions")
        ]
        return graph_of(wb), calls, predictions_from_rows(*frames)
    finally:
        wb.close()


def test_the_labelled_set_in_runs_gives_the_same_graph_and_score(fake_llm, hash_embedder):
    labelled = parse_labelled(LABELS.read_text().splitlines())
    episodes = [
        {
            "name": ep.name,
            "episode_body": ep.episode_body,
            "group_id": ep.group_id,
            "reference_time": ep.reference_time,
            "source_description": ep.source_description,
        }
        for ep in labelled
    ]
    fake_llm.set_responder(ReplayLLM())
    one, one_calls, one_pred = build(fake_llm, hash_embedder, episodes, "1")
    runs, run_calls, run_pred = build(fake_llm, hash_embedder, episodes, "8")
    assert runs == one
    gold = gold_by_key(labelled)
    assert score_set(run_pred, gold) == score_set(one_pred, gold)
    assert one_calls <= run_calls <= 3 * len(episodes)


def history(count: int, seed: int = 7) -> list[dict]:
    """One person's history: moves, job changes (each invalidating the previous one), tools,
    restated facts, in one group, one day apart."""
    rng = random.Random(seed)
    sentences = [
        "Tom lives in {city}.",
        "Tom moved to {city}.",
        "Tom works at {org}.",
        "Maria Keller works at {org}.",
        "Tom uses {tool}.",
        "Maria Keller lives in {city}.",
        "Tom leads Atlas.",
    ]
    start = datetime(2024, 1, 1, tzinfo=UTC)
    out = []
    for i in range(count):
        parts = rng.sample(sentences, 2)
        body = " ".join(
            p.format(
                city=rng.choice(["Berlin", "Munich"]),
                org=rng.choice(["Acme", "Globex"]),
                tool=rng.choice(["Neovim", "VS Code", "Python"]),
            )
            for p in parts
        )
        out.append(
            {
                "name": f"day {i:03d}",
                "episode_body": body,
                "group_id": "tom",
                "reference_time": (start + timedelta(days=i)).isoformat(),
            }
        )
    return out


@pytest.mark.parametrize("run", ["4", "8", "16"])
def test_a_history_of_changes_in_runs_gives_the_same_graph(fake_llm, hash_embedder, run):
    fake_llm.set_responder(rule_llm.respond)
    episodes = history(40)
    one, one_calls, _ = build(fake_llm, hash_embedder, episodes, "1")
    runs, run_calls, _ = build(fake_llm, hash_embedder, episodes, run)
    assert runs == one
    invalidated = [f for f in one["facts"] if f[4]]
    assert len(invalidated) >= 5  # the history really changes its mind
    assert one_calls <= run_calls <= 3 * len(episodes)


def test_a_run_is_claimed_in_order_and_stops_at_a_message_not_due(fake_llm, hash_embedder):
    wb = open_wb(fake_llm, hash_embedder)
    try:
        uuids = [
            wb.add_memory(f"e{i}", "Tom uses Python.", group_id="g")["episode_uuid"]
            for i in range(6)
        ]
        other = wb.add_memory("o", "Tom uses Neovim.", group_id="h")["episode_uuid"]
        # the fourth of g waits for a retry: a run never passes it
        wb.store.execute(
            "UPDATE queue SET available_at = ? WHERE episode_uuid = ?",
            [wb.clock() + timedelta(hours=1), uuids[3]],
        )
        claimed = q.claim_heads(wb.store, "w", wb.clock(), 60, limit=10, run_size=8)[0]
        assert [m["episode_uuid"] for m in claimed] == [*uuids[:3], other]
        q.release_all(wb.store)
        # no room beyond the heads: only heads
        claimed = q.claim_heads(wb.store, "w", wb.clock(), 60, limit=2, run_size=8)[0]
        assert [m["episode_uuid"] for m in claimed] == [uuids[0], other]
        q.release_all(wb.store)
        # room is shared: the limit holds
        claimed = q.claim_heads(wb.store, "w", wb.clock(), 60, limit=3, run_size=8)[0]
        assert [m["episode_uuid"] for m in claimed] == [uuids[0], uuids[1], other]
        q.release_all(wb.store)
        # run_size 1: heads only, as before
        claimed = q.claim_heads(wb.store, "w", wb.clock(), 60, limit=10, run_size=1)[0]
        assert [m["episode_uuid"] for m in claimed] == [uuids[0], other]
    finally:
        wb.close()


def test_only_the_episode_that_kills_the_process_fails_as_crashed_not_its_run(
    fake_llm, hash_embedder
):
    """A run keeps all its messages in flight: a process that dies during it leaves each with
    a crash. They then go one at a time, so only the one that kills the process again and
    again reaches ``max_crashes``; the others are claimed alone and not failed."""
    wb = open_wb(fake_llm, hash_embedder)
    try:
        uuids = [
            wb.add_memory(f"e{i}", "Tom uses Python.", group_id="g")["episode_uuid"]
            for i in range(4)
        ]
        run = q.claim_heads(wb.store, "p1", wb.clock(), 60, limit=8, run_size=8)[0]
        assert [m["episode_uuid"] for m in run] == uuids  # a run of four, then a crash
        assert q.recover_crashed(wb.store, wb.clock(), 3) == (4, [])
        for crash in range(2):  # the culprit, the head, alone each time
            claimed = q.claim_heads(wb.store, f"p{crash + 2}", wb.clock(), 60, 8, run_size=8)[0]
            assert [m["episode_uuid"] for m in claimed] == [uuids[0]]
            returned, failed = q.recover_crashed(wb.store, wb.clock(), 3)
        assert failed == [uuids[0]] and returned == 0
        # the innocent ones still go alone (each was in flight once), not failed
        claimed = q.claim_heads(wb.store, "p4", wb.clock(), 60, limit=8, run_size=8)[0]
        assert [m["episode_uuid"] for m in claimed] == [uuids[1]]
        states = dict(wb.store.fetchall("SELECT episode_uuid, state FROM queue"))
        assert [states[u] for u in uuids] == ["failed", "processing", "queued", "queued"]
    finally:
        wb.close()


def test_a_failure_inside_a_run_writes_the_episodes_before_it_and_returns_the_rest(
    fake_llm, hash_embedder
):
    """The facts call of the third episode fails once: the first two are written, the third
    is retried, the ones after it go back to the queue without spending an attempt; in the
    end every episode is written exactly once and the graph is the sequential one."""
    episodes = history(8, seed=3)
    fake_llm.set_responder(rule_llm.respond)
    expected, _, _ = build(fake_llm, hash_embedder, episodes, "1")

    failures = {"left": 1}

    def flaky(request):
        text = rule_llm.episode_text(request)
        if (
            failures["left"]
            and "ExtractedEdges" in str(request.get("response_format"))
            and episodes[2]["episode_body"] in text
        ):
            failures["left"] -= 1
            return {"edges": "not a list"}  # fails validation: a retried attempt
        return rule_llm.respond(request)

    fake_llm.set_responder(flaky)
    wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_QUEUE_GROUP_RUN="8")
    try:
        uuids = [wb.add_memory(**ep)["episode_uuid"] for ep in episodes]
        wb.queue.outcomes.base_delay = 0.0  # the retry is due at once
        first = wb.queue.drain(max_messages=8)
        rows = dict(wb.store.fetchall("SELECT episode_uuid, attempts FROM queue"))
        states = dict(wb.store.fetchall("SELECT episode_uuid, state FROM queue"))
        assert [states[u] for u in uuids[:2]] == ["done", "done"]
        assert states[uuids[2]] == "queued" and rows[uuids[2]] == 1  # its attempt counted
        assert all(states[u] == "queued" and rows[u] == 0 for u in uuids[3:])  # unspent
        assert first >= 3
        wb.process_pending()
        assert {s for (s,) in wb.store.fetchall("SELECT state FROM queue")} == {"done"}
        assert graph_of(wb) == expected
    finally:
        wb.close()


def test_a_run_shows_later_episodes_only_its_current_facts():
    """As the graph shows only current facts, a fact made earlier in the run that was stated
    with its end ("lived in Paris until 2020") or ended by the run is not shown again to be
    invalidated."""

    def made(uuid, invalid_at=None):
        return {"uuid": uuid, "relation": "LIVES_IN", "fact": uuid, "source_uuid": "alice",
                "target_uuid": "city", "invalid_at": invalid_at}  # fmt: skip

    run = [made("paris", datetime(2020, 1, 1, tzinfo=UTC)), made("rome"), made("berlin")]
    shown = RunPreparer._current_touching(run, {"rome"}, {"alice"}, [], [])
    assert [f["uuid"] for f in shown] == ["berlin"]
