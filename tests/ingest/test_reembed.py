"""An entity whose summary grew keeps its vector until the unseen text reaches a fraction of
the summary (workbench.ingest.reembed); its summary and keyword document are always current."""

from __future__ import annotations

import numpy as np
import pytest

from tests.ingest.test_pipeline import open_wb
from workbench.fakes import rule_llm
from workbench.ingest.extract import entity_text
from workbench.ingest.reembed import ReembedPolicy

WORDS = [
    "amber",
    "basalt",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "jasper",
    "kelp",
    "lagoon",
]


def test_the_policy_embeds_again_once_the_unseen_text_reaches_the_fraction():
    policy = ReembedPolicy(0.25)
    assert policy.due("e1", 10, 100)  # never embedded by this process: the safe side
    policy.written(["e1"], [])
    assert not policy.due("e1", 10, 100)
    policy.written([], [("e1", 10)])
    assert not policy.due("e1", 14, 100)  # 24 of 100 unseen
    assert policy.due("e1", 15, 100)  # 25 of 100
    policy.written(["e1"], [])  # embedded again: nothing unseen
    assert not policy.due("e1", 24, 100)


def test_fraction_zero_embeds_every_change_and_bad_fractions_are_refused():
    policy = ReembedPolicy(0.0)
    policy.written(["e1"], [])
    assert policy.due("e1", 1, 1000) and len(policy) == 0
    with pytest.raises(ValueError):
        ReembedPolicy(1.5)


def test_a_policy_tracking_too_many_entities_forgets_them_and_embeds_them_again():
    policy = ReembedPolicy(0.5, max_entities=2)
    policy.written(["a", "b", "c"], [])
    assert not policy.due("a", 1, 100)
    policy.written(["d"], [])  # over the limit: forgotten, then d recorded
    assert policy.due("a", 1, 100) and not policy.due("d", 1, 100)


def _history(wb, episodes):
    """Per processed episode: Maria Keller's uuid, summary, stored and indexed vectors."""
    out = []
    for i, word in enumerate(episodes):
        wb.add_memory(f"n{i}", f"Maria Keller noted {word}.", group_id="g1")
        assert wb.process_pending() == 1
        uuid, summary, etype = wb.store.fetchone(
            "SELECT uuid, summary, entity_type FROM entities WHERE name = 'Maria Keller'"
        )
        stored = np.asarray(
            wb.store.fetchone("SELECT vector FROM entity_embeddings WHERE uuid = ?", [uuid])[0],
            dtype=np.float32,
        )
        indexed = wb.search.indexes.vectors["entity"].vector(uuid)
        out.append(
            {
                "uuid": uuid,
                "summary": summary,
                "type": etype,
                "stored": stored,
                "indexed": indexed,
                "word": word,
            }
        )
    return out


def _embedding(embedder, step):
    return embedder.embed([entity_text("Maria Keller", step["type"], step["summary"])])[0]


@pytest.mark.parametrize("fraction", [0.3, 0.0])
def test_a_growing_summary_is_embedded_again_only_when_enough_is_unseen(
    fake_llm, hash_embedder, fraction
):
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_ENTITY_REEMBED_FRACTION=str(fraction))
    try:
        steps = _history(wb, WORDS)
        keywords = wb.search.indexes.keywords["entity"]
        embedded_at = 0  # the step whose summary the vector shows
        kept = 0
        for i, step in enumerate(steps):
            # the summary, the keyword document and the index are always current
            assert step["word"] in step["summary"]
            assert step["uuid"] in {u for u, _, _ in keywords.search(step["word"], k=5)}
            np.testing.assert_allclose(step["indexed"], step["stored"], atol=1e-6)
            if i and np.allclose(step["stored"], steps[i - 1]["stored"], atol=1e-6):
                kept += 1
                unseen = len(step["summary"]) - len(steps[embedded_at]["summary"])
                assert unseen < fraction * len(step["summary"])
            else:
                np.testing.assert_allclose(
                    step["stored"], _embedding(hash_embedder, step), atol=1e-5
                )
                if i:
                    unseen = len(step["summary"]) - len(steps[embedded_at]["summary"])
                    assert unseen >= fraction * len(step["summary"])
                embedded_at = i
        if fraction:
            assert 0 < kept < len(steps) - 2  # some kept, several embedded again
        else:
            assert kept == 0
    finally:
        wb.close()


