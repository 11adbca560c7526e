"""Unit tests of workbench.eval.extraction: normalisation, matching, counting, aggregation."""

from __future__ import annotations

import math

import pytest

from workbench.errors import InvalidInput
from workbench.eval.extraction import (
    PRF,
    Entity,
    Extraction,
    Fact,
    aggregate,
    loose_name_key,
    relation_name,
    score_episode,
    score_set,
)


def ext(entities=(), facts=()):
    ents = tuple(
        e if isinstance(e, Entity) else Entity(*e) if isinstance(e, tuple) else Entity(e)
        for e in entities
    )
    return Extraction(ents, tuple(f if isinstance(f, Fact) else Fact(*f) for f in facts))


GOLD = ext(
    [("Maya Chen", "Person"), ("Acme Corp", "Organization"), ("Lisbon", "Place")],
    [("Maya Chen", "Acme Corp", "WORKS_AT"), ("Maya Chen", "Lisbon", "LIVES_IN")],
)


# --- normalisation ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("Maya Chen", "maya chen"),
        ("  MAYA   chen ", "maya chen"),
        ("Acme-Corp.", "acme corp"),
        ("The Acme Corp", "acme corp"),
        ("The", "the"),
        ("A", "a"),
        ("O'Brien", "obrien"),
        ("O\u2019Brien", "obrien"),
        ("São Paulo", "sao paulo"),
        ("Zürich", "zurich"),
        ("VS Code", "vs code"),
        ("Neovim (nvim)", "neovim nvim"),
        ("", ""),
    ],
)
def test_normalize_name(raw, norm):
    assert loose_name_key(raw) == norm


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("WORKS_AT", "WORKS_AT"),
        ("works at", "WORKS_AT"),
        ("works-at", "WORKS_AT"),
        ("WorksAt", "WORKS_AT"),
        ("  lives_in ", "LIVES_IN"),
        ("", "RELATES_TO"),
        ("--", "RELATES_TO"),
    ],
)
def test_normalize_relation(raw, norm):
    assert relation_name(raw) == norm


# --- PRF and zero division ----------------------------------------------------------------
def test_prf_values():
    s = PRF(tp=2, fp=1, fn=3)
    assert s.precision == pytest.approx(2 / 3)
    assert s.recall == pytest.approx(2 / 5)
    assert s.f1 == pytest.approx(2 * (2 / 3) * (2 / 5) / (2 / 3 + 2 / 5))


@pytest.mark.parametrize(
    ("counts", "p", "r", "f"),
    [
        ((0, 0, 0), 1.0, 1.0, 1.0),  # nothing to find, nothing predicted
        ((0, 0, 2), 0.0, 0.0, 0.0),  # predicted nothing, missed everything
        ((0, 2, 0), 0.0, 0.0, 0.0),  # predicted something, nothing to find
        ((0, 1, 1), 0.0, 0.0, 0.0),
    ],
)
def test_prf_zero_division(counts, p, r, f):
    s = PRF(*counts)
    assert (s.precision, s.recall, s.f1) == (p, r, f)


def test_prf_add():
    assert PRF(1, 2, 3) + PRF(4, 5, 6) == PRF(5, 7, 9)


# --- whole episodes -----------------------------------------------------------------------
def test_perfect():
    s = score_episode(GOLD, GOLD, "e1")
    for prf in (s.entities, s.typed_entities, s.facts, s.fact_links):
        assert prf.fn == prf.fp == 0 and prf.f1 == 1.0
    assert s.episode_id == "e1" and s.duplicates == 0
    assert s.missed_entities == s.extra_entities == s.missed_facts == s.extra_facts == ()


def test_empty_prediction():
    s = score_episode(Extraction(), GOLD)
    assert s.entities == PRF(0, 0, 3)
    assert s.facts == PRF(0, 0, 2)
    assert s.entities.f1 == 0.0
    assert s.missed_entities == ("acme corp", "lisbon", "maya chen")
    assert ("maya chen", "WORKS_AT", "acme corp") in s.missed_facts


def test_empty_both():
    s = score_episode(Extraction(), Extraction())
    assert s.entities.f1 == s.facts.f1 == 1.0


def test_prediction_without_gold():
    s = score_episode(GOLD, Extraction())
    assert s.entities == PRF(0, 3, 0) and s.entities.precision == 0.0
    assert s.facts == PRF(0, 2, 0)


def test_partial():
    pred = ext(
        [("Maya Chen", "Person"), ("Acme Corp", "Organization"), ("Berlin", "Place")],
        [("Maya Chen", "Acme Corp", "WORKS_AT"), ("Maya Chen", "Berlin", "LIVES_IN")],
    )
    s = score_episode(pred, GOLD)
    assert s.entities == PRF(tp=2, fp=1, fn=1)
    assert s.facts == PRF(tp=1, fp=1, fn=1)
    assert s.extra_entities == ("berlin",)
    assert s.missed_entities == ("lisbon",)
    assert s.extra_facts == (("maya chen", "LIVES_IN", "berlin"),)


