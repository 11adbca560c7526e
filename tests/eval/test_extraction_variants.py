"""Variant tables, DataFrame export and the labelled-set loader of workbench.eval.extraction."""

from __future__ import annotations

import json

import pytest

from workbench.errors import InvalidInput
from workbench.eval.extraction import (
    Entity,
    Extraction,
    Fact,
    VariantUsage,
    load_labelled,
    parse_labelled,
    score_set,
    tabulate_variants,
    to_frame,
    usage_from_llm_calls,
)

GOLD = {
    "a": Extraction(
        (Entity("Maya Chen", "Person"), Entity("Acme", "Organization")),
        (Fact("Maya Chen", "Acme", "WORKS_AT"),),
    ),
    "b": Extraction((Entity("Lisbon", "Place"),), ()),
}


def test_tabulate_two_variants():
    good = score_set(GOLD, GOLD)
    bad = score_set({"a": Extraction((Entity("Maya"),))}, GOLD)
    rows = tabulate_variants(
        {
            "baseline": (
                good,
                VariantUsage(
                    episodes=2,
                    llm_calls=5,
                    prompt_tokens=1000,
                    completion_tokens=200,
                    cost_usd=0.004,
                ),
            ),
            "cheap": (bad, VariantUsage(episodes=2, llm_calls=2)),
        }
    )
    assert [r.variant for r in rows] == ["baseline", "cheap"]
    base, cheap = rows
    assert base.entity_f1 == base.fact_f1 == 1.0
    assert base.calls_per_episode == 2.5
    assert base.tokens_per_episode == 600
    assert base.cost_per_episode == pytest.approx(0.002)
    assert base.f1_per_dollar == pytest.approx(500.0)
    assert cheap.entity_recall == pytest.approx(1 / 3)
    assert cheap.fact_f1 == 0.0
    assert cheap.f1_per_dollar is None


def test_tabulate_rejects_zero_episodes():
    with pytest.raises(InvalidInput):
        tabulate_variants({"x": (score_set({}, GOLD), VariantUsage(episodes=0))})


def test_to_frame_variants_and_episode_scores():
    pd = pytest.importorskip("pandas")
    score = score_set(GOLD, GOLD)
    frame = to_frame(tabulate_variants({"v": (score, VariantUsage(episodes=2))}))
    assert isinstance(frame, pd.DataFrame)
    assert list(frame["variant"]) == ["v"]
    per_episode = to_frame(score.episodes)
    assert list(per_episode["episode_id"]) == ["a", "b"]
    assert {"entities_f1", "facts_precision", "fact_links_recall"} <= set(per_episode.columns)


def _line(**over):
    row = {
        "id": "e1",
        "name": "n",
        "episode_body": "b",
        "group_id": "g",
        "source": "text",
        "source_description": "d",
        "reference_time": "2025-01-01T00:00:00Z",
        "entities": [{"name": "Maya", "entity_type": "Person"}],
        "facts": [],
    }
    row.update(over)
    return json.dumps(row)


def test_parse_labelled_skips_blank_lines(tmp_path):
    path = tmp_path / "set.jsonl"
    path.write_text(_line() + "\n\n" + _line(id="e2") + "\n", encoding="utf-8")
    rows = load_labelled(path)
    assert [r.id for r in rows] == ["e1", "e2"]
    assert rows[0].gold.entities == (Entity("Maya", "Person"),)


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        _line(id=None).replace('"id": null, ', ""),
        _line(entities=[{"entity_type": "Person"}]),
    ],
)
def test_parse_labelled_names_the_line(bad):
    with pytest.raises(InvalidInput, match="line 2"):
        parse_labelled([_line(), bad])


def test_usage_from_llm_calls():
    calls = [
        {"prompt_tokens": 100, "completion_tokens": 20, "total_cost": 0.001},
        {"prompt_tokens": 50, "completion_tokens": None, "total_cost": 0.0005},
        {"status": "error"},
    ]
    usage = usage_from_llm_calls(calls, episodes=2)
    assert usage == VariantUsage(
        episodes=2,
        llm_calls=3,
        prompt_tokens=150,
        completion_tokens=20,
        cost_usd=pytest.approx(0.0015),
    )
    assert usage_from_llm_calls([], episodes=1) == VariantUsage(episodes=1)
