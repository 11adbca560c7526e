"""The durable queue on a real DuckDB store: ordering, priorities, leases, retries, metrics."""

from datetime import timedelta

import pytest

from tests import prom
from workbench import errors
from workbench.clock import ManualClock
from workbench.index.publish import Publisher
from workbench.ingest.context import IngestContext
from workbench.ingest.queue.episode_queue import EpisodeQueue, QueueConfig
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store import graph as g
from workbench.store import queue as q


class Work:
    """The queue's collaborator from functions; by default a commit only acknowledges."""

    def __init__(self, prepare, commit=None, prefetch=None):
        self.prepare = prepare
        self._commit = commit
        self._prefetch = prefetch

    def prefetch(self, messages):
        return self._prefetch(messages) if self._prefetch else messages

    def commit(self, results, ack):
        if self._commit is not None:
            return self._commit(results, ack)
        return ack()

    def available(self):
        return self.up

    up = True


class NoIndexes:
    """The publisher's engine when there are no search indexes: nothing to catch up."""

    def catch_up(self):
        return 0


def get_message(store, episode_uuid):
    rows = store.fetch_dicts("SELECT * FROM queue WHERE episode_uuid = ?", [episode_uuid])
    return rows[0] if rows else None


def claim_next(store, owner, now, lease_seconds):
    claimed = q.claim_heads(store, owner, now, lease_seconds, 1)[0]
    return claimed[0] if claimed else None


def sample(text: str, name: str, labels: dict | None = None) -> float | None:
    return prom.matching(text, name, **(labels or {}))


@pytest.fixture
def env():
    store = Store.open(":memory:", dim=4)
    clock = ManualClock()
    metrics = Metrics()
    seen: list[str] = []
    behaviour: dict[str, list[BaseException]] = {}

    def processor(message):
        uuid = message["episode_uuid"]
        failures = behaviour.get(uuid)
        if failures:
            raise failures.pop(0)
        seen.append(uuid)
        return uuid

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(processor),
        QueueConfig(concurrency=2, base_delay=2.0),
    )

    def add(uuid: str, group: str, priority: int = 1):
        g.insert_episode(
            store,
            {
                "uuid": uuid,
                "group_id": group,
                "name": uuid,
                "body": "b",
                "source": "text",
                "source_description": "",
                "reference_time": clock(),
                "created_at": clock(),
                "priority": priority,
            },
        )
        q.enqueue(store, uuid, group, priority, clock())
        queue.notify_enqueued(priority)
        clock.advance(seconds=1)

    return store, clock, metrics, queue, seen, behaviour, add


def test_a_group_runs_in_order_while_groups_run_in_parallel(env):
    store, clock, _, _, _, _, add = env
    add("a1", "A")
    add("a2", "A")
    add("b1", "B")  # noqa: E702
    first = claim_next(store, "w1", clock(), 60)
    second = claim_next(store, "w2", clock(), 60)
    assert (first["episode_uuid"], second["episode_uuid"]) == ("a1", "b1")
    assert claim_next(store, "w3", clock(), 60) is None  # a2 waits for a1
    q.mark_done_many(store, ["a1"], clock())
    assert claim_next(store, "w3", clock(), 60)["episode_uuid"] == "a2"


def test_priority_orders_groups(env):
    store, clock, _, _, _, _, add = env
    add("low", "L", priority=2)
    add("normal", "N", 1)
    add("high", "H", 0)  # noqa: E702
    order = [claim_next(store, "w", clock(), 60)["episode_uuid"] for _ in range(3)]
    assert order == ["high", "normal", "low"]


def test_a_crashed_workers_message_returns_after_its_lease(env):
    store, clock, _, queue, seen, _, add = env
    add("e1", "A")
    assert claim_next(store, "dead-worker", clock(), 60)["episode_uuid"] == "e1"
    assert queue.drain() == 0  # leased: nothing to do yet
    clock.advance(seconds=61)  # the lease runs out
    assert queue.drain() == 1 and seen == ["e1"]


def test_start_returns_in_flight_messages_of_a_previous_run(env):
    store, clock, _, queue, _, _, add = env
    add("e1", "A")
    claim_next(store, "previous-process", clock(), 600)
    assert store.fetchone("SELECT status FROM episodes")[0] == "processing"
    assert q.release_all(store) == 1
    assert get_message(store, "e1")["state"] == "queued"
    assert store.fetchone("SELECT status, status_detail FROM episodes")[0:2] == (
        "queued",
        "returned to the queue",
    )


