"""Re-extraction: a group's stored episodes extracted again with another (fake) model into a
shadow graph while search answers from the live one; the dry run's prediction; compare,
promote (atomic for searches, accesses carried over), discard. The command, and a run killed
with SIGKILL: tests/service/test_cli_reextract.py."""

from __future__ import annotations

import threading
import time

import pytest

from tests.ingest.test_pipeline import open_wb, sample
from tests.ingest.test_runs import history
from workbench.config import load_settings
from workbench.errors import InvalidInput
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import chat_settings_env, structure_name
from workbench.jobs.generations import carry_over, compare_graphs, estimate
from workbench.llm.pricing import PriceTable


def better(request: dict):
    """The "other model": other summaries and fact texts, and it never states USES."""
    reply = rule_llm.respond(request)
    if structure_name(request) == "ExtractedEntities":
        for e in reply["entities"]:
            e["summary"] = "v2: " + e["summary"]
    if structure_name(request) == "ExtractedEdges":
        reply["edges"] = [e for e in reply["edges"] if e["relation"] != "USES"]
        for e in reply["edges"]:
            e["fact"] = "v2: " + e["fact"]
    return reply


def responder(fake_llm):
    """Answer as the rule LLM, or as :func:`better` for requests naming the other model."""
    fake_llm.set_responder(
        lambda r: better(r) if r.get("model") == "model-2" else rule_llm.respond(r)
    )


def other_settings(fake_llm, **extra):
    env = chat_settings_env(fake_llm, SVC_KNOWLEDGE_MODEL_NAME="model-2", **extra)
    return load_settings(env, env_file=None)


@pytest.fixture
def built(fake_llm, hash_embedder):
    responder(fake_llm)
    wb = open_wb(fake_llm, hash_embedder)
    for episode in history(12):
        wb.add_memory(**episode)
    assert wb.process_pending() == 12
    yield wb
    wb.close()


def facts_of(wb) -> set[tuple[str, str]]:
    return set(wb.store.fetchall("SELECT uuid, fact FROM facts WHERE group_id = 'tom'"))


def test_a_run_builds_a_shadow_while_search_answers_from_the_live_graph(built, fake_llm, tmp_path):
    wb = built
    runs = wb.reextraction(other_settings(fake_llm), tmp_path)
    plan = runs.plan("tom")
    assert plan.episodes == 12 and plan.basis == "history" and plan.model == "model-2"
    before = facts_of(wb)
    report = runs.run("tom")
    assert report["state"] == "built" and report["pending"] == 0 and report["processed"] == 12
    made = report["calls"]["calls"]
    assert abs(made - plan.calls) <= 0.1 * made, (plan.calls, made)
    # observable: the shadow queue's metrics, under its own queue name
    done = sample(
        wb, "messaging_messages_processed_total", queue_name="reextract", status="success"
    )
    assert done == 12
    # the calls are recorded under the run's id, with the new model
    models = wb.store.fetchall("SELECT DISTINCT model FROM llm_calls WHERE run_id = ?",
                              [report["run_id"]])  # fmt: skip
    assert models == [("model-2",)]
    # the live graph and its search are untouched
    assert facts_of(wb) == before
    found = wb.search_memory_facts("Tom uses", group_ids=["tom"], max_facts=20)["facts"]
    assert any("uses" in f["fact"] for f in found)
    diff = runs.compare(report["run_id"])
    assert any("USES" in f for f in diff["facts"]["removed"]) and not diff["facts"]["added"]
    assert diff["entities"]["changed"] and diff["facts"]["changed"]  # other texts
    # the dry run of a built run has nothing left to do
    assert runs.plan("tom").calls == 0


def test_promote_swaps_the_graph_and_carries_accesses_over(built, fake_llm, tmp_path):
    wb = built
    tom = wb.store.fetchone("SELECT uuid FROM entities WHERE name = 'Tom'")[0]
    wb.store.execute("UPDATE entities SET access_count = 7, importance = 5 WHERE uuid = ?", [tom])
    wb.search.indexes.refresh_states()
    runs = wb.reextraction(other_settings(fake_llm), tmp_path)
    run_id = runs.run("tom")["run_id"]
    out = wb.reextraction(shadow_dir=tmp_path).promote(run_id)
    assert out["state"] == "promoted" and out["facts_removed"] > 0
    row = wb.store.fetchone(
        "SELECT uuid, access_count, importance, summary FROM entities WHERE name = 'Tom'"
    )
    assert row[:3] == (tom, 7, 5) and row[3].startswith("v2: ")
    assert wb.store.fetchone("SELECT count(*) FROM facts WHERE relation = 'USES'")[0] == 0
    found = wb.search_memory_facts("Tom uses", group_ids=["tom"], max_facts=20)["facts"]
    assert not any("uses" in f["fact"] for f in found) and found
    names = wb.store.fetchall(
        "SELECT name, count(*) FROM entities GROUP BY name HAVING count(*) > 1"
    )
    assert names == []
    assert not list(tmp_path.glob("*.duckdb"))
    with pytest.raises(InvalidInput, match="promoted"):
        runs.discard(run_id)


