"""Splitting an episode into passages (pure): conversations by turns, text by paragraphs and
sentences, JSON by key paths; every passage short, in order, keeping every word."""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import UTC, datetime

import pytest

from workbench.errors import InvalidInput
from workbench.ingest.passages import (
    KEY_CHARS,
    MAX_CHARS,
    TURNS,
    Passage,
    passage_bounds,
    passage_rows,
    passage_uuid,
    split_episode,
    turns_of,
)

WORDS = "the cat sat on a warm mat while rain fell over quiet hills and rivers".split()


def _words(text: str) -> list[str]:
    return text.split()


def _sentences(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(1, 40))]
        out.append(" ".join(words).capitalize() + rng.choice(".!?"))
    return " ".join(out)


# --- message ----------------------------------------------------------------------------------
def test_a_conversation_is_cut_every_three_turns_each_line_keeping_its_speaker():
    assert TURNS == 3
    body = "Alice: I adopted a cat.\nBob: What colour?\nAlice: Grey.\nBob: Nice!\nAlice: Yes."
    passages = split_episode(body, "message")
    assert [p.text for p in passages] == [
        "Alice: I adopted a cat.\nBob: What colour?\nAlice: Grey.",
        "Bob: Nice!\nAlice: Yes.",
    ]
    assert [p.speaker for p in passages] == ["Alice, Bob", "Bob, Alice"]
    assert [p.position for p in passages] == [0, 1]


def test_turns_per_passage_is_a_parameter():
    body = "\n".join(f"P{i % 3}: line {i}" for i in range(7))
    assert [len(p.text.splitlines()) for p in split_episode(body, "message", turns=3)] == [3, 3, 1]
    assert len(split_episode(body, "message", turns=1)) == 7


def test_a_line_without_a_speaker_continues_the_turn_above_it():
    body = "user: my address is\n12 Long Road\n\nassistant: noted"
    assert turns_of(body) == [("user", "my address is 12 Long Road"), ("assistant", "noted")]
    assert turns_of("just words\nuser: hi") == [(None, "just words"), ("user", "hi")]


def test_a_colon_inside_a_sentence_or_a_url_is_not_a_speaker():
    assert turns_of("see https://example.org: it works") == [
        (None, "see https://example.org: it works")
    ]
    assert turns_of("Dr. Ana María: ¿Qué tal?")[0] == ("Dr. Ana María", "¿Qué tal?")


def test_a_long_turn_is_cut_at_sentence_ends_each_piece_with_its_speaker():
    rng = random.Random(1)
    said = _sentences(rng, 60)
    passages = split_episode(f"Maria: {said}\nTom: ok", "message")
    assert len(passages) > 3
    assert all(len(p.text) <= MAX_CHARS for p in passages)
    assert all(
        line.startswith(("Maria: ", "Tom: ")) for p in passages for line in p.text.splitlines()
    )
    spoken = [w for p in passages for line in p.text.splitlines() for w in _words(line)[1:]]
    assert spoken == _words(said) + ["ok"]


@pytest.mark.parametrize("seed", range(20))
def test_random_conversations_keep_every_word_in_order_within_the_limits(seed):
    rng = random.Random(seed)
    names = ["Ana", "Bo", "Carla Jones", "李雷"]
    turns = [
        (rng.choice(names), _sentences(rng, rng.randint(1, 12))) for _ in range(rng.randint(1, 30))
    ]
    body = "\n".join(f"{n}: {t}" for n, t in turns)
    passages = split_episode(body, "message")
    assert [p.position for p in passages] == list(range(len(passages)))
    assert all(0 < len(p.text) <= MAX_CHARS for p in passages)
    assert all(len(p.text.splitlines()) <= TURNS for p in passages)
    lines = [line for p in passages for line in p.text.splitlines()]
    assert [w for line in lines for w in line.split(": ", 1)[1].split()] == [
        w for _, t in turns for w in t.split()
    ]
    for p in passages:  # the passage's speakers, in the order they first speak
        spoken = [line.split(": ", 1)[0] for line in p.text.splitlines()]
        assert p.speaker == ", ".join(dict.fromkeys(spoken))