def test_transient_failures_retry_with_backoff_and_count(env):
    store, clock, metrics, queue, seen, behaviour, add = env
    add("e1", "A")
    behaviour["e1"] = [errors.LLMRateLimited("429"), errors.LLMTimeout("slow")]
    assert queue.drain() == 1  # first attempt fails, retry scheduled
    msg = get_message(store, "e1")
    assert msg["state"] == "queued" and msg["error_type"] == "RateLimitError"
    assert msg["available_at"] > clock()
    assert queue.drain() == 0  # not due yet
    clock.advance(seconds=10)
    queue.drain()
    clock.advance(seconds=20)
    queue.drain()
    assert seen == ["e1"]
    text = metrics.exposition().decode()
    assert sample(text, "messaging_retries_total", {"queue_name": "episodes"}) == 2
    assert (
        sample(
            text,
            "messaging_messages_processed_total",
            {"queue_name": "episodes", "status": "success"},
        )
        == 1
    )
    assert sample(text, "messaging_wait_time_seconds_count") == 3


def test_validation_failures_retry_once_then_fail_and_can_be_requeued(env):
    store, clock, metrics, queue, seen, behaviour, add = env
    add("e1", "A")
    add("e2", "A")
    behaviour["e1"] = [errors.StructuredOutputError("ExtractedEntities", "missing 'entities'")] * 2
    queue.drain()
    msg = get_message(store, "e1")
    assert msg["state"] == "failed" and msg["error_type"] == "ValidationError"
    assert "ExtractedEntities" in msg["error_message"]
    assert g.get_episode(store, "e1")["status"] == "failed"
    assert seen == ["e2"]  # a failed head does not block its group
    text = metrics.exposition().decode()
    assert (
        sample(
            text,
            "messaging_messages_failed_total",
            {"queue_name": "episodes", "error_type": "ValidationError"},
        )
        == 1
    )
    assert sample(text, "messaging_messages_processed_total", {"status": "failure"}) == 1
    status = q.status(store, clock())
    assert status["counts"]["failed"] == 1 and status["failed"][0]["episode_uuid"] == "e1"
    assert queue.retry_failed(["e1"]) == ["e1"]
    queue.drain()
    assert seen == ["e2", "e1"]


def test_queue_gauges_follow_the_table(env):
    store, clock, metrics, queue, _, _, add = env
    add("h", "A", 0)
    add("n1", "B", 1)
    add("n2", "C", 1)  # noqa: E702
    queue.refresh_gauges()
    text = metrics.exposition().decode()
    assert sample(text, "messaging_queue_depth", {"priority": "normal"}) == 2
    assert sample(text, "messaging_queue_depth", {"priority": "high"}) == 1
    assert sample(text, "messaging_consumer_lag_seconds") > 0
    queue.drain()
    text = metrics.exposition().decode()
    assert sample(text, "messaging_queue_depth", {"priority": "normal"}) == 0
    assert sample(text, "messaging_active_consumers") == 0
    assert sample(text, "messaging_consumer_saturation") == 0


def test_workers_process_in_the_background_and_stop_cleanly(env):
    store, clock, _, queue, seen, _, add = env
    for i in range(5):
        add(f"e{i}", f"G{i % 2}")
    queue.start()
    import time

    deadline = time.monotonic() + 10
    while len(seen) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    queue.stop(timeout=5)
    assert sorted(seen) == [f"e{i}" for i in range(5)]
    assert [u for u in seen if u in ("e0", "e2", "e4")] == ["e0", "e2", "e4"]
    assert not queue.running
    assert clock() - timedelta(seconds=0) == clock()


def blocking_group_commit():
    """A GroupCommit whose write of ``["first"]`` blocks until released, whose writes
    holding "bad" fail, and which records the batches it wrote."""
    import threading

    from workbench.ingest.queue.group_commit import GroupCommit

    batches: list[list[str]] = []
    first_write_started, release_first = threading.Event(), threading.Event()

    def write(items):
        if items == ["first"]:
            first_write_started.set()
            release_first.wait(5)
        if "bad" in items:
            raise ValueError("bad item")
        batches.append(list(items))

    return batches, first_write_started, release_first, GroupCommit(write, max_batch=8)