def test_imported_memories_stay_and_their_entities_are_reused(built, fake_llm, tmp_path):
    wb = built
    lines = [
        {"type": "fact", "source": "Tom", "target": "Emacs", "relation": "PREFERS",
         "fact": "Tom prefers Emacs.", "group_id": "tom"},
        {"type": "entity", "name": "Zed", "entity_type": "Tool", "group_id": "tom"},
    ]  # fmt: skip
    assert wb.import_memories(lines)["facts_created"] == 1
    tom = wb.store.fetchone("SELECT uuid FROM entities WHERE name = 'Tom'")[0]
    runs = wb.reextraction(other_settings(fake_llm), tmp_path)
    run_id = runs.run("tom")["run_id"]
    diff = runs.compare(run_id)
    assert "Tom (Person)" not in diff["entities"]["removed"] + diff["entities"]["added"]
    assert "Zed (Tool)" not in diff["entities"]["removed"]
    wb.reextraction(shadow_dir=tmp_path).promote(run_id)
    kept = wb.store.fetchone("SELECT source_uuid FROM facts WHERE relation = 'PREFERS'")
    assert kept == (tom,)
    assert wb.store.fetchone("SELECT count(*) FROM entities WHERE name = 'Zed'")[0] == 1
    assert wb.store.fetchone("SELECT count(*) FROM entities WHERE name = 'Tom'")[0] == 1
    mentions = wb.store.fetchone("SELECT count(*) FROM mentions WHERE entity_uuid = ?", [tom])
    assert mentions[0] > 0
    uses = wb.store.fetchone(
        "SELECT count(*) FROM facts WHERE source_uuid = ? AND relation = 'LIVES_IN'", [tom]
    )
    assert uses[0] > 0


def test_discard_drops_the_shadow_and_keeps_the_live_graph(built, fake_llm, tmp_path):
    wb = built
    before = facts_of(wb)
    runs = wb.reextraction(other_settings(fake_llm), tmp_path)
    run_id = runs.run("tom")["run_id"]
    assert runs.discard(run_id)["state"] == "discarded"
    assert facts_of(wb) == before and not list(tmp_path.glob("*.duckdb"))
    with pytest.raises(InvalidInput, match="discarded"):
        wb.reextraction(shadow_dir=tmp_path).promote(run_id)


def test_an_episode_processed_after_the_run_blocks_promote_until_run_again(
    built, fake_llm, tmp_path
):
    wb = built
    runs = wb.reextraction(other_settings(fake_llm), tmp_path)
    run_id = runs.run("tom")["run_id"]
    wb.add_memory("late", "Tom works at Globex.", group_id="tom")
    wb.process_pending()
    with pytest.raises(InvalidInput, match="again"):
        wb.reextraction(shadow_dir=tmp_path).promote(run_id)
    again = runs.run("tom")
    assert again["run_id"] == run_id and again["processed"] == 1
    assert wb.reextraction(shadow_dir=tmp_path).promote(run_id)["state"] == "promoted"