# --- text -------------------------------------------------------------------------------------
def test_short_paragraphs_are_packed_and_a_long_one_is_cut_at_sentences():
    rng = random.Random(3)
    long = _sentences(rng, 50)
    body = f"First note.\n\nSecond note.\n\n{long}"
    passages = split_episode(body, "text")
    assert passages[0].text.startswith("First note. Second note.")
    assert all(len(p.text) <= MAX_CHARS for p in passages)
    assert all(p.speaker is None for p in passages)
    assert [w for p in passages for w in p.text.split()] == body.split()
    # each cut falls at a sentence end
    assert all(p.text[-1] in ".!?" for p in passages)


def test_a_sentence_longer_than_a_passage_is_cut_at_words_and_a_word_anywhere():
    sentence = " ".join(["word"] * 400)
    passages = split_episode(sentence, "text", max_chars=100)
    assert all(len(p.text) <= 100 for p in passages)
    assert [w for p in passages for w in p.text.split()] == sentence.split()
    giant = "x" * 250
    assert [p.text for p in split_episode(giant, "text", max_chars=100)] == [
        "x" * 100,
        "x" * 100,
        "x" * 50,
    ]


@pytest.mark.parametrize("seed", range(20))
def test_random_texts_keep_every_word_in_order_within_the_limit(seed):
    rng = random.Random(100 + seed)
    paragraphs = [_sentences(rng, rng.randint(1, 15)) for _ in range(rng.randint(1, 8))]
    body = "\n\n".join(paragraphs)
    limit = rng.choice([50, 200, MAX_CHARS])
    passages = split_episode(body, "text", max_chars=limit)
    assert all(0 < len(p.text) <= limit for p in passages)
    assert [w for p in passages for w in p.text.split()] == body.split()


def test_empty_bodies_have_no_passages():
    for source in ("text", "message", "json"):
        assert split_episode("  \n\n ", source) == []
    assert split_episode("{}", "json") == []


def test_unreasonable_limits_are_refused():
    with pytest.raises(ValueError):
        split_episode("x", "text", max_chars=5)
    with pytest.raises(ValueError):
        split_episode("x", "message", turns=0)


# --- json -------------------------------------------------------------------------------------
def test_json_is_flattened_to_key_paths_in_document_order():
    doc = {"user": {"name": "Ana", "pets": [{"kind": "cat", "age": 3}, {"kind": "dog"}]},
           "active": True, "note": None}  # fmt: skip
    [passage] = split_episode(json.dumps(doc), "json")
    assert passage.text.splitlines() == [
        "user.name: Ana",
        "user.pets[0].kind: cat",
        "user.pets[0].age: 3",
        "user.pets[1].kind: dog",
        "active: true",
    ]


def test_a_large_json_document_becomes_many_short_passages_losing_no_leaf():
    doc = {"items": [{"id": i, "title": f"item number {i}"} for i in range(200)]}
    passages = split_episode(json.dumps(doc), "json")
    assert len(passages) > 5 and all(len(p.text) <= MAX_CHARS for p in passages)
    lines = [line for p in passages for line in p.text.splitlines()]
    assert len(lines) == 400 and lines[-1] == "items[199].title: item number 199"


def test_a_top_level_scalar_or_invalid_json_is_still_kept():
    assert [p.text for p in split_episode('"hello there"', "json")] == ["hello there"]
    assert [p.text for p in split_episode("not json {", "json")] == ["not json {"]


# --- rows -------------------------------------------------------------------------------------
def test_rows_carry_the_episode_and_have_stable_uuids():
    episode = {
        "uuid": str(uuid.uuid4()),
        "group_id": "g1",
        "body": "Ana: hi\nBo: hello\nAna: bye\nAna: see you",
        "source": "message",
        "reference_time": datetime(2025, 5, 1, tzinfo=UTC),
        "created_at": datetime(2026, 1, 1, tzinfo=UTC),
    }
    rows = passage_rows(episode)
    assert [(r["position"], r["speaker"]) for r in rows] == [(0, "Ana, Bo"), (1, "Ana")]
    assert {r["episode_uuid"] for r in rows} == {episode["uuid"]}
    assert {r["group_id"] for r in rows} == {"g1"}
    assert {r["reference_time"] for r in rows} == {episode["reference_time"]}
    assert [r["uuid"] for r in rows] == [passage_uuid(episode["uuid"], i) for i in (0, 1)]
    assert [r["uuid"] for r in passage_rows(episode)] == [r["uuid"] for r in rows]
    assert len({passage_uuid(str(uuid.uuid4()), 0) for _ in range(5)}) == 5
    assert isinstance(split_episode("x y", "text")[0], Passage)