def while_first_is_written(commit, started, release, lead, followers, waiting: int):
    """Run ``lead`` in a thread (its write blocks), then the ``followers`` once it writes;
    release the write when ``waiting`` items are pending behind it; join them all."""
    import threading
    import time

    threads = [threading.Thread(target=lead)]
    threads[0].start()
    assert started.wait(5)
    threads += [threading.Thread(target=f) for f in followers]
    for t in threads[1:]:
        t.start()
    deadline = time.monotonic() + 5
    while len(commit._pending) < waiting and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(5)


def test_group_commit_writes_what_arrived_meanwhile_in_one_batch_and_isolates_failures():

    batches, first_write_started, release_first, commit = blocking_group_commit()
    errors_seen: dict[str, BaseException] = {}

    def submit(item):
        try:
            commit.submit(item)
        except ValueError as exc:
            errors_seen[item] = exc

    while_first_is_written(
        commit,
        first_write_started,
        release_first,
        lambda: submit("first"),
        [lambda x=x: submit(x) for x in ("a", "bad", "b")],
        waiting=3,
    )
    assert batches[0] == ["first"]
    # the three that waited went as one batch, which failed; then one by one
    assert sorted(map(tuple, batches[1:])) == [("a",), ("b",)]
    assert list(errors_seen) == ["bad"]


def test_drain_writes_the_heads_of_several_groups_in_one_commit(env):
    store, clock, metrics, _, _, _, add = env
    commits: list[list[str]] = []

    def prepare(message):
        if message["episode_uuid"] == "b1":
            raise errors.LLMError("refused")  # fails alone, before the write
        return message["episode_uuid"]

    def commit(results, ack):
        with store.transaction():
            ack()
        commits.append(results)

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(prepare, commit),
        QueueConfig(max_attempts=1, batch_size=8),
    )
    for uuid, group in (("a1", "A"), ("a2", "A"), ("b1", "B"), ("c1", "C")):
        add(uuid, group)
    assert queue.drain() == 4
    # first round: heads of A, B and C (b1 failed); second round: a2
    assert commits == [["a1", "c1"], ["a2"]]
    states = dict(store.fetchall("SELECT episode_uuid, state FROM queue"))
    assert states == {"a1": "done", "a2": "done", "b1": "failed", "c1": "done"}
    text = metrics.exposition()
    assert sample(text, "messaging_messages_processed_total", {"status": "success"}) == 3


def test_claim_heads_leases_only_group_heads_in_priority_order(env):
    store, clock, _, _, _, _, add = env
    add("a1", "A")
    add("a2", "A")
    add("b1", "B", priority=2)
    add("c1", "C", priority=0)  # noqa: E702
    claimed = q.claim_heads(store, "w", clock(), 60, 10)[0]
    assert [m["episode_uuid"] for m in claimed] == ["c1", "a1", "b1"]
    statuses = dict(store.fetchall("SELECT uuid, status FROM episodes"))
    assert statuses == {"a1": "processing", "a2": "queued", "b1": "processing", "c1": "processing"}
    assert q.claim_heads(store, "w", clock(), 60, 10)[0] == []  # a2 waits for a1


def test_drain_prepares_the_heads_of_different_groups_concurrently(env):
    import threading

    store, clock, metrics, _, _, _, add = env
    together = threading.Barrier(3, timeout=5)  # broken (an error) unless 3 run at once

    def prepare(message):
        together.wait()
        return message["episode_uuid"]

    def commit(results, ack):
        with store.transaction():
            ack()

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock), Work(prepare, commit), QueueConfig(concurrency=3)
    )
    for uuid, group in (("a1", "A"), ("b1", "B"), ("c1", "C")):
        add(uuid, group)
    try:
        assert queue.drain() == 3
    finally:
        queue.stop()
    assert {s for (s,) in store.fetchall("SELECT DISTINCT state FROM queue")} == {"done"}