def test_no_search_sees_a_mix_of_old_and_new_during_a_promote(built, fake_llm, tmp_path):
    wb = built
    runs = wb.reextraction(other_settings(fake_llm), tmp_path)
    run_id = runs.run("tom")["run_id"]
    old = facts_of(wb)
    with runs._shadow_store(rx_run(wb, run_id)) as shadow:  # the new texts, before promote
        new_texts = {t for (t,) in shadow.store.fetchall("SELECT fact FROM facts")}
    seen, stop = [], threading.Event()

    def search():
        while not stop.is_set():
            facts = wb.search_memory_facts("Tom", group_ids=["tom"], max_facts=30)["facts"]
            seen.append({(f["uuid"], f["fact"]) for f in facts})

    threads = [threading.Thread(target=search) for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    wb.reextraction(shadow_dir=tmp_path).promote(run_id)
    time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    new = facts_of(wb)
    assert {t for _, t in new} <= new_texts
    kinds = [(s <= old, s <= new) for s in seen if s]
    assert (False, False) not in kinds  # never a mix
    assert (True, False) in kinds and (False, True) in kinds  # before, after


def rx_run(wb, run_id):
    from workbench.store import reextract as rx

    return rx.get_run(wb.store, run_id)


def test_the_estimate_falls_back_to_the_group_average_then_to_two_calls():
    prices = PriceTable.from_dict({"models": {"m": {"input": 1.0, "output": 2.0}}})
    eps = [{"uuid": "a", "body": "x" * 400}, {"uuid": "b", "body": "y" * 400}]
    mixed = estimate("g", eps, {"a": (3, 1000, 100)}, "m", prices)
    assert (mixed.calls, mixed.prompt_tokens, mixed.basis) == (6, 2000, "mixed")
    assert mixed.usd == pytest.approx((2000 * 1.0 + 200 * 2.0) / 1e6)
    bare = estimate("g", eps, {}, "unknown-model", prices)
    assert bare.calls == 4 and bare.basis == "default" and bare.usd is None


def entity(uuid, name, created="1", **extra):
    return {"uuid": uuid, "name": name, "name_norm": name.lower(), "entity_type": "Person",
            "summary": "", "created_at": created, "importance": 3, "stability": 3,
            "decay_score": 0.0, "lifecycle_state": "ACTIVE", "last_accessed_at": None,
            "access_count": 0, "soft_deleted_at": None, **extra}  # fmt: skip


def fact(uuid, s, t, relation="R", created="1", episode="e1", **extra):
    return {**entity(uuid, "f", created), "source_uuid": s, "target_uuid": t,
            "relation": relation, "fact": "x", "episode_uuid": episode, **extra}  # fmt: skip


def test_carry_over_keeps_uuids_and_stats_of_matches_and_removes_the_rest():
    old_e = [entity("o-tom", "Tom", access_count=5), entity("o-ann", "Ann")]
    old_f = [fact("o-f1", "o-tom", "o-ann", access_count=2), fact("o-f2", "o-ann", "o-tom")]
    kept = [{"uuid": "k-bob", "name_norm": "bob", "entity_type": "Person"}]
    new_e = [entity("n-tom", "Tom"), entity("n-bob", "Bob"), entity("n-eve", "Eve")]
    new_f = [fact("n-f1", "n-tom", "n-bob"), fact("n-f2", "n-tom", "n-eve")]
    mentions = [{"episode_uuid": "e1", "entity_uuid": u} for u in ("n-tom", "n-bob")]
    swap = carry_over(old_e, old_f, kept, new_e, new_f, mentions)
    assert [e["uuid"] for e in swap.entities] == ["o-tom", "n-eve"]
    assert swap.entities[0]["access_count"] == 5
    assert [(f["source_uuid"], f["target_uuid"]) for f in swap.facts] == [
        ("o-tom", "k-bob"), ("o-tom", "n-eve")]  # fmt: skip
    assert swap.removed == {"entity": ["o-ann"], "fact": ["o-f1", "o-f2"]}
    assert swap.mentions == [{"episode_uuid": "e1", "entity_uuid": "o-tom"},
                             {"episode_uuid": "e1", "entity_uuid": "k-bob"}]  # fmt: skip
    same = carry_over(old_e, old_f, [], old_e, old_f, [])
    assert same.removed == {"entity": [], "fact": []}
    assert [f["uuid"] for f in same.facts] == ["o-f1", "o-f2"]


def test_compare_counts_added_removed_changed_duplicates_and_invalidations():
    old = ([entity("1", "Tom", summary="a"), entity("2", "Ann")],
           [fact("f", "1", "2", invalid_at="t")])  # fmt: skip
    new = ([entity("1", "Tom", summary="b"), entity("3", "Eve"), entity("4", "Eve")], [])
    report = compare_graphs(old, new)
    assert report["entities"]["added"] == ["Eve (Person)"]
    assert report["entities"]["removed"] == ["Ann (Person)"]
    assert report["entities"]["changed"] == ["Tom (Person)"]
    assert report["entities"]["duplicates_new"] == 1
    assert report["facts"]["removed"] == ["Tom R Ann"]
    assert report["facts"]["invalidated_old"] == 1 and report["facts"]["invalidated_new"] == 0


def test_a_second_run_of_a_group_in_the_same_process_is_refused(built, fake_llm, tmp_path):
    from workbench.jobs.reextract import _busy

    runs = built.reextraction(other_settings(fake_llm), tmp_path)
    with _busy("tom"), pytest.raises(InvalidInput, match="running in this process"):
        runs.run("tom")
    assert runs.run("tom")["state"] == "built"  # once the other is done


def test_another_replica_on_postgres_swaps_a_promoted_group_in_at_once(
    fake_llm, hash_embedder, pg_location, tmp_path
):
    """Two workbenches on one PostgreSQL database: one promotes, the other follows the change
    log; its searches, probed throughout, see the old generation or the new, never a mix."""
    from tests.pg import wait_for
    from workbench.store import changes as log_sql

    responder(fake_llm)
    shared = {"db": ":memory:", "SVC_KNOWLEDGE_DATABASE_URL": pg_location}
    a = open_wb(fake_llm, hash_embedder, **shared)
    b = None
    try:
        for episode in history(12):
            a.add_memory(**episode)
        assert a.process_pending() == 12
        b = open_wb(fake_llm, hash_embedder, **shared)
        runs = a.reextraction(other_settings(fake_llm), tmp_path)
        run_id = runs.run("tom")["run_id"]
        old = facts_of(a)
        top = log_sql.latest_seq(a.store)
        seen, stop = [], threading.Event()

        def search():
            while not stop.is_set():
                facts = b.search_memory_facts("Tom", group_ids=["tom"], max_facts=30)["facts"]
                seen.append({(f["uuid"], f["fact"]) for f in facts})

        threads = [threading.Thread(target=search) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            assert wait_for(lambda: len(seen) > 5, timeout=10)
            runs.promote(run_id)
            new = facts_of(a)

            def switched() -> bool:
                return bool(seen) and bool(seen[-1]) and seen[-1] <= new

            assert wait_for(switched, timeout=10)
            time.sleep(0.2)
        finally:
            stop.set()
            for t in threads:
                t.join()
        kinds = [(s <= old, s <= new) for s in seen if s]
        assert (False, False) not in kinds  # never a mix
        assert (True, False) in kinds and (False, True) in kinds  # before, after
        # the promote is one change for the other processes, not one per memory (b's
        # searches log theirs: the accesses they write)
        after = log_sql.changes_since(a.store, top)
        assert [(k, u) for _, k, u, o in after if o == a.store.origin] == [
            (log_sql.GENERATION, "tom")
        ]
    finally:
        if b is not None:
            b.close()
        a.close()


def test_a_run_beside_live_ingestion_shares_its_llm_throttle_and_slots(built, fake_llm, tmp_path):
    from workbench.jobs.reextract import Shadow

    def shadow(name, settings):
        return Shadow(str(tmp_path / name), built.embedder, settings, built.metrics,
                      built.clock, live_chat=built.chat)  # fmt: skip

    live = built.chat
    with shadow("same.duckdb", other_settings(fake_llm)) as same:
        assert same.chat._throttle is live._throttle and same.chat._slots is live._slots
    elsewhere = other_settings(fake_llm, SVC_KNOWLEDGE_COMPAT_BASE_URL="http://127.0.0.1:9/v1")
    with shadow("other.duckdb", elsewhere) as other:  # another server: its own limits
        assert other.chat._throttle is not live._throttle
    # the workbench hands its model to the runs it starts
    assert built.reextraction(shadow_dir=tmp_path).live_chat is live


def test_a_run_whose_shadow_is_on_another_machine_is_not_resumed_here(built, fake_llm, tmp_path):
    runs = built.reextraction(other_settings(fake_llm), tmp_path)
    run_id = runs.run("tom")["run_id"]
    built.store.execute("UPDATE reextract_runs SET state = 'running' WHERE run_id = ?", [run_id])
    for path in tmp_path.glob("*.duckdb"):
        path.unlink()
    with pytest.raises(InvalidInput, match="not on this machine"):
        runs.run("tom")
    assert runs.discard(run_id)["state"] == "discarded"


# --- deletes reach the open runs (issue 55, item 4) ---------------------------------------
SECRET = "User lives in Berlin. User leads Atlas."  # "User": in no other episode


def with_secret(wb) -> str:
    """One more episode of the group, with entities no other episode mentions."""
    uuid = wb.add_memory("secret", SECRET, group_id="tom")["episode_uuid"]
    assert wb.process_pending() == 1
    assert "User" in entity_names(wb)
    return uuid


def entity_names(wb) -> set[str]:
    return {n for (n,) in wb.store.fetchall("SELECT name FROM entities WHERE group_id = 'tom'")}


def shadow_text(path) -> str:
    """The shadow's episodes, passages, entity names and facts (a summary of an entity other
    episodes mention keeps what the deleted one added, in the live graph as in a shadow)."""
    from workbench.store import Store

    store = Store.open(str(path), dim=None)
    try:
        rows = store.fetchall("SELECT body FROM episodes") + store.fetchall(
            "SELECT text FROM passages"
        )
        rows += store.fetchall("SELECT name FROM entities") + store.fetchall(
            "SELECT fact FROM facts"
        )
        return " ".join(str(r[0]) for r in rows)
    finally:
        store.close()


@pytest.fixture
def built_file(fake_llm, hash_embedder, tmp_path):
    """``built`` on a DuckDB file: its runs' shadows go to the default folder beside it."""
    responder(fake_llm)
    wb = open_wb(fake_llm, hash_embedder, db=tmp_path / "kb.duckdb")
    for episode in history(12):
        wb.add_memory(**episode)
    assert wb.process_pending() == 12
    yield wb
    wb.close()


@pytest.mark.parametrize("in_use", [False, True])
def test_a_deleted_episode_is_not_brought_back_by_a_promote(built_file, fake_llm, tmp_path, in_use):
    from workbench.jobs.reextract import _busy

    wb = built_file
    secret = with_secret(wb)
    runs = wb.reextraction(other_settings(fake_llm))
    run_id = runs.run("tom")["run_id"]
    (shadow,) = (tmp_path / "kb.duckdb.reextract").glob("*.duckdb")
    assert "User lives" in shadow_text(shadow)
    if in_use:  # the run's shadow is busy: the run (or the promote) prunes it itself
        with _busy("tom"):
            wb.delete_episode(secret)
        assert "User lives" in shadow_text(shadow)
    else:
        wb.delete_episode(secret)
        assert "User" not in shadow_text(shadow)  # pruned at once: its text is gone
    assert "User" not in entity_names(wb)
    wb.reextraction().promote(run_id)
    assert "User" not in entity_names(wb)
    assert not wb.store.fetchone("SELECT count(*) FROM facts WHERE fact LIKE '%User%'")[0]
    assert all(n["name"] != "User" for n in wb.search_memory_nodes("User", ["tom"])["nodes"])


def test_clearing_a_group_discards_its_open_run(built_file, fake_llm, tmp_path):
    wb = built_file
    runs = wb.reextraction(other_settings(fake_llm))
    run_id = runs.run("tom")["run_id"]
    assert list((tmp_path / "kb.duckdb.reextract").glob("*.duckdb*"))
    wb.clear_graph(["tom"])
    assert runs.status(run_id)["state"] == "discarded"
    assert not list((tmp_path / "kb.duckdb.reextract").glob("*.duckdb*"))  # text gone too
    with pytest.raises(InvalidInput, match="discarded"):
        wb.reextraction().promote(run_id)
    assert entity_names(wb) == set()


def test_a_run_discarded_by_a_clear_while_it_builds_stays_discarded(built, fake_llm, tmp_path):
    from workbench.jobs.reextract import _busy

    wb = built
    runs = wb.reextraction(other_settings(fake_llm), tmp_path)
    run = runs._new_run("tom", 12)
    with _busy("tom"):  # building in this process: the clear cannot delete the shadow
        wb.clear_graph(["tom"])
    assert runs.status(run["run_id"])["state"] == "discarded"
    from workbench.store import reextract as rx

    rx.set_state(wb.store, run["run_id"], "built", None)  # what the run would do at its end
    assert runs.status(run["run_id"])["state"] == "discarded"


# --- a shadow's path comes from its run id (issue 55, item 6) --------------------------------
def test_a_crafted_shadow_path_cannot_make_a_discard_delete_another_file(built, tmp_path):
    wb = built
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    runs = wb.reextraction(shadow_dir=tmp_path / "shadows")
    row = {"run_id": "rx-0123456789ab", "group_id": "tom", "model": "m",
           "shadow_path": str(victim), "episodes": 1, "predicted_calls": 1,
           "created_at": wb.clock()}  # fmt: skip
    from workbench.store import reextract as rx

    rx.insert_run(wb.store, row)
    assert runs.discard("rx-0123456789ab")["state"] == "discarded"
    assert victim.read_text() == "precious"
    rx.insert_run(wb.store, {**row, "run_id": f"../../{victim.stem}", "group_id": "g2"})
    with pytest.raises(InvalidInput, match="not a re-extraction run id"):
        runs.discard(f"../../{victim.stem}")
    wb.store.execute("UPDATE episodes SET group_id = 'g2', status = 'done'")
    with pytest.raises(InvalidInput, match="not a re-extraction run id"):
        runs.run("g2")  # the open run of g2 has a malformed id: refused, nothing opened
    assert runs.forget(["g2"], cleared=True) == ["deferred"]  # a delete goes on regardless
    assert victim.exists()
