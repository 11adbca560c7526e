"""One module of name rules: the stored entity key, evaluation's looser key, one relation rule
that ingestion, import and evaluation all apply."""

import pytest

from workbench.names import loose_name_key, name_key, relation_name


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