def test_after_a_restart_the_first_update_embeds_the_summary_again(
    fake_llm, hash_embedder, tmp_path
):
    fake_llm.set_responder(rule_llm.respond)
    db = tmp_path / "kb.duckdb"
    wb = open_wb(fake_llm, hash_embedder, db=db, SVC_KNOWLEDGE_ENTITY_REEMBED_FRACTION="0.9")
    try:
        first = _history(wb, WORDS[:3])
        assert np.allclose(first[-1]["stored"], first[0]["stored"], atol=1e-6)  # kept
    finally:
        wb.close()
    again = open_wb(fake_llm, hash_embedder, db=db, SVC_KNOWLEDGE_ENTITY_REEMBED_FRACTION="0.9")
    try:
        step = _history(again, WORDS[3:4])[0]
        # this process does not know what the stored vector saw: it embeds the summary
        np.testing.assert_allclose(step["stored"], _embedding(hash_embedder, step), atol=1e-5)
    finally:
        again.close()


def _alias_responder(first: str, second: str, reverse: bool):
    """Episode "alias": two names, Maria Keller and Keller, that resolve to one entity (Keller
    is close to Maria Keller and the model says it is her), each adding its own text to the
    summary."""

    def respond(request):
        if rule_llm.structure_name(request) == "NodeResolutions":
            return {"entity_resolutions": [{"id": 0, "duplicate_of": 0}]}
        text = rule_llm.episode_text(request)
        if "alias" not in text:
            return rule_llm.respond(request)
        name = rule_llm.structure_name(request)
        if name == "ExtractedEntities":
            base = "Maria Keller is mentioned: Maria Keller noted amber."
            found = [
                {
                    "name": "Maria Keller",
                    "entity_type": "Person",
                    "summary": first,
                    "importance": 4,
                    "stability": 3,
                },
                {
                    "name": "Keller",
                    "entity_type": "Person",
                    "summary": f"{base} {second}",
                    "importance": 4,
                    "stability": 3,
                },
            ]
            return {"entities": found[::-1] if reverse else found}
        return {"edges": []} if name == "ExtractedEdges" else None

    return respond


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize(("fraction", "embedded_again"), [(0.9, False), (0.6, True), (0.35, True)])
def test_two_names_of_one_entity_in_an_episode_grow_one_summary_and_keep_vectors_aligned(
    fake_llm, hash_embedder, fraction, embedded_again, reverse
):
    first, second = "She prefers basalt tiles.", "Keller bought cobalt paint."
    fake_llm.set_responder(_alias_responder(first, second, reverse))
    wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_ENTITY_REEMBED_FRACTION=str(fraction))
    try:
        before = _history(wb, ["amber"])[0]
        wb.add_memory("alias", "alias: Maria Keller and Keller.", group_id="g1")
        assert wb.process_pending() == 1
        rows = wb.store.fetch_dicts("SELECT uuid, name, summary, entity_type FROM entities")
        assert [r["name"] for r in rows] == ["Maria Keller"]  # Keller resolved to her
        summary = rows[0]["summary"]
        # both names' text is in the summary: the second merged onto the first
        assert "basalt" in summary and "cobalt" in summary and "amber" in summary
        added = len(summary) - len(before["summary"])
        stored = np.asarray(
            wb.store.fetchone(
                "SELECT vector FROM entity_embeddings WHERE uuid = ?", [before["uuid"]]
            )[0],
            dtype=np.float32,
        )
        np.testing.assert_allclose(
            wb.search.indexes.vectors["entity"].vector(before["uuid"]), stored, atol=1e-6
        )
        # 0.9: the episode's text stays under the fraction, the vector is kept (and what it
        # has not seen is the sum of both names' text); 0.35: Maria Keller's short text alone
        # is under it, Keller's is not, so in either order the vector is made again; 0.6,
        # in the given order: each name's text alone stays under it and only their sum
        # reaches it (so the sum must be counted; reversed, Keller's text alone reaches it)
        assert (added >= fraction * len(summary)) == embedded_again
        if embedded_again:
            np.testing.assert_allclose(
                stored, _embedding(hash_embedder, {"type": "Person", "summary": summary}), atol=1e-5
            )
        else:
            np.testing.assert_allclose(stored, before["stored"], atol=1e-6)
            assert wb.pipeline.extractor.reembed._unseen[before["uuid"]] == added
    finally:
        wb.close()


