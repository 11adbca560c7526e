"""Ingestion end to end: add_memory → durable queue → extraction through the real openai
client against the fake chat-completions server → entities, facts, embeddings in DuckDB."""

from __future__ import annotations

import logging
import re

import pytest

from tests import prom
from workbench.config import load_settings
from workbench.errors import InvalidInput
from workbench.facade import Workbench
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import FakeReply, chat_settings_env, message_text
from workbench.metrics import Metrics
from workbench.store import queue as q


def sample(wb: Workbench, name: str, **labels) -> float | None:
    return prom.matching(wb.metrics.exposition(), name, **labels)


def open_wb(fake_llm, embedder, db=":memory:", **extra) -> Workbench:
    env = chat_settings_env(
        fake_llm, SVC_KNOWLEDGE_DB_PATH=str(db), SVC_KNOWLEDGE_LLM_MAX_RETRIES="2", **extra
    )
    settings = load_settings(env, env_file=None)
    return Workbench.open(settings, embedder=embedder, metrics=Metrics())


@pytest.fixture
def wb(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    workbench = open_wb(fake_llm, hash_embedder)
    yield workbench
    workbench.close()


def count(wb, table):
    return wb.store.fetchone(f"SELECT count(*) FROM {table}")[0]


def test_an_episode_becomes_entities_facts_and_embeddings(wb, fake_llm):
    out = wb.add_memory(
        "intro", "Maria Keller works at Acme. Maria Keller lives in Munich.", group_id="g1"
    )
    assert out["status"] == "queued"
    assert wb.process_pending() == 1
    names = {r[0] for r in wb.store.fetchall("SELECT name FROM entities")}
    assert names == {"Maria Keller", "Acme", "Munich"}
    facts = wb.store.fetch_dicts("SELECT relation, fact, group_id FROM facts ORDER BY relation")
    assert [f["relation"] for f in facts] == ["LIVES_IN", "WORKS_AT"]
    assert count(wb, "entity_embeddings") == 3 and count(wb, "fact_embeddings") == 2
    episode = wb.get_episodes(["g1"])["episodes"][0]
    assert episode["status"] == "done" and episode["entity_count"] == 3
    assert episode["fact_count"] == 2
    # two LLM calls for this episode, each a priced row
    assert len(fake_llm.requests) == 2
    calls = wb.store.fetch_dicts("SELECT prompt_name, status, episode_uuid FROM llm_calls")
    assert {c["prompt_name"] for c in calls} == {"extract_entities", "extract_edges"}
    assert all(c["episode_uuid"] == out["episode_uuid"] for c in calls)
    assert sample(wb, "graph_episodes_processed_total", group_id="g1") == 1
    assert sample(wb, "graph_episodes_processed_all_groups_total") == 1
    assert sample(wb, "knowledge_classification_requests_total", status="success") == 2
    assert sample(wb, "messaging_messages_processed_total", status="success") == 1


def test_entities_are_deduplicated_across_episodes(wb):
    wb.add_memory("a", "Maria Keller works at Acme.", group_id="g1")
    wb.add_memory("b", "maria keller uses Neovim. Maria Keller uses Neovim.", group_id="g1")
    wb.add_memory("c", "Maria Keller works at Acme.", group_id="other")
    wb.process_pending()
    rows = wb.store.fetchall(
        "SELECT group_id, count(*) FROM entities WHERE name = 'Maria Keller' GROUP BY 1"
    )
    assert dict(rows) == {"g1": 1, "other": 1}
    assert count(wb, "mentions") == 6  # a: Maria, Acme; b: Maria, Neovim; c: Maria, Acme


def test_a_contradicting_fact_invalidates_the_old_one_without_deleting_it(wb):
    wb.add_memory("old", "User lives in Munich.", reference_time="2025-01-01T00:00:00Z")
    wb.add_memory("new", "User moved to Berlin.", reference_time="2025-06-01T00:00:00Z")
    wb.process_pending()
    rows = {r["fact"]: r for r in wb.store.fetch_dicts("SELECT * FROM facts")}
    old, new = rows["User lives in Munich."], rows["User lives in Berlin."]
    assert old["invalid_at"] is not None and old["expired_at"] is not None
    assert new["invalid_at"] is None and new["expired_at"] is None


def test_a_redelivered_message_changes_nothing(wb):
    out = wb.add_memory("a", "Maria Keller works at Acme. Tom uses Python.")
    wb.process_pending()
    before = [count(wb, t) for t in ("entities", "facts", "mentions", "entity_embeddings")]
    calls = count(wb, "llm_calls")
    # the message is delivered again (at-least-once): the written episode is skipped
    wb.store.execute(
        "UPDATE queue SET state = 'queued' WHERE episode_uuid = ?", [out["episode_uuid"]]
    )
    wb.process_pending()
    assert [count(wb, t) for t in ("entities", "facts", "mentions", "entity_embeddings")] == before
    assert count(wb, "llm_calls") == calls
    # even a full re-extraction of the same episode duplicates nothing
    wb.store.execute("UPDATE episodes SET status = 'queued'")
    wb.store.execute("UPDATE queue SET state = 'queued'")
    wb.process_pending()
    assert [count(wb, t) for t in ("entities", "facts", "mentions", "entity_embeddings")] == before


def test_a_crash_mid_episode_loses_nothing(fake_llm, hash_embedder, tmp_path):
    fake_llm.set_responder(rule_llm.respond)
    db = tmp_path / "kb.duckdb"
    first = open_wb(fake_llm, hash_embedder, db)
    out = first.add_memory("a", "Tom works at Globex.")
    # a worker leases the message and dies before writing anything
    assert q.claim_heads(first.store, "doomed-worker", first.clock(), 600, 1)[0]
    first.store.close()
    second = open_wb(fake_llm, hash_embedder, db)
    second.start()  # returns in-flight messages of the dead process to the queue
    try:
        import time

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if second.get_queue_status()["counts"]["done"] == 1:
                break
            time.sleep(0.05)
    finally:
        second.close()
    third = open_wb(fake_llm, hash_embedder, db)
    assert third.get_episodes()["episodes"][0]["status"] == "done"
    assert third.store.fetchone("SELECT count(*) FROM facts")[0] == 1
    assert out["episode_uuid"] == third.get_episodes()["episodes"][0]["uuid"]
    third.close()


def test_rate_limit_then_success_is_retried_and_counted(wb, fake_llm):
    fake_llm.script(FakeReply.rate_limited(retry_after=0))
    wb.add_memory("a", "Tom works at Globex.")
    wb.process_pending()
    assert count(wb, "facts") == 1
    assert sample(wb, "graph_llm_errors_total", error_type="rate_limit") == 1
    assert wb.store.fetchone("SELECT count(*) FROM llm_calls WHERE status <> 'success'")[0] == 1


@pytest.mark.parametrize(
    ("reply", "structure"),
    [
        (FakeReply.schema_echo(), "ExtractedEntities"),
        (FakeReply.truncated(), "ExtractedEntities"),
        (FakeReply.ok({"wrong": "shape", "entities": "not a list"}), "ExtractedEntities"),
    ],
)
def test_bad_structured_output_fails_the_episode_naming_the_structure(
    wb, fake_llm, reply, structure, caplog
):
    fake_llm.set_responder(lambda req: reply)
    out = wb.add_memory("a", "Tom works at Globex.")
    with caplog.at_level(logging.ERROR, logger="workbench.ingest.queue.episode_queue"):
        wb.process_pending()
    status = wb.get_queue_status()
    failed = status["failed"][0]
    assert failed["episode_uuid"] == out["episode_uuid"]
    assert failed["error_type"] == "ValidationError"
    assert structure in failed["error_message"]
    assert any(out["episode_uuid"] in r.getMessage() for r in caplog.records)
    episode = wb.get_episodes()["episodes"][0]
    assert episode["status"] == "failed" and structure in episode["status_detail"]
    assert sample(wb, "messaging_messages_failed_total", error_type="ValidationError") == 1
    # the operator fixes the model and re-queues: nothing was lost
    fake_llm.set_responder(rule_llm.respond)
    assert wb.retry_failed_episodes()["episode_uuids"] == [out["episode_uuid"]]
    wb.process_pending()
    assert count(wb, "facts") == 1


def test_schema_echo_names_the_missing_required_field(wb, fake_llm):
    fake_llm.set_responder(
        lambda req: (
            FakeReply.schema_echo() if "NodeResolutions" in str(req) else rule_llm.respond(req)
        )
    )
    from workbench.errors import SchemaEchoError
    from workbench.prompts.resolve_nodes import NodeResolutions

    with pytest.raises(SchemaEchoError, match="entity_resolutions"):
        wb.chat.complete("resolve_nodes", [{"role": "user", "content": "x"}], NodeResolutions)


def _entity_requests(fake_llm) -> list[str]:
    return [
        rule_llm.episode_text(r).split("Step ")[-1][:1]
        for r in fake_llm.requests
        if "ExtractedEntities" in str(r.get("response_format"))
    ]


def test_one_at_a_time_a_groups_episodes_are_extracted_in_order(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_QUEUE_GROUP_RUN="1")
    try:
        for i in range(4):
            wb.add_memory(f"e{i}", f"Tom uses Python. Step {i}.", group_id="g",
                          priority="low" if i % 2 else "high")  # fmt: skip
        wb.process_pending()
        assert _entity_requests(fake_llm) == ["0", "1", "2", "3"]
    finally:
        wb.close()


def test_a_run_shows_each_episode_the_context_sequential_processing_would(wb, fake_llm):
    """A group's backlog is extracted as a run (concurrently), yet every episode is shown its
    predecessors as context, and they are written in order."""
    for i in range(4):
        wb.add_memory(f"e{i}", f"Tom uses Python. Step {i}.", group_id="g",
                      priority="low" if i % 2 else "high")  # fmt: skip
    assert wb.process_pending() == 4
    requests = [
        message_text(r) for r in fake_llm.requests
        if "ExtractedEntities" in str(r.get("response_format"))
    ]  # fmt: skip
    assert sorted(_entity_requests(fake_llm)) == ["0", "1", "2", "3"]
    for text in requests:
        step = int(rule_llm.episode_text({"messages": [{"role": "user", "content": text}]})
                   .split("Step ")[-1][:1])  # fmt: skip
        context = text.rsplit("CURRENT EPISODE", 1)[0]
        shown = sorted(int(m) for m in re.findall(r"Step (\d)", context))
        assert shown == list(range(max(0, step - 2), step)), (step, shown)
    episodes = wb.get_episodes(group_ids=["g"])["episodes"]
    assert {e["status"] for e in episodes} == {"done"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "", "episode_body": "x"}, "'name'"),
        ({"name": "n", "episode_body": "  "}, "'episode_body'"),
        ({"name": "n", "episode_body": "x" * 60_000}, "at most 50000"),
        ({"name": "n", "episode_body": "x", "source": "pdf"}, "'source'"),
        ({"name": "n", "episode_body": "{bad", "source": "json"}, "not valid JSON"),
        ({"name": "n", "episode_body": "x", "group_id": "bad group!"}, "'group_id'"),
        ({"name": "n", "episode_body": "x", "priority": "urgent"}, "'priority'"),
        ({"name": "n", "episode_body": "x", "uuid": "nope"}, "not a valid uuid"),
        ({"name": "n", "episode_body": "x", "reference_time": "yesterday"}, "ISO 8601"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(wb, kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        wb.add_memory(**kwargs)
    assert count(wb, "episodes") == 0


def test_without_an_llm_episodes_wait_and_status_says_why(hash_embedder):
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        out = wb.add_memory("a", "Tom works at Globex.")
        assert "no LLM is configured" in out["detail"]
        status = wb.get_status()
        assert status["llm"]["configured"] is False
        assert "SVC_KNOWLEDGE_COMPAT_BASE_URL" in status["llm"]["detail"]
        assert wb.get_queue_status()["counts"]["queued"] == 1
        assert wb.get_episodes()["episodes"][0]["status_detail"].startswith("waiting")


def test_search_follows_ingestion_changes_at_once(wb):
    wb.add_memory("old", "User lives in Munich.", reference_time="2025-01-01T00:00:00Z")
    wb.process_pending()
    hits = wb.search_memory_facts("where does the user live")["facts"]
    assert [h["fact"] for h in hits] == ["User lives in Munich."]
    wb.add_memory("new", "User moved to Berlin.", reference_time="2025-06-01T00:00:00Z")
    wb.process_pending()
    current = [h["fact"] for h in wb.search_memory_facts("where does the user live")["facts"]]
    assert current == ["User lives in Berlin."]  # the invalidated fact is hidden
    both = wb.search_memory_facts("where does the user live", include_invalidated=True)
    assert {h["fact"] for h in both["facts"]} == {"User lives in Berlin.", "User lives in Munich."}
    node = wb.search_memory_nodes("User", max_nodes=1)["nodes"][0]
    assert "Berlin" in node["summary"] and "Munich" in node["summary"]


def test_batched_writes_build_the_same_graph_as_one_episode_at_a_time(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    bodies = [
        ("g1", "Maria Keller works at Acme. Tom uses Python."),
        ("g2", "Tom works at Globex. Maria Keller uses Neovim."),
        ("g1", "Maria Keller works at Globex."),  # contradicts g1's first episode
        ("g3", "User uses VS Code. Tom lives in Munich."),
        ("g2", "Tom uses Python. Tom works at Globex."),
    ]

    def build(batch_size: str):
        wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_QUEUE_BATCH_SIZE=batch_size)
        for i, (group, body) in enumerate(bodies):
            wb.add_memory(f"e{i}", body, group_id=group)
        assert wb.process_pending() == len(bodies)
        graph = {
            "entities": sorted(wb.store.fetchall("SELECT group_id, name, summary FROM entities")),
            "facts": sorted(
                wb.store.fetchall(
                    "SELECT group_id, fact, invalid_at IS NOT NULL, expired_at IS NOT NULL "
                    "FROM facts"
                )
            ),
            "mentions": count(wb, "mentions"),
            "embeddings": (count(wb, "entity_embeddings"), count(wb, "fact_embeddings")),
            # each vector belongs to its own memory's text
            "vectors": sorted(
                wb.store.fetchall(
                    "SELECT e.group_id, e.name, round(CAST(v.vector[1] AS DECIMAL(18, 8)), 5), "
                    "round(CAST(v.vector[2] AS DECIMAL(18, 8)), 5) "
                    "FROM entities e JOIN entity_embeddings v USING (uuid)"
                )
            )
            + sorted(
                wb.store.fetchall(
                    "SELECT f.group_id, f.fact, round(CAST(v.vector[1] AS DECIMAL(18, 8)), 5) "
                    "FROM facts f JOIN fact_embeddings v USING (uuid)"
                )
            ),
            "episodes": sorted(
                wb.store.fetchall("SELECT name, status, entity_count, fact_count FROM episodes")
            ),
            "llm_calls": count(wb, "llm_calls"),
            "searchable": len(wb.search_memory_facts("Globex", max_facts=50)["facts"]),
        }
        wb.close()
        return graph

    one_by_one, batched = build("1"), build("16")
    # g1's and g2's two episodes run together: the second of each is asked once more about
    # the facts the first one made (and g1's invalidates one of them, as one at a time)
    calls = batched.pop("llm_calls"), one_by_one.pop("llm_calls")
    assert batched == one_by_one
    assert calls == (12, 10)
    assert any(row[2] for row in batched["facts"])  # the contradiction was applied


def _previous_episodes(fake_llm) -> list[str]:
    """The PREVIOUS EPISODES section of each entity extraction prompt, in order."""
    return [
        message_text(r)
        .split("PREVIOUS EPISODES (context only):", 1)[1]
        .split("CURRENT EPISODE", 1)[0]
        for r in fake_llm.requests
        if "ExtractedEntities" in str(r.get("response_format"))
    ]


def test_the_context_is_the_groups_latest_episodes_and_forgets_deleted_ones(wb, fake_llm):
    wb.add_memory("a", "Tom uses Python. Alpha note.", group_id="g")
    wb.add_memory("b", "Tom uses Neovim. Beta note.", group_id="g")
    wb.add_memory("other", "Tom uses VS Code. Other group.", group_id="h")
    wb.process_pending()
    beta = wb.store.fetchone("SELECT uuid FROM episodes WHERE name = 'b'")[0]
    wb.delete_episode(beta)
    wb.add_memory("c", "Tom uses VS Code. Gamma note.", group_id="g")
    wb.process_pending()
    by_body = {
        rule_llm.episode_text(r).strip(): prev
        for r, prev in zip(
            [r for r in fake_llm.requests if "ExtractedEntities" in str(r.get("response_format"))],
            _previous_episodes(fake_llm),
        )
    }
    assert "(none)" in by_body["Tom uses Python. Alpha note."]
    assert "Alpha note" in by_body["Tom uses Neovim. Beta note."]
    gamma = by_body["Tom uses VS Code. Gamma note."]
    assert "Alpha note" in gamma and "Beta note" not in gamma and "Other group" not in gamma
    wb.clear_graph(["g"])
    wb.add_memory("d", "Tom uses Python. Delta note.", group_id="g")
    wb.process_pending()
    assert "(none)" in _previous_episodes(fake_llm)[-1]


def _prepared(wb, *bodies, group_prefix="g"):
    uuids = [
        wb.add_memory(f"n{i}", body, group_id=f"{group_prefix}{i}")["episode_uuid"]
        for i, body in enumerate(bodies)
    ]
    episodes = [
        wb.store.fetch_dicts("SELECT * FROM episodes WHERE uuid = ?", [u])[0] for u in uuids
    ]
    return [wb.pipeline.extractor.prepare(e) for e in episodes]


def test_an_episode_written_twice_writes_once_and_acknowledges_both(wb):
    prepared = _prepared(wb, "Maria Keller works at Acme. Tom uses Python.")
    wb.pipeline.writer.write(prepared + prepared)  # twice in one batch, too
    graph = [count(wb, t) for t in ("entities", "facts", "mentions", "entity_embeddings")]
    assert graph[0] >= 2 and graph[1] >= 1 and graph[2] >= 2
    acks = []
    wb.pipeline.writer.write(prepared, also=lambda: acks.append(True))  # a second delivery
    assert [count(wb, t) for t in ("entities", "facts", "mentions", "entity_embeddings")] == graph
    assert acks == [True]


def test_an_episode_deleted_while_extracted_writes_nothing_but_its_batch_does(wb):
    kept, deleted = _prepared(wb, "Tom uses Python.", "Maria Keller works at Globex.")
    wb.delete_episode(deleted.episode_uuid)
    wb.pipeline.commit([kept, deleted], ack=lambda: None)
    assert sample(wb, "graph_episodes_processed_total", group_id="g0") == 1
    assert not sample(wb, "graph_episodes_processed_total", group_id="g1")
    names = {r[0] for r in wb.store.fetchall("SELECT name FROM entities")}
    assert names == {"Tom", "Python"}
    assert (
        wb.store.fetchone("SELECT status FROM episodes WHERE uuid = ?", [kept.episode_uuid])[0]
        == "done"
    )


def test_an_episode_deleted_and_added_again_while_extracted_is_processed_anew(wb, fake_llm):
    uuid = "7d3c1f7e-2b1a-4c55-9a51-0d6f6b7f1a01"
    wb.add_memory("old", "Maria Keller works at Acme.", group_id="g", uuid=uuid)
    [message] = q.claim_heads(wb.store, "test", wb.clock(), 60, 1)[0]
    stale = wb.pipeline.prepare(message)
    wb.delete_episode(uuid)
    wb.add_memory("new", "Tom uses Neovim.", group_id="h", uuid=uuid)
    wb.queue._write([[(message, stale)]])  # the old extraction arrives late
    assert count(wb, "entities") == 0
    assert wb.store.fetchone("SELECT status FROM episodes")[0] == "queued"
    assert wb.store.fetchone("SELECT state FROM queue")[0] == "queued"
    wb.process_pending()
    assert {r[0] for r in wb.store.fetchall("SELECT name FROM entities")} == {"Tom", "Neovim"}
    assert wb.store.fetchone("SELECT group_id, status FROM episodes") == ("h", "done")


def test_a_failed_second_delivery_does_not_undo_a_written_episode(wb):
    wb.add_memory("once", "Tom uses Python.", group_id="g")
    [message] = q.claim_heads(wb.store, "test", wb.clock(), 60, 1)[0]
    wb.queue._write([[(message, wb.pipeline.prepare(message))]])
    wb.queue.outcomes.failed(message, TimeoutError("a second delivery timed out"), 0.1)
    assert wb.store.fetchone("SELECT status, status_detail FROM episodes") == ("done", None)
    # nor does it queue the message again (a third delivery) or mark it failed
    wb.queue.outcomes.failed(
        {**message, "validation_failures": 1}, InvalidInput("then for good"), 0.1
    )
    assert wb.store.fetchone("SELECT state, error_type FROM queue") == ("done", None)
    assert not sample(wb, "messaging_retries_total")


@pytest.mark.parametrize(
    ("error", "failed_before"), [(TimeoutError("timed out"), 0), (InvalidInput("bad request"), 1)]
)
def test_a_late_failure_of_an_episode_deleted_and_added_again_leaves_the_new_one_queued(
    wb, error, failed_before
):
    """The old delivery's failure (retried or final) must not delay, fail or relabel the
    episode added again under the same uuid."""
    uuid = "7d3c1f7e-2b1a-4c55-9a51-0d6f6b7f1a02"
    wb.add_memory("old", "Maria Keller works at Acme.", group_id="g", uuid=uuid)
    [message] = q.claim_heads(wb.store, "test", wb.clock(), 60, 1)[0]
    wb.delete_episode(uuid)
    wb.add_memory("new", "Tom uses Neovim.", group_id="h", uuid=uuid)
    # a retry (a transient error), or a final failure (a second validation error)
    wb.queue.outcomes.failed({**message, "validation_failures": failed_before}, error, 0.1)
    row = wb.store.fetch_dicts("SELECT * FROM queue")[0]
    assert (row["state"], row["error_type"], row["validation_failures"]) == ("queued", None, 0)
    assert row["available_at"] <= wb.clock()
    assert wb.store.fetchone("SELECT status, status_detail FROM episodes") == ("queued", None)
    assert not sample(wb, "messaging_retries_total")
    assert wb.process_pending() == 1
    assert wb.store.fetchone("SELECT group_id, status FROM episodes") == ("h", "done")


def test_close_runs_every_step_when_one_fails(fake_llm, hash_embedder, monkeypatch):
    """A close after the database failed under the process (the pipeline's close raising)
    still stops the search engine's threads and closes the store, then raises."""
    wb = open_wb(fake_llm, hash_embedder)
    closed = []

    def broken() -> None:
        raise ConnectionError("the database went away")

    monkeypatch.setattr(wb.pipeline, "close", broken)
    real_search_close, real_store_close = wb.search.close, wb.store.close
    monkeypatch.setattr(wb.search, "close", lambda: (closed.append("search"), real_search_close()))
    monkeypatch.setattr(wb.store, "close", lambda: (closed.append("store"), real_store_close()))
    with pytest.raises(ConnectionError):
        wb.close()
    assert closed == ["search", "store"]
