"""The conversational retrieval set is what its generator makes (the test split is frozen),
and the evaluation reports every method, category and language on it."""

from __future__ import annotations

import json

from workbench.eval import convo_set, search_eval


def test_the_committed_splits_are_what_the_generator_makes(tmp_path):
    written = convo_set.write(tmp_path)
    for split, path in written.items():
        assert path.read_bytes() == search_eval.split_path(split).read_bytes(), split


def test_the_set_has_every_kind_of_question_in_both_splits():
    for split in ("dev", "test"):
        lines = [json.loads(x) for x in search_eval.split_path(split).read_text().splitlines()]
        memories = {m["key"]: m for m in lines if m["type"] == "memory"}
        chats = {m["key"]: m for m in lines if m["type"] == "said"}
        questions = [q for q in lines if q["type"] == "question"]
        assert len(questions) >= 300
        kinds = {q["category"] for q in questions}
        assert kinds == {"paraphrase", "multi_hop", "temporal", "preference", "multilingual",
                         "said"}  # fmt: skip
        assert {q["lang"] for q in questions} == {"en", "pt", "ja", "zh"}
        for q in questions:
            if q["category"] == "said":  # only a chat answers: no fact holds the detail
                [chat] = q["answers"]
                assert chat in chats, q
                continue
            assert q["answers"] and all(a in memories for a in q["answers"]), q
            if q["category"] == "multi_hop":
                assert len(q["answers"]) == 2
            if q["category"] == "temporal":
                assert memories[q["answers"][0]].get("valid_at"), q
            if q["category"] == "multilingual":
                assert {memories[a]["lang"] for a in q["answers"]} == {q["lang"]}
    # the splits share no person (everyone the questions are about lives somewhere)
    people = {
        split: {m["source"] for m in map(json.loads, search_eval.split_path(split).read_text()
                                         .splitlines()) if m.get("relation") == "LIVES_IN"}
        for split in ("dev", "test")
    }  # fmt: skip
    assert not people["dev"] & people["test"]


def test_what_was_said_holds_details_no_fact_does():
    for split in ("dev", "test"):
        lines = [json.loads(x) for x in search_eval.split_path(split).read_text().splitlines()]
        facts = " ".join(m["fact"] for m in lines if m["type"] == "memory").casefold()
        for chat in (m for m in lines if m["type"] == "said"):
            cooked = chat["body"].split("I cooked ", 1)[1].split(" for the street")[0]
            assert cooked.casefold() not in facts


def test_every_method_is_reported_by_category_and_language(hash_embedder):
    result = search_eval.run("dev", hash_embedder)
    assert set(result["methods"]) == {"vector", "bm25", "rrf", "fused", "recall"}
    said = result["methods"]["recall"]["category:said"]
    assert said["questions"] == 100 and "category:said" not in result["methods"]["fused"]
    fused = result["methods"]["fused"]
    assert fused["all"]["questions"] == result["questions"] - 100 >= 300
    assert result["methods"]["recall"]["all"]["questions"] == result["questions"]
    assert {"category:multi_hop", "lang:zh"} <= set(fused)
    assert (
        0 < fused["all"]["recall@10"] <= 1 and fused["all"]["recall@1"] <= fused["all"]["recall@10"]
    )
    assert "fused" in search_eval.table(result)