def test_a_batch_of_many_groups_keeps_every_indexed_vector_equal_to_the_stored_one(
    fake_llm, hash_embedder
):
    """Several groups in one process_pending: new entities, grown summaries that keep their
    vector, grown ones embedded again and new facts share one write; each row's vector must
    land on its own uuid in the index."""
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_ENTITY_REEMBED_FRACTION="0.4")
    groups = [f"g{i}" for i in range(6)]
    lines = [
        "Maria Keller uses Neovim. Tom works at Acme.",
        "Maria Keller noted {w}.",
        "Tom noted {w}. Tom lives in Berlin.",
        "Maria Keller leads Atlas {w}.",
    ]
    try:
        for round_, line in enumerate(lines):
            for i, group in enumerate(groups):
                word = WORDS[(i + round_) % len(WORDS)]
                wb.add_memory(f"{group}-{round_}", line.format(w=word), group_id=group)
            assert wb.process_pending() == len(groups)
        kept = len(wb.pipeline.extractor.reembed._unseen) and sum(
            1 for v in wb.pipeline.extractor.reembed._unseen.values() if v
        )
        assert kept  # some grown summaries kept their vector in these batches
        for kind, table in (("entity", "entity_embeddings"), ("fact", "fact_embeddings")):
            stored = wb.store.fetchall(f"SELECT uuid, vector FROM {table}")
            assert len(stored) > len(groups)
            index = wb.search.indexes.vectors[kind]
            for uuid, vector in stored:
                np.testing.assert_allclose(
                    index.vector(uuid),
                    np.asarray(vector, np.float32),
                    atol=1e-6,
                    err_msg=f"{kind} {uuid}",
                )
    finally:
        wb.close()


def _prepare(wb, body, group_id="g1"):
    uuid = wb.add_memory("later", body, group_id=group_id)["episode_uuid"]
    episode = wb.store.fetch_dicts("SELECT * FROM episodes WHERE uuid = ?", [uuid])[0]
    return wb.pipeline.extractor.prepare(episode)


def test_an_episode_written_again_or_deleted_does_not_count_its_text_twice(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_ENTITY_REEMBED_FRACTION="0.9")
    try:
        uuid = _history(wb, ["amber"])[0]["uuid"]
        unseen = wb.pipeline.extractor.reembed._unseen
        assert unseen[uuid] == 0
        grown = _prepare(wb, "Maria Keller noted basalt.")
        added = grown.changes.kept_vectors[uuid]
        wb.pipeline.writer.write([grown])
        wb.pipeline.writer.write([grown])  # a second delivery: already done, writes nothing
        assert unseen[uuid] == added
        dropped = _prepare(wb, "Maria Keller noted cobalt.")
        assert uuid in dropped.changes.kept_vectors
        wb.delete_episode(dropped.episode_uuid)
        wb.pipeline.writer.write([dropped])
        assert unseen[uuid] == added
    finally:
        wb.close()


def test_a_prepared_episode_whose_vectors_do_not_match_its_rows_is_refused(fake_llm, hash_embedder):
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(fake_llm, hash_embedder)
    try:
        prepared = _prepare(wb, "Maria Keller works at Acme.")
        prepared.vectors = prepared.vectors[1:]
        with pytest.raises(ValueError, match="2 vectors for 2 entities and 1 facts"):
            wb.pipeline.writer.write([prepared])
        assert wb.store.fetchone("SELECT count(*) FROM entities")[0] == 0
    finally:
        wb.close()
