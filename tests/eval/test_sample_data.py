"""The shipped data files keep their promises: shapes, chronology, a self-consistent gold set."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from workbench.eval.extraction import (
    load_labelled,
    loose_name_key,
    score_episode,
)
from workbench.prompts import ENTITY_TYPES

DATA = Path(__file__).resolve().parents[2] / "data"
SAMPLE_FIELDS = {
    "name",
    "episode_body",
    "group_id",
    "source",
    "source_description",
    "reference_time",
}


def _lines(name: str) -> list[dict]:
    with open(DATA / name, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def sample():
    return _lines("sample_episodes.jsonl")


@pytest.fixture(scope="module")
def labelled():
    return load_labelled(DATA / "extraction_labelled.jsonl")


def test_sample_shape(sample):
    assert len(sample) >= 36
    for row in sample:
        assert set(row) == SAMPLE_FIELDS
        assert row["source"] in ("text", "message", "json")
        assert row["episode_body"].strip() and row["source_description"]
        assert _time(row["reference_time"]).tzinfo is not None
    groups = {r["group_id"] for r in sample}
    assert 2 <= len(groups) <= 3
    sources = [r["source"] for r in sample]
    assert sources.count("message") >= 3 and sources.count("json") >= 1


def test_sample_chronological_per_group_and_spread(sample):
    for group in {r["group_id"] for r in sample}:
        times = [_time(r["reference_time"]) for r in sample if r["group_id"] == group]
        assert times == sorted(times) and len(set(times)) == len(times)
    times = [_time(r["reference_time"]) for r in sample]
    assert (max(times) - min(times)).days >= 500


def test_sample_message_and_json_bodies(sample):
    for row in sample:
        if row["source"] == "message":
            assert row["episode_body"].startswith("user: ")
            assert "\nassistant: " in row["episode_body"]
        if row["source"] == "json":
            assert isinstance(json.loads(row["episode_body"]), dict)


def test_sample_names_unique_per_group(sample):
    keys = [(r["group_id"], r["name"]) for r in sample]
    assert len(keys) == len(set(keys))


def test_labelled_matches_sample(sample, labelled):
    assert len(labelled) >= 30
    by_key = {(r["group_id"], r["name"]): r for r in sample}
    for ep in labelled:
        row = by_key[(ep.group_id, ep.name)]
        assert row["episode_body"] == ep.episode_body
        assert row["reference_time"] == ep.reference_time
    assert len({ep.id for ep in labelled}) == len(labelled)


def test_labelled_gold_is_well_formed(labelled):
    for ep in labelled:
        names = [e.name for e in ep.gold.entities]
        keys = [loose_name_key(n) for n in names]
        assert len(keys) == len(set(keys)), ep.id
        assert ep.gold.entities and ep.gold.facts, ep.id
        for ent in ep.gold.entities:
            assert ent.entity_type in ENTITY_TYPES, (ep.id, ent)
        for fact in ep.gold.facts:
            assert fact.source in names and fact.target in names, (ep.id, fact)
            assert re.fullmatch(r"[A-Z]+(_[A-Z]+)*", fact.relation), (ep.id, fact)
            assert fact.fact.endswith("."), (ep.id, fact)


def test_labelled_contradictions_carry_times():
    rows = _lines("extraction_labelled.jsonl")
    ended = [f for r in rows for f in r["facts"] if "invalid_at" in f]
    assert len(ended) >= 10
    for fact in ended:
        assert _time(fact["invalid_at"]).tzinfo is not None


def test_gold_scores_perfectly_against_itself(labelled):
    for ep in labelled:
        score = score_episode(ep.gold, ep.gold, ep.id)
        assert score.entities.f1 == score.facts.f1 == 1.0, ep.id
        assert score.duplicates == 0, ep.id


def test_import_example_shape():
    rows = _lines("import_example.jsonl")
    entities = [r for r in rows if r["type"] == "entity"]
    facts = [r for r in rows if r["type"] == "fact"]
    assert entities and facts and len(entities) + len(facts) == len(rows)
    entity_keys = {"type", "name", "entity_type", "summary", "group_id", "importance", "stability"}
    fact_keys = {
        "type",
        "source",
        "target",
        "relation",
        "fact",
        "valid_at",
        "invalid_at",
        "group_id",
        "created_at",
    }
    for row in entities:
        assert set(row) <= entity_keys and row["name"]
        assert 1 <= row.get("importance", 3) <= 5 and 1 <= row.get("stability", 3) <= 5
    for row in facts:
        assert set(row) <= fact_keys and row["source"] and row["target"] and row["fact"]
    declared = {r["name"] for r in entities}
    assert any(r["target"] not in declared for r in facts)  # endpoints created when missing
