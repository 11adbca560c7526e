"""``search_memory``: what was said is searchable the moment ``add_memory`` returns (no LLM),
facts and passages in one ranked list, near-duplicates held back, and a passage's life
(accessed, deleted with its episode or group, kept across a restart)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from workbench.clock import ManualClock
from workbench.config import load_settings
from workbench.errors import InvalidInput
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.search.recall import Candidate, fuse, near_duplicate

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
CHAT = (
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.\n"
    "Melanie: That sounds inspiring! What happened there?\n"
    "Caroline: People shared their transgender stories; I felt accepted.\n"
    "Melanie: I painted a lake sunrise last year, it calms me.\n"
    "Caroline: I'm thinking about a career in counseling."
)


def open_wb(db: str = ":memory:", embedder=None, clock=None) -> Workbench:
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": db}, env_file=None)
    return Workbench.open(
        settings, embedder=embedder or HashEmbedder(), chat=None, clock=clock or ManualClock(T0)
    )


@pytest.fixture
def wb():
    with open_wb() as workbench:
        yield workbench


def chat(wb: Workbench, group: str = "g1", body: str = CHAT, **extra) -> str:
    return wb.add_memory("session 1", body, group_id=group, source="message", **extra)[
        "episode_uuid"
    ]


def results(wb: Workbench, query: str, **args) -> list[dict]:
    return wb.search_memory(query, **args)["results"]


# --- the fusion (pure) ------------------------------------------------------------------------
def cand(kind: str, uuid: str, score: float, words: str) -> Candidate:
    return Candidate(kind, uuid, score, words)


def test_fuse_orders_by_score_whatever_the_kind():
    cands = [cand("fact", "f1", 0.5, "a b"), cand("passage", "p1", 0.9, "c d"),
             cand("passage", "p2", 0.1, "e f"), cand("fact", "f2", 0.7, "g h")]  # fmt: skip
    assert [c.uuid for c in fuse(cands, 3)] == ["p1", "f2", "f1"]


def test_fuse_holds_back_a_near_duplicate_of_a_better_result_of_its_kind():
    cands = [
        cand("passage", "p1", 0.9, "caroline support group powerful yesterday"),
        cand("passage", "p2", 0.8, "caroline support group powerful"),  # all its words in p1
        cand("fact", "f1", 0.7, "caroline support group powerful"),  # another kind: kept
        cand("fact", "f2", 0.5, "melanie paint sunrise"),
    ]
    assert [c.uuid for c in fuse(cands, 3)] == ["p1", "f1", "f2"]
    # held back, not lost: it fills the list when too few others are left
    assert [c.uuid for c in fuse(cands, 4)] == ["p1", "p2", "f1", "f2"]
    assert [c.uuid for c in fuse(cands, 3, threshold=None)] == ["p1", "p2", "f1"]
    assert [c.uuid for c in fuse(cands, 2, across_kinds=True)] == ["p1", "f2"]


def test_near_duplicate_is_the_share_of_the_smaller_set_in_the_other():
    a, b = frozenset("a b c d e".split()), frozenset("a b c d x y z".split())
    assert near_duplicate(a, b, 0.8)  # 4 of a's 5 terms
    assert not near_duplicate(a, b, 0.81)
    assert not near_duplicate(frozenset(), b)


def test_fuse_breaks_ties_by_kind_then_uuid():
    cands = [
        cand("passage", "b", 0.5, "x"),
        cand("fact", "z", 0.5, "y"),
        cand("passage", "a", 0.5, "w"),
    ]
    assert [c.uuid for c in fuse(cands, 3)] == ["z", "a", "b"]


# --- searchable on arrival --------------------------------------------------------------------
def test_an_episode_added_with_no_llm_is_found_by_search_memory_within_a_second(wb):
    started = time.monotonic()
    episode = chat(wb)
    hits = results(wb, "Who thought about a career in counseling?")
    elapsed = time.monotonic() - started
    assert wb.chat is None and elapsed < 1.0
    top = hits[0]
    assert top["kind"] == "passage" and "career in counseling" in top["text"]
    assert top["episode_uuid"] == episode and top["episode_name"] == "session 1"
    assert top["speaker"] == "Melanie, Caroline" and top["reference_time"] == T0.isoformat()
    assert wb.get_episodes(["g1"])["episodes"][0]["status"] == "queued"  # not extracted


def test_each_line_of_a_passage_keeps_its_speaker(wb):
    chat(wb)
    hits = results(wb, "painted a lake sunrise", kinds=["passage"])
    assert hits[0]["text"] == (
        "Melanie: I painted a lake sunrise last year, it calms me.\n"
        "Caroline: I'm thinking about a career in counseling."
    )
    assert hits[0]["speaker"] == "Melanie, Caroline" and hits[0]["position"] == 1


def test_facts_and_passages_come_in_one_list_on_one_scale(wb):
    chat(wb)
    wb.import_jsonl([{"type": "fact", "source": "Melanie", "target": "Pottery", "group_id": "g1",
                      "fact": "Melanie signed up for a pottery class"}])  # fmt: skip
    hits = results(wb, "Melanie pottery class painted sunrise", group_ids=["g1"])
    assert {h["kind"] for h in hits} == {"fact", "passage"}
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    for h in hits:  # one formula: the weighted parts give the score, whatever the kind
        parts, weights = h["score_parts"], h["score_weights"]
        assert h["score"] == pytest.approx(sum(weights[n] * v for n, v in parts.items()), abs=1e-5)
    fact = next(h for h in hits if h["kind"] == "fact")
    assert fact["fact"] == "Melanie signed up for a pottery class" and fact["episodes"] == []
    assert set(fact) >= {"uuid", "score", "valid_at", "invalid_at", "episodes"}


def test_kinds_max_results_and_min_score(wb):
    chat(wb)
    line = {"type": "fact", "source": "Caroline", "target": "Counseling", "group_id": "g1",
            "fact": "Caroline considers a career in counseling"}  # fmt: skip
    wb.import_jsonl([line])
    query = "career in counseling"
    assert {h["kind"] for h in results(wb, query, kinds=["fact"])} == {"fact"}
    assert {h["kind"] for h in results(wb, query, kinds=["passage"])} == {"passage"}
    assert len(results(wb, query, max_results=1)) == 1
    best = results(wb, query)[0]["score"]
    assert [h["score"] for h in results(wb, query, min_score=best)] == [best]
    with pytest.raises(InvalidInput, match="kinds"):
        results(wb, query, kinds=["entity"])
    with pytest.raises(InvalidInput, match="max_results"):
        results(wb, query, max_results=0)


def test_groups_and_creation_time_filter_passages(wb):
    chat(wb, "g1")
    wb.clock.advance(days=3)
    chat(wb, "g2", body="Tom: I moved to Lisbon for a career in counseling.")
    assert {h["group_id"] for h in results(wb, "counseling", group_ids=["g2"])} == {"g2"}
    later = results(wb, "counseling", created_after="2026-03-02T00:00:00Z")
    assert {h["group_id"] for h in later} == {"g2"}
    earlier = results(wb, "counseling", created_before="2026-03-02T00:00:00Z")
    assert {h["group_id"] for h in earlier} == {"g1"}
    with pytest.raises(InvalidInput, match="unknown group"):
        results(wb, "counseling", group_ids=["nowhere"])


def test_text_and_json_episodes_are_searchable_too(wb):
    wb.add_memory("note", "The boiler was serviced on Friday.\n\nIt needs a new valve.", "g1")
    wb.add_memory("card", '{"patient": {"name": "Ana", "allergy": "penicillin"}}', "g1",
                  source="json")  # fmt: skip
    assert (
        results(wb, "penicillin allergy")[0]["text"]
        == "patient.name: Ana\npatient.allergy: penicillin"
    )
    assert "boiler" in results(wb, "when was the boiler serviced")[0]["text"]


# --- a passage's life -------------------------------------------------------------------------
def test_a_returned_passage_is_an_access_counted_in_the_store(wb):
    chat(wb)
    wb.clock.advance(seconds=3600)
    [hit] = results(wb, "career in counseling", kinds=["passage"], max_results=1)
    assert hit["access_count"] == 1 and hit["last_accessed_at"] == wb.clock().isoformat()
    wb.search.indexes.flush()
    rows = wb.store.fetchall("SELECT uuid, access_count FROM passages ORDER BY position")
    assert {u: n for u, n in rows}[hit["uuid"]] == 1
    assert sum(n for _, n in rows) == 1  # what was not returned was not accessed


def test_deleting_an_episode_deletes_its_passages(wb):
    episode = chat(wb)
    other = chat(wb, body="Tom: counseling is hard work.")
    assert wb.passages.flush(timeout=10)
    out = wb.delete_episode(episode)
    assert out["passages_removed"] == 2
    assert {h["episode_uuid"] for h in results(wb, "career in counseling")} == {other}
    assert wb.store.fetchone("SELECT count(*) FROM passages")[0] == 1
    assert wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0] == 1


def test_clearing_a_group_deletes_its_passages(wb):
    chat(wb, "g1")
    chat(wb, "g2")
    assert wb.clear_graph(["g1"])["passages_removed"] == 2
    assert {h["group_id"] for h in results(wb, "career in counseling")} == {"g2"}
    assert wb.store.fetchone("SELECT count(DISTINCT group_id) FROM passages")[0] == 1


def test_a_retried_add_memory_writes_its_passages_once(wb):
    uuid = "3a460868-7411-4c0e-99cf-570bf7f9a77d"
    chat(wb, uuid=uuid)
    chat(wb, uuid=uuid)
    assert wb.store.fetchone("SELECT count(*) FROM passages")[0] == 2


class BrokenEmbedder(HashEmbedder):
    def __init__(self):
        super().__init__()
        self.broken = False

    def embed(self, texts):
        if self.broken:
            raise ConnectionError("embedding server down")
        return super().embed(texts)


def test_an_embedder_down_does_not_lose_the_episode_its_words_stay_searchable():
    embedder = BrokenEmbedder()
    with open_wb(embedder=embedder) as wb:
        embedder.broken = True
        episode = chat(wb)
        assert wb.passages.flush(timeout=10)
        assert wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0] == 0
        embedder.broken = False
        hits = results(wb, "career in counseling")
        assert hits[0]["episode_uuid"] == episode and hits[0]["score_parts"]["similarity"] == 0
        # the next start embeds what was left without a vector
        wb.start()
        assert wb.passages.flush(timeout=10)
        assert wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0] == 2
        hits = results(wb, "career in counseling")
        assert hits[0]["score_parts"]["similarity"] > 0


def test_passages_are_found_by_words_at_once_and_by_meaning_once_embedded(wb):
    episode = chat(wb)
    assert wb.passages.flush(timeout=10)
    assert wb.search.indexes.status()["passage"] == {"memories": 2, "vector_index": "exact"}
    assert len(wb.search.indexes.vectors["passage"]) == 2
    hits = results(wb, "career in counseling", kinds=["passage"])
    assert hits[0]["episode_uuid"] == episode and hits[0]["score_parts"]["similarity"] > 0


def test_a_passage_deleted_before_it_is_embedded_gets_no_vector(wb):
    embedder = wb.embedder
    gate = __import__("threading").Event()
    real = embedder.embed

    def slow(texts):
        gate.wait(10)
        return real(texts)

    embedder.embed = slow
    try:
        episode = chat(wb)
        wb.delete_episode(episode)
    finally:
        gate.set()
    assert wb.passages.flush(timeout=10)
    assert wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0] == 0
    assert len(wb.search.indexes.vectors["passage"]) == 0


@pytest.mark.duckdb_only("the database file and the indexes saved beside it")
def test_passages_are_searchable_after_a_restart(tmp_path):
    db = str(tmp_path / "kb.duckdb")
    with open_wb(db) as wb:
        episode = chat(wb)
    with open_wb(db) as wb:
        hits = results(wb, "career in counseling", kinds=["passage"])
        assert hits[0]["episode_uuid"] == episode
        assert wb.search.indexes.status()["passage"]["memories"] == 2


def test_an_export_carries_the_passages_and_their_vectors(wb, tmp_path):
    episode = chat(wb)
    assert wb.passages.flush(timeout=10)
    tables = wb.export_parquet(tmp_path / "snap")
    assert {"passages", "passage_embeddings"} <= set(tables)
    from workbench.store import Store

    snapshot = Store.open_snapshot(tmp_path / "snap")
    try:
        rows = snapshot.fetchall("SELECT episode_uuid, position, speaker FROM passages ORDER BY 2")
        assert rows == [(episode, 0, "Caroline, Melanie"), (episode, 1, "Melanie, Caroline")]
        assert snapshot.fetchone("SELECT count(*) FROM passage_embeddings")[0] == 2
    finally:
        snapshot.close()


@pytest.mark.duckdb_only("the notebooks' live tables of a database file")
def test_the_notebooks_live_tables_show_the_passages(tmp_path):
    import sys
    from pathlib import Path

    db = str(tmp_path / "kb.duckdb")
    with open_wb(db) as wb:
        chat(wb)
    notebooks = str(Path(__file__).resolve().parents[2] / "notebooks")
    sys.path.insert(0, notebooks)
    try:
        import lab

        con = lab.live_tables(db)  # no service running: the file itself, read-only
        try:
            rows = con.sql("SELECT speaker, count(*) FROM passages GROUP BY 1 ORDER BY 1")
            assert rows.fetchall() == [("Caroline, Melanie", 1), ("Melanie, Caroline", 1)]
        finally:
            con.close()
    finally:
        sys.path.remove(notebooks)
