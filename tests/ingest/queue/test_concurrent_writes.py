"""Dedupe under concurrency: imports running at once, and an import racing the extraction of
the same names, store each entity and fact once. Real threads on one workbench (a DuckDB file,
or with WORKBENCH_TEST_BACKEND=postgres a schema of the throw-away server); on PostgreSQL also
two workbenches on one schema, each with its own connections (two processes' view)."""

from __future__ import annotations

import threading

import pytest

from workbench.config import load_settings
from workbench.facade import Workbench
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import chat_settings_env
from workbench.metrics import Metrics

GROUPS = [f"g{i}" for i in range(20)]


def import_lines(groups=GROUPS) -> list[dict]:
    lines: list[dict] = []
    for group in groups:
        lines += [
            {"type": "entity", "name": "Maria Keller", "entity_type": "Person", "group_id": group},
            {
                "type": "fact",
                "source": "Maria Keller",
                "target": "Acme",
                "relation": "WORKS_AT",
                "fact": "Maria Keller works at Acme.",
                "group_id": group,
            },
            {
                "type": "fact",
                "source": "Maria Keller",
                "target": "Munich",
                "relation": "LIVES_IN",
                "fact": f"Maria Keller lives in Munich ({group}).",
                "group_id": group,
            },
        ]
    return lines


def duplicates(wb: Workbench) -> tuple[int, int]:
    """(entities, facts) stored more than once: same group and name; same group, ends and
    text."""
    entities = wb.store.fetchone(
        "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM entities "
        "GROUP BY group_id, name_norm) AS c"
    )[0]
    facts = wb.store.fetchone(
        "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM facts "
        "GROUP BY group_id, source_uuid, target_uuid, lower(trim(fact))) AS c"
    )[0]
    return int(entities), int(facts)


