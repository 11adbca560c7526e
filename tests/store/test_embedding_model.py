"""A database holds the vectors of one model: it records that model, and an embedder of
another model is refused at start-up with the command that re-embeds it (DuckDB and
PostgreSQL). Both local models have 384 dimensions, so the size alone cannot tell them
apart."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.errors import ModelMismatch
from workbench.store import Store
from workbench.store import graph as g

MINILM, E5 = "all-MiniLM-L6-v2", "multilingual-e5-small"


@pytest.fixture(params=["duckdb", "postgres"])
def location(request, tmp_path):
    if request.param == "postgres":
        return request.getfixturevalue("pg_location")
    return str(tmp_path / "kb.duckdb")


def _with_a_vector(location: str, model: str, recorded: str) -> None:
    store = Store.open(location, dim=8, embedding_model=recorded)
    g.insert_embeddings(store, "fact", ["f1"], np.ones((1, 8), dtype=np.float32), model)
    store.close()


def test_another_model_is_refused_with_the_command_that_reembeds(location):
    _with_a_vector(location, MINILM, MINILM)
    with pytest.raises(ModelMismatch, match=f"`workbench reembed --model {E5}`") as caught:
        Store.open(location, dim=8, embedding_model=E5)
    assert MINILM in caught.value.message
    Store.open(location, dim=8, embedding_model=MINILM).close()  # its own model opens it
    Store.open(location, dim=None).close()  # as `workbench reembed` opens it


def test_a_database_naming_no_model_is_judged_by_its_vectors(location):
    _with_a_vector(location, MINILM, recorded="")
    with pytest.raises(ModelMismatch, match=MINILM):
        Store.open(location, dim=8, embedding_model=E5)
    Store.open(location, dim=8, embedding_model=MINILM).close()


def test_a_database_without_vectors_takes_the_first_model_that_opens_it(location):
    Store.open(location, dim=8, embedding_model="").close()
    store = Store.open(location, dim=8, embedding_model=E5)
    assert store.meta("embedding_model") == E5
    store.close()
    with pytest.raises(ModelMismatch):
        Store.open(location, dim=8, embedding_model=MINILM)


def test_vectors_of_two_models_match_no_embedder(location):
    store = Store.open(location, dim=8, embedding_model="")
    g.insert_embeddings(store, "fact", ["f1"], np.ones((1, 8), dtype=np.float32), MINILM)
    g.insert_embeddings(store, "entity", ["e1"], np.ones((1, 8), dtype=np.float32), E5)
    store.close()
    for model in (MINILM, E5):
        with pytest.raises(ModelMismatch, match="reembed"):
            Store.open(location, dim=8, embedding_model=model)
