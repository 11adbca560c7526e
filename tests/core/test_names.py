"""One module of name rules: the stored entity key, evaluation's looser key, one relation rule
that ingestion, import and evaluation all apply, and the one rule of group names."""

import pytest

from workbench.errors import InvalidInput
from workbench.names import (
    MAX_GROUP_IDS,
    group_id,
    group_ids,
    is_group_id,
    loose_name_key,
    name_key,
    relation_name,
)


@pytest.mark.parametrize(
    "raw, key",
    [
        ("Maria  Keller", "maria keller"),
        ("ACME-Corp.", "acme corp"),
        ("The Who", "the who"),
        ("Café", "café"),
    ],
)
def test_the_stored_key_ignores_case_space_and_punctuation_only(raw, key):
    assert name_key(raw) == key


@pytest.mark.parametrize(
    "raw, key",
    [
        ("The  Acme-Corp.", "acme corp"),
        ("O'Brien", "obrien"),
        ("Café", "cafe"),
        ("The", "the"),
    ],
)
def test_the_loose_key_also_drops_accents_apostrophes_and_a_leading_article(raw, key):
    assert loose_name_key(raw) == key


@pytest.mark.parametrize(
    "raw, rel",
    [
        ("works at", "WORKS_AT"),
        ("works-at", "WORKS_AT"),
        ("WorksAt", "WORKS_AT"),
        ("WORKS_AT", "WORKS_AT"),
        ("  ", "RELATES_TO"),
        ("!!", "RELATES_TO"),
    ],
)
def test_one_relation_rule(raw, rel):
    assert relation_name(raw) == rel


def test_a_relation_is_at_most_80_characters_and_never_ends_in_an_underscore():
    rel = relation_name("a" * 79 + " b")
    assert len(rel) <= 80 and not rel.endswith("_")


def test_import_stores_relations_by_the_same_rule(tmp_path, hash_embedder):
    import json

    from workbench import Workbench, load_settings

    path = tmp_path / "facts.jsonl"
    path.write_text(
        json.dumps(
            {
                "type": "fact",
                "source": "Maria",
                "target": "Acme",
                "relation": "worksAt",
                "fact": "Maria works at Acme.",
            }
        )
        + "\n"
    )
    settings = load_settings(
        {"SVC_KNOWLEDGE_DB_PATH": ":memory:", "SVC_KNOWLEDGE_DECAY_ENABLED": "false"}
    )
    with Workbench.open(settings, embedder=hash_embedder, chat=None) as wb:
        wb.import_jsonl(path)
        assert wb.store.fetchall("SELECT relation FROM facts") == [("WORKS_AT",)]


@pytest.mark.parametrize("name", ["main", "a", "team-1.x:y_z", "9", "A" * 128])
def test_group_names_the_rule_accepts(name):
    assert is_group_id(name) and group_id(name) == name


@pytest.mark.parametrize(
    "name", ["", " ", "main\n", "a\nb", "../../etc", "-a", ".a", "a b", "a/b", "é", "x" * 129, 5]
)
def test_group_names_the_rule_refuses(name):
    assert not is_group_id(name)
    with pytest.raises(InvalidInput, match="'group_id'"):
        group_id(name)


def test_a_list_of_groups_is_checked_bounded_and_deduplicated():
    assert group_ids(None) is None and group_ids([]) is None
    assert group_ids(["a", "b", "a"]) == ["a", "b"]
    with pytest.raises(InvalidInput, match="'group_ids'"):
        group_ids(["a", ""])
    with pytest.raises(InvalidInput, match=f"at most {MAX_GROUP_IDS}"):
        group_ids([f"g{i}" for i in range(MAX_GROUP_IDS + 1)])
    with pytest.raises(InvalidInput, match="list"):
        group_ids("main")