def at_once(*calls) -> list:
    """Run the calls in threads released together; their results (an exception raises)."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = calls[i]()
        except BaseException as exc:  # noqa: BLE001 - raised below, in the test's thread
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def open_wb(db: str, embedder, fake_llm=None, url: str | None = None) -> Workbench:
    env = {"SVC_KNOWLEDGE_DB_PATH": db, "SVC_KNOWLEDGE_DECAY_ENABLED": "false"}
    if url:
        env["SVC_KNOWLEDGE_DATABASE_URL"] = url
    if fake_llm is not None:
        env = chat_settings_env(fake_llm, **env)
    return Workbench.open(load_settings(env, env_file=None), embedder=embedder, metrics=Metrics())


@pytest.fixture
def db(tmp_path) -> str:
    # a file for DuckDB (the service's case); the suite's postgres mode swaps :memory: only
    from tests.conftest import BACKEND

    return ":memory:" if BACKEND == "postgres" else str(tmp_path / "kb.duckdb")


def test_four_identical_imports_at_once_store_each_memory_once(db, hash_embedder):
    lines = import_lines()
    with open_wb(db, hash_embedder) as wb:
        reports = at_once(*[lambda: wb.import_memories(lines)] * 4)
        assert duplicates(wb) == (0, 0)
        assert wb.store.fetchone("SELECT count(*) FROM facts")[0] == 2 * len(GROUPS)
        assert wb.store.fetchone("SELECT count(*) FROM entities")[0] == 3 * len(GROUPS)
        assert sum(r["facts_created"] for r in reports) == 2 * len(GROUPS)
        assert sum(r["facts_existing"] for r in reports) == 3 * 2 * len(GROUPS)
        # every vector belongs to a stored memory, and the search rows hold each once
        assert wb.store.fetchone("SELECT count(*) FROM fact_embeddings")[0] == 2 * len(GROUPS)
        hits = wb.search_memory_facts("where does Maria work", group_ids=["g3"])["facts"]
        assert [h["fact"] for h in hits].count("Maria Keller works at Acme.") == 1


def test_an_import_racing_extraction_of_the_same_names_makes_each_entity_once(
    db, hash_embedder, fake_llm
):
    fake_llm.set_responder(rule_llm.respond)
    with open_wb(db, hash_embedder, fake_llm) as wb:
        for group in GROUPS:
            wb.add_memory("note", "Maria Keller works at Acme.", group_id=group)
        at_once(wb.process_pending, lambda: wb.import_memories(import_lines()))
        wb.process_pending()
        assert wb.get_queue_status()["counts"]["done"] == len(GROUPS)
        assert duplicates(wb) == (0, 0)


def test_an_entity_imported_while_its_episode_is_prepared_is_found_not_made_again(
    db, hash_embedder, fake_llm
):
    """The import lands between the episode's preparation (which made 'Maria Keller' new) and
    its write: the write finds it, and the episode is prepared again without spending an
    attempt."""
    fake_llm.set_responder(rule_llm.respond)
    with open_wb(db, hash_embedder, fake_llm) as wb:
        wb.add_memory("note", "Maria Keller works at Acme.", group_id="g1")
        pipeline, imported = wb.queue.work, []

        class ImportMeanwhile:
            def __getattr__(self, name):
                return getattr(pipeline, name)

            def prepare(self, message):
                prepared = pipeline.prepare(message)
                if not imported:
                    imported.append(wb.import_memories(import_lines(["g1"])))
                return prepared

        wb.queue.work = ImportMeanwhile()
        assert wb.process_pending() == 2  # the stale preparation, then the one written
        assert duplicates(wb) == (0, 0)
        names = sorted(r[0] for r in wb.store.fetchall("SELECT name FROM entities"))
        assert names == ["Acme", "Maria Keller", "Munich"]
        episode = wb.get_episodes(["g1"])["episodes"][0]
        assert episode["status"] == "done" and episode["entity_count"] == 2
        attempts = wb.store.fetchone("SELECT attempts FROM queue")[0]
        assert attempts <= 1  # the stale round was not counted


def test_a_fact_imported_while_its_episode_is_prepared_is_not_written_again(
    db, hash_embedder, fake_llm
):
    """The entities exist before the episode; the import of the episode's very fact lands
    between its preparation and its write: the write leaves that fact out (no second LLM
    round needed)."""
    fake_llm.set_responder(rule_llm.respond)
    fact = {
        "type": "fact",
        "source": "Maria Keller",
        "target": "Acme",
        "relation": "WORKS_AT",
        "fact": "Maria Keller works at Acme.",
        "group_id": "g1",
    }
    with open_wb(db, hash_embedder, fake_llm) as wb:
        wb.import_memories(
            [{"type": "entity", "name": n, "group_id": "g1"} for n in ("Maria Keller", "Acme")]
        )
        wb.add_memory("note", "Maria Keller works at Acme.", group_id="g1")
        pipeline, calls = wb.queue.work, []

        class ImportMeanwhile:
            def __getattr__(self, name):
                return getattr(pipeline, name)

            def prepare(self, message):
                prepared = pipeline.prepare(message)
                assert [f["fact"] for f in prepared.changes.new_facts] == [fact["fact"]]
                calls.append(wb.import_memories([fact]))
                return prepared

        wb.queue.work = ImportMeanwhile()
        assert wb.process_pending() == 1 and len(calls) == 1
        assert duplicates(wb) == (0, 0)
        rows = wb.store.fetchall("SELECT fact, episode_uuid FROM facts")
        assert [r[0] for r in rows] == [fact["fact"]] and rows[0][1] is None  # the import's
        episode = wb.get_episodes(["g1"])["episodes"][0]
        assert episode["status"] == "done" and episode["fact_count"] == 0
        assert wb.store.fetchone("SELECT count(*) FROM fact_embeddings")[0] == 1


@pytest.mark.parametrize("replicas", [2])
def test_imports_through_two_processes_on_one_postgresql_store_dedupe(
    pg_location, hash_embedder, replicas
):
    """Two workbenches on one schema (own pools and caches: what two processes are), each
    importing the same lines twice at once, store each memory once."""
    opened = [open_wb(":memory:", hash_embedder, url=pg_location) for _ in range(replicas)]
    try:
        lines = import_lines()
        at_once(*[lambda w=w: w.import_memories(lines) for w in opened for _ in range(2)])
        assert duplicates(opened[0]) == (0, 0)
        assert opened[0].store.fetchone("SELECT count(*) FROM facts")[0] == 2 * len(GROUPS)
    finally:
        for wb in opened:
            wb.close()