def wait_for(condition, seconds: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def run_until(queue, condition, seconds: float = 10.0) -> None:
    """Start the queue's workers, wait for ``condition``, stop them (also on a failure)."""
    queue.start()
    try:
        wait_for(condition, seconds)
    finally:
        queue.stop(timeout=5)


def states(store) -> dict[str, int]:
    return dict(store.fetchall("SELECT state, count(*) FROM queue GROUP BY state"))


def test_one_claim_serves_several_workers(env, monkeypatch):
    """The dispatcher claims the heads of up to 2 x concurrency groups in one transaction."""
    import threading
    import time

    store, clock, metrics, _, _, _, add = env
    claims: list[int] = []
    real_claim = q.claim_heads

    def counting_claim(*args):
        claimed, more = real_claim(*args)
        claims.append(len(claimed))
        return claimed, more

    monkeypatch.setattr(q, "claim_heads", counting_claim)
    go = threading.Event()
    order: list[str] = []

    def prepare(message):
        go.wait(5)  # the first claim must see every group waiting
        order.append(message["episode_uuid"])
        return message["episode_uuid"]

    # a long poll: progress must come from events (enqueues, finished episodes), not polls
    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(prepare),
        QueueConfig(concurrency=3, batch_size=8, poll_seconds=5),
    )
    for i in range(4):
        for group in "ABCDEFGH":
            add(f"{group}{i}", group)
    queue.start()
    try:
        wait_for(lambda: claims)
        assert claims[0] == 6  # 2 x 3 workers' worth, not one message per worker
        go.set()
        started = time.monotonic()
        wait_for(lambda: states(store) == {"done": 32})
        assert time.monotonic() - started < 4
    finally:
        queue.stop(timeout=5)
    assert sum(claims) == 32 and len(claims) < 32
    # a claim that found every head taken is not repeated until a write frees a group
    assert claims.count(0) <= 1
    for group in "ABCDEFGH":  # each group in order
        assert [u for u in order if u[0] == group] == [f"{group}{i}" for i in range(4)]


def test_workers_hand_their_episodes_to_one_shared_commit(env, monkeypatch):
    """A prepared episode waits (up to the linger) for those still being prepared."""
    import time

    from workbench.ingest.queue import dispatch as queue_module

    store, clock, metrics, _, _, _, add = env
    monkeypatch.setattr(queue_module, "COMMIT_LINGER_SECONDS", 5.0)
    commits: list[list[str]] = []

    def prepare(message):
        uuid = message["episode_uuid"]
        time.sleep({"a1": 0.0, "b1": 0.3, "c1": 0.1}[uuid])
        if uuid == "c1":
            raise errors.LLMError("refused")  # fails alone, before the write
        return uuid

    def commit(results, ack):
        with store.transaction():
            ack()
        commits.append(sorted(results))

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(prepare, commit),
        QueueConfig(concurrency=3, max_attempts=1),
    )
    for uuid, group in (("a1", "A"), ("b1", "B"), ("c1", "C")):
        add(uuid, group)
    started = time.monotonic()
    run_until(queue, lambda: states(store) == {"done": 2, "failed": 1})
    assert commits == [["a1", "b1"]]  # one transaction for both,
    assert time.monotonic() - started < 4  # as soon as nothing else was being prepared
    text = metrics.exposition()
    assert sample(text, "messaging_messages_processed_total", {"status": "success"}) == 2
    assert sample(text, "messaging_active_consumers") == 0


def test_stop_returns_claimed_messages_no_worker_started(env):
    import threading

    store, clock, metrics, _, _, _, add = env
    started, release = threading.Event(), threading.Event()

    def prepare(message):
        started.set()
        release.wait(5)
        return message["episode_uuid"]

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(prepare),
        QueueConfig(concurrency=1, poll_seconds=0.01),
    )
    add("a1", "A")
    add("b1", "B")  # noqa: E702 - one worker: b1 waits, claimed
    queue.start()
    assert started.wait(5)
    wait_for(lambda: states(store) == {"processing": 2})
    threading.Timer(0.2, release.set).start()
    queue.stop(timeout=5)
    by_uuid = dict(store.fetchall("SELECT episode_uuid, state FROM queue"))
    assert by_uuid == {"a1": "done", "b1": "queued"}  # finished, and returned unstarted
    assert not queue.running
    # the episode says so too (its claim had set it to processing), and its attempt is unused
    assert store.fetchone("SELECT status FROM episodes WHERE uuid = 'b1'")[0] == "queued"
    assert get_message(store, "b1")["attempts"] == 0


