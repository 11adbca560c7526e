"""``workbench reembed``: every entity and fact embedded again with another model, the
database's size and model switched at once; an interrupted run leaves the old vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from service.control.cli import main
from workbench.config import LOCAL_EMBEDDER_MODEL, load_settings
from workbench.errors import DimensionMismatch
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.jobs.switch_model import reembed
from workbench.store import Store

FACTS = [
    {"type": "fact", "source": "Maria", "target": "Acme", "fact": "Maria works at Acme"},
    {"type": "fact", "source": "Tom", "target": "Neovim", "fact": "Tom edits code in Neovim"},
    {"type": "entity", "name": "Lisbon", "entity_type": "Place", "summary": "Maria's city"},
]


class SmallHash(HashEmbedder):
    model = "hash-64"

    def __init__(self):
        super().__init__(64)


def build(path) -> None:
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": str(path)}, env_file=None)
    with Workbench.open(settings, embedder=HashEmbedder()) as wb:
        report = wb.import_jsonl(FACTS)
        assert report["facts_created"] == 2
        wb.add_memory(
            "chat", "Maria: I cycle to Acme.\nTom: I walk.\nMaria: Brave.", source="message"
        )


def counts(store: Store) -> tuple[int, int]:
    return (
        store.fetchone("SELECT count(*) FROM entity_embeddings")[0],
        store.fetchone("SELECT count(*) FROM fact_embeddings")[0],
    )


def test_a_database_moves_to_another_model_and_size(tmp_path):
    db = tmp_path / "kb.duckdb"
    build(db)
    store = Store.open(db, dim=None)
    assert store.dim == 384
    seen = []
    report = reembed(store, SmallHash(), seen.append)
    # Maria, Acme, Tom, Neovim, Lisbon; and the chat's passage
    assert (report.entities, report.facts, report.passages) == (5, 2, 1)
    assert (report.dimensions_before, report.dimensions_after) == (384, 64)
    assert (report.model_before, report.model_after) == ("hash-bow", "hash-64")
    assert sum(seen) == 8
    assert counts(store) == (5, 2)
    assert store.fetchone("SELECT count(*), min(model) FROM passage_embeddings") == (1, "hash-64")
    assert store.meta("embedding_dim") == "64" and store.meta("embedding_model") == "hash-64"
    vector = store.fetchone("SELECT vector FROM fact_embeddings LIMIT 1")[0]
    assert len(vector) == 64
    assert {m for (m,) in store.fetchall("SELECT DISTINCT model FROM entity_embeddings")} == {
        "hash-64"
    }
    store.close()
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": str(db)}, env_file=None)
    with Workbench.open(settings, embedder=SmallHash()) as wb:
        hits = wb.search_memory_facts("where does Maria work")["facts"]
        assert hits[0]["fact"] == "Maria works at Acme"
        said = wb.search_memory("cycle to Acme", kinds=["passage"])["results"]
        assert said[0]["score_parts"]["similarity"] > 0.3  # the new vectors serve
        want = SmallHash().embed(["Maria works at Acme"])[0]
        got = wb.store.fetchone(
            "SELECT v.vector FROM fact_embeddings v JOIN facts f USING (uuid) "
            "WHERE f.fact = 'Maria works at Acme'"
        )[0]
        assert np.allclose(got, want, atol=1e-6)
    with pytest.raises(DimensionMismatch, match="reembed"):
        Workbench.open(settings, embedder=HashEmbedder())


def test_an_interrupted_reembed_leaves_the_old_vectors(tmp_path):
    db = tmp_path / "kb.duckdb"
    build(db)

    class Failing(SmallHash):
        def embed(self, texts):
            if self.calls:
                raise RuntimeError("the embedder died")
            return super().embed(texts)

    store = Store.open(db, dim=None)
    before = store.fetchall("SELECT uuid, vector FROM fact_embeddings ORDER BY uuid")
    import workbench.jobs.switch_model as module

    module_batch, module.BATCH = module.BATCH, 2
    try:
        with pytest.raises(RuntimeError, match="died"):
            reembed(store, Failing())
    finally:
        module.BATCH = module_batch
    assert store.meta("embedding_dim") == "384" and store.meta("embedding_model") == "hash-bow"
    assert store.fetchall("SELECT uuid, vector FROM fact_embeddings ORDER BY uuid") == before
    # run again: it starts over and finishes
    assert reembed(store, SmallHash()).facts == 2
    store.close()


@pytest.mark.slow
def test_the_command_writes_a_reembedded_copy_with_the_local_model(tmp_path, capsys,
                                                                   monkeypatch):  # fmt: skip
    db, copy = tmp_path / "kb.duckdb", tmp_path / "copy.duckdb"
    build(db)
    for name in list(__import__("os").environ):
        if name.startswith("SVC_KNOWLEDGE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    assert main(["reembed", "--db", str(db), "--into", str(copy), "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model_after"] == LOCAL_EMBEDDER_MODEL and report["facts"] == 2
    assert report["database"] == str(copy)
    original, moved = Store.open(db, dim=None, read_only=True), Store.open(copy, dim=None)
    try:
        assert original.meta("embedding_model") == "hash-bow"
        assert moved.meta("embedding_model") == LOCAL_EMBEDDER_MODEL
        assert counts(moved) == counts(original) == (5, 2)
    finally:
        original.close()
        moved.close()
    # a copy is never written over an existing file; a missing database is named
    assert main(["reembed", "--db", str(db), "--into", str(copy), "--quiet"]) == 1
    assert "exists already" in capsys.readouterr().err
    assert main(["reembed", "--db", str(tmp_path / "none.duckdb"), "--quiet"]) == 1
    assert "not found" in capsys.readouterr().err


@pytest.mark.slow
def test_a_database_of_another_model_is_refused_until_it_is_reembedded(
    tmp_path, capsys, monkeypatch
):
    db = tmp_path / "kb.duckdb"
    build(db)  # vectors of the hash model, as a MiniLM database holds MiniLM's
    for name in list(__import__("os").environ):
        if name.startswith("SVC_KNOWLEDGE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    assert main(["status", "--db", str(db)]) == 1
    error = capsys.readouterr().err
    assert "'hash-bow'" in error and f"workbench reembed --model {LOCAL_EMBEDDER_MODEL}" in error
    assert main(["reembed", "--db", str(db), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["status", "--db", str(db)]) == 0
    store = Store.open(db, dim=None, read_only=True)
    try:  # every vector is the configured model's: none of the old one is left
        assert store.fetchall(
            "SELECT DISTINCT model FROM fact_embeddings UNION SELECT model FROM entity_embeddings"
        ) == [(LOCAL_EMBEDDER_MODEL,)]
    finally:
        store.close()