# --- bounds (issue 55, item 1) ----------------------------------------------------------------
def _probe_body(key_chars: int = 20_000, items: int = 14_900) -> str:
    """The probe's shape: one very long key over a long array of tiny leaves."""
    return json.dumps({"k" * key_chars: [0] * items}, separators=(",", ":"))


def test_a_long_key_over_many_leaves_is_refused_not_multiplied():
    body = _probe_body()
    assert len(body) < 50_000  # the probe's 49.8 KB body, which made ~507,000 passages
    started = time.perf_counter()
    with pytest.raises(InvalidInput, match=r"'episode_body' \(source 'json'.*8× the body"):
        split_episode(body, "json")
    assert time.perf_counter() - started < 2.0  # refused early, not split whole first


def test_long_keys_and_deep_paths_are_shortened_on_every_leaf():
    doc = {"k" * 500: [1, 2], "a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 7}}}}}}}}}
    [passage] = split_episode(json.dumps(doc), "json")
    key = "k" * (KEY_CHARS - 1) + "…"
    assert passage.text.splitlines() == [f"{key}[0]: 1", f"{key}[1]: 2", "….b.c.d.e.f.g.h.i: 7"]


def test_an_ordinary_document_keeps_its_full_key_paths(seed=7):
    rng = random.Random(seed)
    doc = {
        "orders": [
            {"id": i, "customer": {"name": rng.choice(WORDS), "tags": [rng.choice(WORDS)]},
             "lines": [{"sku": f"S{j}", "qty": j} for j in range(3)]}
            for i in range(60)
        ]
    }  # fmt: skip
    body = json.dumps(doc)
    lines = [line for p in split_episode(body, "json") for line in p.text.splitlines()]
    first = doc["orders"][0]["customer"]
    assert lines[:3] == [
        "orders[0].id: 0",
        f"orders[0].customer.name: {first['name']}",
        f"orders[0].customer.tags[0]: {first['tags'][0]}",
    ]
    assert lines[-1] == "orders[59].lines[2].qty: 2" and "…" not in "".join(lines)


@pytest.mark.parametrize("source", ["text", "message", "json"])
def test_every_source_stays_within_the_bounds_on_hostile_shapes(source):
    bodies = {
        "text": ["a\n\n" * 16_000, "x" * 49_000, "a " * 24_000],
        "message": ["a: b\n" * 9_900, ("S" * 59 + ": x\n") * 800, "A: " + "w " * 24_000],
        "json": [json.dumps([0] * 16_000), json.dumps({"k": [[0]] * 9_000}),
                 json.dumps({"a" * 40: {"b" * 40: "v"}} | {f"k{i}": i for i in range(3000)})],
    }  # fmt: skip
    for body in bodies[source]:
        passages = split_episode(body, source)
        chars, count = passage_bounds(len(body))
        assert sum(len(p.text) for p in passages) <= chars and len(passages) <= count


def test_add_memory_refuses_the_probe_with_invalid_input_and_stores_nothing(
    fake_llm, hash_embedder
):
    from tests.ingest.test_pipeline import open_wb

    wb = open_wb(fake_llm, hash_embedder)
    try:
        with pytest.raises(InvalidInput, match="passages hold at most"):
            wb.add_memory("probe", _probe_body(), group_id="g", source="json")
        assert wb.store.fetchone("SELECT count(*) FROM episodes")[0] == 0
        assert wb.store.fetchone("SELECT count(*) FROM passages")[0] == 0
        small = _probe_body(key_chars=500, items=50)  # a long key over a few leaves: shortened
        assert wb.add_memory("ok", small, group_id="g", source="json")["status"] == "queued"
    finally:
        wb.close()