def test_expired_leases_return_to_the_queue_but_those_of_live_work(env):
    store, clock, _, _, _, _, add = env
    add("a1", "A")
    add("b1", "B")  # noqa: E702
    assert len(q.claim_heads(store, "me", clock(), 60, 10)[0]) == 2
    clock.advance(seconds=61)
    assert q.requeue_expired_leases(store, clock(), keep=["a1"]) == 1
    by_uuid = dict(store.fetchall("SELECT episode_uuid, state FROM queue"))
    assert by_uuid == {"a1": "processing", "b1": "queued"}
    assert q.requeue_expired_leases(store, clock()) == 1  # nothing kept: a1 too


def test_a_group_runs_on_without_waiting_for_polls(env):
    import time

    store, clock, metrics, _, _, _, add = env
    done: list[str] = []

    def commit(results, ack):
        ack()
        done.extend(results)

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(lambda m: m["episode_uuid"], commit),
        QueueConfig(concurrency=2, poll_seconds=0.5),
    )
    for i in range(5):
        add(f"a{i}", "A")
    started = time.monotonic()
    run_until(queue, lambda: len(done) == 5)
    assert done == [f"a{i}" for i in range(5)]
    assert time.monotonic() - started < 1.5  # not a 0.5 s poll per episode


def test_a_retry_falls_due_and_runs_although_leases_are_shorter_than_the_poll(env):
    store, clock, metrics, _, _, _, add = env
    attempts: list[str] = []

    def prepare(message):
        attempts.append(message["episode_uuid"])
        if len(attempts) == 1:
            raise errors.LLMTimeout("slow")  # transient: retried after a backoff
        return message["episode_uuid"]

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(prepare),
        QueueConfig(concurrency=1, lease_seconds=1.2, poll_seconds=0.2, base_delay=1.0),
    )
    add("a1", "A")
    queue.start()
    try:
        wait_for(lambda: states(store) == {"queued": 1} and attempts)
        clock.advance(seconds=60)  # the retry is due; nothing is enqueued to say so
        wait_for(lambda: states(store) == {"done": 1}, seconds=5)
    finally:
        queue.stop(timeout=5)
    assert attempts == ["a1", "a1"]


def test_a_failure_that_cannot_be_recorded_does_not_strand_the_batch(env, monkeypatch):
    import time

    from workbench.ingest.queue import dispatch as queue_module

    store, clock, metrics, _, _, _, add = env
    monkeypatch.setattr(queue_module, "COMMIT_LINGER_SECONDS", 5.0)  # one batch for both

    def prepare(message):
        if message["episode_uuid"] == "a1":
            raise errors.LLMError("refused")
        time.sleep(0.2)  # written together with a1's failure
        return message["episode_uuid"]

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(prepare),
        QueueConfig(concurrency=2, max_attempts=1),
    )

    def failing_record(message, exc, duration):
        raise RuntimeError("the store is gone")

    monkeypatch.setattr(queue.outcomes, "failed", failing_record)
    add("a1", "A")
    add("b1", "B")  # noqa: E702
    run_until(queue, lambda: get_message(store, "b1")["state"] == "done")
    # a1 stays leased until its lease runs out (then it returns); b1 was written
    assert get_message(store, "a1")["state"] == "processing"
    text = metrics.exposition()
    assert sample(text, "messaging_messages_processed_total", {"status": "success"}) == 1


def test_a_worker_raising_past_its_handling_fails_the_attempt_not_loops(env):
    class Escaped(BaseException):  # not an Exception: nothing in the worker catches it
        pass

    store, clock, metrics, _, _, _, add = env
    calls: list[str] = []

    def prepare(message):
        calls.append(message["episode_uuid"])
        raise Escaped("boom")

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(prepare),
        QueueConfig(concurrency=1, max_attempts=1, poll_seconds=0.01),
    )
    add("a1", "A")
    run_until(queue, lambda: states(store) == {"failed": 1})
    assert calls == ["a1"]  # failed once, not handed out again and again