def test_case_whitespace_punctuation_ignored():
    pred = ext(
        [("maya  CHEN", "Person"), ("ACME corp.", "Organization"), ("the Lisbon", "Place")],
        [("MAYA CHEN", "acme-corp", "works at"), ("maya chen", "Lisbon", "LivesIn")],
    )
    s = score_episode(pred, GOLD)
    assert s.entities.f1 == 1.0
    assert s.facts.f1 == 1.0


def test_duplicates_collapse_and_are_reported():
    pred = ext(
        [
            ("Maya Chen", "Person"),
            ("maya chen", "Person"),
            ("Maya", "Person"),
            ("Acme Corp", "Organization"),
            ("Lisbon", "Place"),
        ],
        [
            ("Maya Chen", "Acme Corp", "WORKS_AT"),
            ("Maya", "Acme Corp", "WORKS_AT"),
            ("Maya Chen", "Lisbon", "LIVES_IN"),
        ],
    )
    s = score_episode(pred, GOLD)
    assert s.entities == PRF(3, 0, 0)
    assert s.duplicates == 2
    assert s.facts == PRF(2, 0, 0)


def test_duplicate_unmatched_predictions_count_once():
    pred = ext([("Berlin", "Place"), ("berlin", "Place")])
    s = score_episode(pred, GOLD)
    assert s.entities.fp == 1 and s.duplicates == 1


def test_gold_duplicates_count_once():
    gold = ext([("Lisbon", "Place"), ("lisbon", "Place")])
    s = score_episode(ext([("Lisbon", "Place")]), gold)
    assert s.entities == PRF(1, 0, 0)


def test_fact_direction_matters():
    pred = ext(facts=[("Acme Corp", "Maya Chen", "WORKS_AT"), ("Maya Chen", "Lisbon", "LIVES_IN")])
    s = score_episode(pred, GOLD)
    assert s.facts == PRF(tp=1, fp=1, fn=1)
    assert s.fact_links == PRF(tp=1, fp=1, fn=1)


def test_symmetric_relation_ignores_direction_only_when_declared():
    gold = ext(
        [("Maya Chen", "Person"), ("Tom Reyes", "Person")],
        [("Maya Chen", "Tom Reyes", "MARRIED_TO")],
    )
    pred = ext(facts=[("Tom Reyes", "Maya Chen", "married to")])
    assert score_episode(pred, gold).facts == PRF(0, 1, 1)
    assert score_episode(pred, gold, symmetric_relations=["MARRIED_TO"]).facts == PRF(1, 0, 0)


def test_relation_mismatch_is_one_fp_and_one_fn_but_link_matches():
    pred = ext(
        facts=[("Maya Chen", "Acme Corp", "EMPLOYED_BY"), ("Maya Chen", "Lisbon", "LIVES_IN")]
    )
    s = score_episode(pred, GOLD)
    assert s.facts == PRF(tp=1, fp=1, fn=1)
    assert s.fact_links == PRF(tp=2, fp=0, fn=0)


def test_relation_synonyms_map_predictions():
    pred = ext(
        facts=[("Maya Chen", "Acme Corp", "employed by"), ("Maya Chen", "Lisbon", "LIVES_IN")]
    )
    s = score_episode(pred, GOLD, relation_synonyms={"EMPLOYED_BY": "works_at"})
    assert s.facts == PRF(2, 0, 0)


def test_typed_entities_require_type():
    pred = ext([("Maya Chen", "Person"), ("Acme Corp", "Project"), ("Lisbon", None)])
    s = score_episode(pred, GOLD)
    assert s.entities == PRF(3, 0, 0)
    assert s.typed_entities == PRF(1, 2, 2)


def test_fact_text_is_not_compared():
    pred = ext(facts=[Fact("Maya Chen", "Acme Corp", "WORKS_AT", "completely different")])
    assert score_episode(pred, GOLD).facts.tp == 1


# --- aliases ------------------------------------------------------------------------------
def test_first_name_alias_when_unambiguous():
    pred = ext([("Maya", "Person")], [("Maya", "Acme Corp", "WORKS_AT")])
    s = score_episode(pred, GOLD)
    assert s.entities.tp == 1 and s.facts.tp == 1


def test_first_name_alias_applies_whatever_the_predicted_type():
    pred = ext([("Maya", None)])
    assert score_episode(pred, GOLD).entities.tp == 1


def test_first_name_alias_only_for_gold_persons():
    gold = ext([("Acme Corp", "Organization")])
    assert score_episode(ext(["Acme"]), gold).entities == PRF(0, 1, 1)


def test_first_name_alias_ambiguous_matches_nothing():
    gold = ext([("Maya Chen", "Person"), ("Maya Patel", "Person")])
    s = score_episode(ext([("Maya", "Person")]), gold)
    assert s.entities == PRF(0, 1, 2)


def test_own_name_beats_first_name_alias():
    gold = ext([("Maya Chen", "Person"), ("Maya", "Project")])
    s = score_episode(ext([("Maya", "Project")]), gold)
    assert s.typed_entities == PRF(1, 0, 1)
    assert s.missed_entities == ("maya chen",)


