"""Ended facts, predictions rebuilt from store rows, and keys joining them to the gold set."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from workbench.eval.extraction import (
    PRF,
    Entity,
    Extraction,
    Fact,
    LabelledEpisode,
    episode_key,
    gold_by_key,
    predictions_from_rows,
    score_episode,
    score_set,
    without_ended_facts,
)

GOLD = Extraction(
    (Entity("Alex Morgan", "Person"), Entity("VS Code", "Tool"), Entity("Neovim", "Tool")),
    (
        Fact("Alex Morgan", "Neovim", "USES", valid_at="2024-11-18T00:00:00Z"),
        Fact("Alex Morgan", "VS Code", "USES", invalid_at="2024-11-18T00:00:00Z"),
    ),
)


def test_fact_times_parsed_and_not_compared():
    e = Extraction.from_dict(
        {
            "facts": [
                {
                    "source": "a",
                    "target": "b",
                    "valid_at": "2025-01-01T00:00:00Z",
                    "invalid_at": "",
                },
                {"source": "a", "target": "c", "invalid_at": datetime(2025, 2, 1, tzinfo=UTC)},
            ]
        }
    )
    assert e.facts[0].valid_at == "2025-01-01T00:00:00Z" and not e.facts[0].ended
    assert e.facts[1].ended and e.facts[1].invalid_at.startswith("2025-02-01")
    plain = Extraction(facts=(Fact("a", "b"),))
    assert score_episode(plain, e).facts.tp == 1


def test_ended_facts_count_by_default():
    pred = Extraction(GOLD.entities, GOLD.facts[:1])
    assert score_episode(pred, GOLD).facts == PRF(1, 0, 1)


def test_ended_facts_false_drops_them_on_both_sides():
    pred = Extraction(GOLD.entities, GOLD.facts[:1])
    assert score_episode(pred, GOLD, ended_facts=False).facts == PRF(1, 0, 0)
    extra_ended = Extraction(
        GOLD.entities,
        GOLD.facts + (Fact("Alex Morgan", "Neovim", "LIKES", invalid_at="2025-01-01"),),
    )
    assert score_episode(extra_ended, GOLD, ended_facts=False).facts == PRF(1, 0, 0)
    assert score_set({"e": pred}, {"e": GOLD}, ended_facts=False).facts == PRF(1, 0, 0)


def test_without_ended_facts():
    assert [f.target for f in without_ended_facts(GOLD).facts] == ["Neovim"]
    assert without_ended_facts(GOLD).entities == GOLD.entities


def rows():
    episodes = [
        {"uuid": "ep1", "group_id": "alex", "name": "Switched editor"},
        {"uuid": "ep2", "group_id": "alex", "name": "Nothing found"},
    ]
    entities = [
        {"uuid": "a", "name": "Alex Morgan", "entity_type": "Person"},
        {"uuid": "n", "name": "Neovim", "entity_type": "Tool"},
        {"uuid": "v", "name": "VS Code", "entity_type": "Tool"},
    ]
    facts = [
        {
            "uuid": "f1",
            "source_uuid": "a",
            "target_uuid": "n",
            "relation": "USES",
            "fact": "Alex uses Neovim.",
            "episode_uuid": "ep1",
            "valid_at": math.nan,
            "invalid_at": None,
        },
        {
            "uuid": "f0",
            "source_uuid": "a",
            "target_uuid": "v",
            "relation": "USES",
            "fact": "Alex used VS Code.",
            "episode_uuid": "ep0",
            "valid_at": None,
            "invalid_at": datetime(2024, 11, 18, tzinfo=UTC),
        },
        {
            "uuid": "f2",
            "source_uuid": "a",
            "target_uuid": "gone",
            "relation": "X",
            "fact": "dangling",
            "episode_uuid": "ep1",
        },
        {
            "uuid": "f3",
            "source_uuid": "a",
            "target_uuid": "n",
            "relation": "USES",
            "fact": "imported",
            "episode_uuid": None,
        },
        {
            "uuid": "f4",
            "source_uuid": "n",
            "target_uuid": "v",
            "relation": "REPLACES",
            "fact": "later expired",
            "episode_uuid": "ep1",
            "invalid_at": "2025-01-01",
            "expired_at": datetime(2025, 1, 1, tzinfo=UTC),
        },
        {
            "uuid": "f5",
            "source_uuid": "v",
            "target_uuid": "a",
            "relation": "USED_BY",
            "fact": "ended when extracted",
            "episode_uuid": "ep1",
            "invalid_at": "2024-11-18",
            "expired_at": None,
        },
    ]
    mentions = [
        {"episode_uuid": "ep1", "entity_uuid": "a"},
        {"episode_uuid": "ep1", "entity_uuid": "n"},
        {"episode_uuid": "ep1", "entity_uuid": "v"},
        {"episode_uuid": "ep1", "entity_uuid": "missing"},
    ]
    return episodes, entities, facts, mentions


def test_predictions_from_rows():
    pred = predictions_from_rows(*rows())
    assert set(pred) == {"alex/Switched editor", "alex/Nothing found"}
    ep = pred["alex/Switched editor"]
    assert {e.name for e in ep.entities} == {"Alex Morgan", "Neovim", "VS Code"}
    assert ep.facts == (
        Fact("Alex Morgan", "Neovim", "USES", "Alex uses Neovim."),
        Fact("Neovim", "VS Code", "REPLACES", "later expired"),
        Fact("VS Code", "Alex Morgan", "USED_BY", "ended when extracted", invalid_at="2024-11-18"),
    )
    assert pred["alex/Nothing found"] == Extraction()


def test_predictions_from_rows_accepts_dataframe_records():
    pd = pytest.importorskip("pandas")
    frames = [pd.DataFrame(r) for r in rows()]
    pred = predictions_from_rows(*(f.to_dict("records") for f in frames))
    facts = pred["alex/Switched editor"].facts
    assert facts[0].valid_at is None and facts[0].invalid_at is None
    assert facts[1].invalid_at is None and facts[2].invalid_at == "2024-11-18"


def test_keys_join_predictions_to_gold():
    labelled = [
        LabelledEpisode(
            "alex-08", "Switched editor", "b", "alex", "message", "d", "2024-11-18T16:45:00Z", GOLD
        )
    ]
    gold = gold_by_key(labelled)
    assert list(gold) == [episode_key("alex", "Switched editor")]
    score = score_set(predictions_from_rows(*rows()), gold, ended_facts=False)
    assert score.entities == PRF(3, 0, 0)
    assert score.facts == PRF(1, 1, 0)  # the REPLACES fact is not in this gold
    assert score.unscored == ("alex/Nothing found",)