def test_a_stop_that_times_out_leaves_nothing_claimed(env):
    """The dispatcher waits for the gate (held, say, by a maintenance run) past the stop's
    timeout: whatever it does after, nothing stays leased to the stopped run."""
    import threading
    import time

    store, clock, metrics, _, _, _, add = env
    gate = Publisher(NoIndexes())  # the search engine's publish gate, of no indexes
    queue = EpisodeQueue(
        IngestContext(store, metrics, clock, publisher=gate),
        Work(lambda m: m["episode_uuid"]),
        QueueConfig(concurrency=2),
    )
    queue.start()
    held = threading.Event()

    def hold():
        with gate:
            held.set()
            time.sleep(1.0)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(5)
    add("a1", "A")
    add("b1", "B")  # noqa: E702
    queue.notify_enqueued(1)  # (add() tells the fixture's queue) it wakes, waits for the gate
    time.sleep(0.1)
    queue.stop(timeout=0.3)
    holder.join(5)
    time.sleep(0.3)  # the abandoned dispatcher got the gate meanwhile
    assert states(store) == {"queued": 2}
    assert not queue.running


def test_the_dispatcher_keeps_the_leases_of_unfinished_messages(env):
    import time

    store, clock, metrics, _, _, _, add = env
    held: list[bool] = []

    def prepare(message):
        clock.advance(seconds=10)  # this episode takes 10 s (leases last 0.3 s)
        time.sleep(0.4)  # the dispatcher renews every 0.1 s (real time)
        held.append(get_message(store, message["episode_uuid"])["leased_until"] > clock())
        return message["episode_uuid"]

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(prepare),
        QueueConfig(concurrency=1, lease_seconds=0.3, poll_seconds=0.01),
    )
    add("a1", "A")
    run_until(queue, lambda: states(store) == {"done": 1})
    # not expired while it ran: never handed out again, processed once
    assert held == [True]
    assert get_message(store, "a1")["attempts"] == 1


def test_an_interrupted_group_write_marks_every_waiting_item_failed():
    from workbench.ingest.queue.group_commit import GroupCommit, _Ticket

    def write(items):
        raise SystemExit("stopping")

    tickets = [_Ticket("a"), _Ticket("b")]
    with pytest.raises(SystemExit):
        GroupCommit(write).write_batch(tickets)
    # nobody waiting on them may take the unwritten items for written ones
    for ticket in tickets:
        assert ticket.done
        with pytest.raises(SystemExit):
            ticket.result()


def test_a_leader_keeps_writing_until_its_own_item_is_written():
    from workbench.ingest.queue.group_commit import GroupCommit, _Ticket

    written: list[str] = []
    commit = GroupCommit(lambda items: written.extend(items), max_batch=2)
    waiting = [_Ticket(x) for x in ("w1", "w2", "w3")]  # queued by threads still waiting
    commit._pending.extend(waiting)
    commit.submit("mine")
    assert written == ["w1", "w2", "w3", "mine"]  # oldest first, two per transaction
    assert all(t.done for t in waiting)


def test_a_batch_keeps_its_leases_while_it_is_prepared(env):
    import time

    store, clock, metrics, _, _, _, add = env
    leases: dict[str, bool] = {}

    def prepare(message):
        uuid = message["episode_uuid"]
        if uuid == "a1":
            clock.advance(seconds=10)  # this episode takes 10 s (leases last 0.3 s)
            time.sleep(0.4)  # the keeper renews every 0.1 s (real time)
        else:
            leases[uuid] = get_message(store, uuid)["leased_until"] > clock()
        return uuid

    def commit(results, ack):
        with store.transaction():
            ack()

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(prepare, commit),
        QueueConfig(concurrency=1, lease_seconds=0.3),
    )
    add("a1", "A")
    add("b1", "B")
    assert queue.drain() == 2
    assert leases == {"b1": True}  # still ours when its turn came, not expired


def test_a_single_message_keeps_its_lease_while_it_is_processed(env):
    import time

    store, clock, metrics, _, _, _, add = env
    held: list[bool] = []

    def process(message):
        uuid = message["episode_uuid"]
        clock.advance(seconds=10)  # this episode takes 10 s (leases last 0.3 s)
        time.sleep(0.4)  # the keeper renews every 0.1 s (real time)
        held.append(get_message(store, uuid)["leased_until"] > clock())
        return uuid

    def commit(results, ack):
        with store.transaction():
            ack()

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(process, commit),
        QueueConfig(concurrency=1, lease_seconds=0.3),
    )
    add("a1", "A")
    assert queue.drain(1) == 1
    assert held == [True]  # not expired: no other worker could have taken it meanwhile
    assert get_message(store, "a1")["state"] == "done"