def test_reverse_first_name_when_gold_has_only_first_name():
    gold = ext([("Priya", "Person")], [("Priya", "Lisbon", "LIVES_IN")])
    pred = ext([("Priya Nair", "Person")], [("Priya Nair", "Lisbon", "LIVES_IN")])
    s = score_episode(pred, gold)
    assert s.entities.tp == 1 and s.facts.tp == 1


def test_reverse_first_name_ambiguous_when_other_person_shares_it():
    gold = ext([("Priya", "Person"), ("Priya Shah", "Person")])
    s = score_episode(ext([("Priya Nair", "Person")]), gold)
    assert s.entities == PRF(0, 1, 2)


def test_declared_aliases():
    gold = ext([Entity("Visual Studio Code", "Tool", ("VS Code", "vscode"))])
    for name in ("VS Code", "vscode", "vs-code", "Visual Studio Code"):
        assert score_episode(ext([(name, "Tool")]), gold).entities == PRF(1, 0, 0), name


def test_declared_alias_claimed_twice_is_ambiguous():
    gold = ext(
        [Entity("New York City", "Place", ("NY",)), Entity("New York State", "Place", ("NY",))]
    )
    assert score_episode(ext(["NY"]), gold).entities == PRF(0, 1, 2)


def test_own_name_beats_declared_alias():
    gold = ext([Entity("Go", "Tool"), Entity("Golang Meetup", "Event", ("Go",))])
    s = score_episode(ext([("Go", "Tool")]), gold)
    assert s.missed_entities == ("golang meetup",)


def test_unmatched_names_do_not_alias_each_other():
    s = score_episode(ext(["Maya Lopez"]), GOLD)
    assert "maya lopez" in s.extra_entities


# --- sets ---------------------------------------------------------------------------------
def test_micro_and_macro_differ():
    gold = {"a": ext(["x"]), "b": ext(["p", "q", "r", "s"])}
    pred = {"a": ext(["x"]), "b": ext(["p"])}
    s = score_set(pred, gold)
    assert s.entities == PRF(2, 0, 3)
    assert s.entities.recall == pytest.approx(2 / 5)
    assert s.macro_entities.recall == pytest.approx((1.0 + 0.25) / 2)
    assert s.macro_entities.precision == 1.0
    assert s.macro_entities.f1 == pytest.approx((1.0 + 0.4) / 2)


def test_missing_prediction_counts_as_empty_and_extra_is_unscored():
    gold = {"a": ext(["x"]), "b": ext(["y"])}
    pred = {"a": ext(["x"]), "zzz": ext(["y"])}
    s = score_set(pred, gold)
    assert [e.episode_id for e in s.episodes] == ["a", "b"]
    assert s.entities == PRF(1, 0, 1)
    assert s.unscored == ("zzz",)


def test_aggregate_empty_set():
    s = aggregate([])
    assert s.entities == PRF() and s.macro_facts.f1 == 1.0 and s.duplicates == 0


def test_aggregate_sums_duplicates():
    gold = {"a": ext(["x"]), "b": ext(["y"])}
    pred = {"a": ext(["x", "X"]), "b": ext(["y", "Y", "y."])}
    assert score_set(pred, gold).duplicates == 3


def test_set_passes_options_through():
    gold = {"a": ext(["m", "n"], [("m", "n", "KNOWS")])}
    pred = {"a": ext(["m", "n"], [("n", "m", "acquainted with")])}
    s = score_set(
        pred, gold, relation_synonyms={"ACQUAINTED_WITH": "KNOWS"}, symmetric_relations={"KNOWS"}
    )
    assert s.facts == PRF(1, 0, 0)


# --- parsing ------------------------------------------------------------------------------
def test_from_dict_synonyms_and_defaults():
    e = Extraction.from_dict(
        {
            "entities": [{"name": "Maya", "type": "Person", "aliases": ["M"]}, {"name": "Acme"}],
            "facts": [
                {"source": "Maya", "target": "Acme", "relation_type": "WORKS_AT"},
                {"source": "Maya", "target": "Acme"},
            ],
        }
    )
    assert e.entities[0] == Entity("Maya", "Person", ("M",))
    assert e.entities[1].entity_type is None
    assert e.facts[0].relation == "WORKS_AT" and e.facts[1].relation == "RELATES_TO"
    assert Extraction.from_dict({}) == Extraction()


@pytest.mark.parametrize(
    "bad",
    [
        {"entities": [{"type": "Person"}]},
        {"facts": [{"source": "a"}]},
        {"entities": ["just a string"]},
    ],
)
def test_from_dict_rejects_malformed(bad):
    with pytest.raises(InvalidInput):
        Extraction.from_dict(bad)


def test_scores_are_finite():
    s = score_episode(ext(["a"]), ext(["b"]))
    assert all(math.isfinite(v) for v in (s.entities.precision, s.entities.recall, s.entities.f1))