def test_group_commit_writes_batches_of_several_workers_together():

    batches, first_write_started, release_first, commit = blocking_group_commit()
    results: dict[str, list] = {}

    def submit(name, items):
        results[name] = commit.submit_many(items)

    while_first_is_written(
        commit,
        first_write_started,
        release_first,
        lambda: submit("leader", ["first"]),
        [lambda: submit("w1", ["a1", "a2"]), lambda: submit("w2", ["b1", "b2"])],
        waiting=4,
    )
    assert batches[0] == ["first"]
    assert sorted(batches[1]) == ["a1", "a2", "b1", "b2"]  # two workers, one transaction
    assert all(t.done and t.error is None for ts in results.values() for t in ts)
    assert commit.submit_many([]) == []
    bad = commit.submit_many(["c", "bad"])  # a failing item fails alone
    assert bad[0].error is None and isinstance(bad[1].error, ValueError)
    assert batches[-1] == ["c"]


def test_a_failure_of_an_older_claim_leaves_the_message_claimed_since_alone(env):
    """Retry and final failure touch the message only while it is the claim they belong to
    (its seq) and still processing: not after the episode was deleted, added again under the
    same uuid and claimed by another worker."""
    store, clock, _, _, _, _, add = env
    add("e1", "A")
    old = claim_next(store, "w1", clock(), 60)
    g.delete_episode(store, "e1")
    add("e1", "B")
    new = claim_next(store, "w2", clock(), 60)
    assert new["seq"] != old["seq"]
    due = clock() + timedelta(seconds=30)
    assert not q.schedule_retry(store, "e1", due, "TimeoutError", "late", False, old["seq"])
    assert not q.mark_failed(store, "e1", clock(), "UnknownError", "late", old["seq"])
    row = get_message(store, "e1")
    assert (row["state"], row["lease_owner"], row["error_type"]) == ("processing", "w2", None)
    assert q.schedule_retry(store, "e1", due, "TimeoutError", "now", False, new["seq"])
    assert get_message(store, "e1")["available_at"] == due
    claim_next(store, "w2", due, 60)
    assert q.mark_failed(store, "e1", due, "UnknownError", "for good", new["seq"])
    assert get_message(store, "e1")["state"] == "failed"


def test_an_episode_that_kills_the_process_again_and_again_is_failed_as_crashed(env):
    """Each start-up finds it in flight (its process died): after ``max_crashes`` of them it
    is failed with the reason ``crashed`` instead of killing every process that takes it."""
    store, clock, _, _, _, _, add = env
    add("a1", "A")
    for crash in range(1, 4):
        claim_next(store, f"process-{crash}", clock(), 600)  # a1, then the process dies
        returned, failed = q.recover_crashed(store, clock(), 3)
        message = get_message(store, "a1")
        if crash < 3:
            assert (returned, failed) == (1, [])
            assert (message["state"], message["attempts"]) == ("queued", 0)  # not an attempt
    assert (returned, failed) == (0, ["a1"])
    assert (message["state"], message["error_type"], message["crashes"]) == ("failed", "crashed", 3)
    assert "died 3 times" in message["error_message"]
    status = store.fetchone("SELECT status, status_detail FROM episodes WHERE uuid = 'a1'")
    assert status[0] == "failed" and status[1].startswith("crashed")
    assert q.requeue_failed(store, clock(), ["a1"], None) == ["a1"]
    assert get_message(store, "a1")["crashes"] == 0


@pytest.mark.duckdb_only(
    "a file's start-up counts every in-flight message as crashed; a shared store counts a "
    "message when its lease runs out (tests/store/test_postgres.py)"
)
def test_the_queue_fails_a_crash_looping_episode_when_it_starts(env):
    store, clock, metrics, _, seen, _, add = env
    add("a1", "A")
    add("b1", "B")
    claim_next(store, "dead-process", clock(), 600)  # a1 was in flight
    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(lambda m: seen.append(m["episode_uuid"])),
        QueueConfig(max_crashes=1, poll_seconds=0.05),
    )
    run_until(queue, lambda: get_message(store, "b1")["state"] == "done")
    assert get_message(store, "a1")["state"] == "failed" and seen == ["b1"]
    text = metrics.exposition().decode()
    assert (
        sample(
            text,
            "messaging_messages_failed_total",
            {"queue_name": "episodes", "error_type": "UnknownError"},
        )
        == 1
    )


def test_while_the_llm_is_down_nothing_is_claimed_and_attempts_are_not_spent(env):
    store, clock, metrics, _, seen, _, add = env
    add("a1", "A")
    work = Work(lambda m: (_ for _ in ()).throw(errors.LLMTransientError("Connection error.")))
    queue = EpisodeQueue(
        IngestContext(store, metrics, clock), work, QueueConfig(max_attempts=2, poll_seconds=0.05)
    )
    work.up = False
    queue.start()
    try:
        import time

        time.sleep(0.3)
        assert get_message(store, "a1")["state"] == "queued"  # not claimed while down
    finally:
        queue.stop(timeout=5)
    claim_next(store, "w", clock(), 60)  # a call failed as the LLM went down
    queue.outcomes.failed(
        {**get_message(store, "a1"), "seq": None}, errors.LLMTransientError("x"), 0.1
    )
    message = get_message(store, "a1")
    assert (message["state"], message["attempts"]) == ("queued", 0)  # the attempt refunded
    status = store.fetchone("SELECT status_detail FROM episodes WHERE uuid = 'a1'")[0]
    assert "LLM is unavailable" in status


def test_drain_stops_while_the_llm_is_down_instead_of_spinning(env):
    store, clock, metrics, _, _, _, add = env
    add("a1", "A")
    work = Work(lambda m: m["episode_uuid"])
    work.up = False
    queue = EpisodeQueue(IngestContext(store, metrics, clock), work)
    assert queue.drain() == 0
    assert get_message(store, "a1")["state"] == "queued"
    work.up = True
    assert queue.drain() == 1


def test_drain_runs_the_dispatchers_loop_beside_a_running_one(env):
    """drain() is the same loop on the caller's thread: beside the background dispatcher,
    every episode is written once, each group in order, and nothing stays leased."""
    import time

    store, clock, metrics, _, _, _, add = env
    written: list[str] = []

    def prepare(message):
        time.sleep(0.02)
        return message["episode_uuid"]

    def commit(results, ack):
        ack()
        written.extend(results)

    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(prepare, commit),
        QueueConfig(concurrency=2, poll_seconds=0.01),
    )
    for i in range(4):
        for group in "ABCDEF":  # six groups: a claim of either takes four heads at most
            add(f"{group.lower()}{i}", group)
    queue.start()
    try:
        drained = queue.drain()
        wait_for(lambda: states(store) == {"done": 24}, 10)
    finally:
        queue.stop(timeout=5)
    assert 0 < drained < 24
    assert sorted(written) == sorted(f"{g}{i}" for g in "abcdef" for i in range(4))  # once each
    for group in "abcdef":
        assert [u for u in written if u[0] == group] == [f"{group}{i}" for i in range(4)]


def test_a_drain_claims_no_more_than_one_write_takes(env, monkeypatch):
    store, clock, metrics, _, _, _, add = env
    claimed: list[int] = []
    real_claim = q.claim_heads

    def counting_claim(*args, **kwargs):
        messages, more = real_claim(*args, **kwargs)
        claimed.append(len(messages))
        return messages, more

    monkeypatch.setattr(q, "claim_heads", counting_claim)
    queue = EpisodeQueue(
        IngestContext(store, metrics, clock),
        Work(lambda m: m["episode_uuid"]),
        QueueConfig(concurrency=4, batch_size=3),
    )
    for group in "ABCDEFGH":
        add(f"{group.lower()}1", group)
    assert queue.drain() == 8
    assert max(claimed) == 3 and sum(claimed) == 8


def test_a_pipeline_needs_an_ingest_context_with_its_parts(env):
    from workbench.ingest.pipeline import EpisodePipeline

    store, clock, metrics, *_ = env
    with pytest.raises(ValueError, match="embedder, a publisher and settings"):
        EpisodePipeline(IngestContext(store, metrics, clock))
