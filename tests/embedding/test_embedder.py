"""The local embedder (the real packaged model) and the compat client's own checks."""

import numpy as np
import pytest

from workbench.config import load_settings
from workbench.embedding import CompatEmbedder, LocalEmbedder, build_embedder, check_texts
from workbench.embedding.models import resolve_local_model
from workbench.errors import DimensionMismatch, EmbedderError, InvalidInput


def test_local_model_gives_unit_vectors_that_rank_meaning(local_embedder):
    vecs = local_embedder.embed(
        ["The user lives in Berlin", "Their home is in Berlin", "Quarterly tax forms are due"]
    )
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-4)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2] + 0.2
    assert local_embedder.embed([]).shape == (0, 384)


def test_the_packaged_model_resolves_to_a_local_folder():
    """The float32 weights' folder when the torch extra installed them, else the bundled
    tokenizer folder (the int8 ONNX file comes from its own package)."""
    from pathlib import Path

    from workbench.embedding.models import BUNDLED_DIR, full_precision_dir

    path = resolve_local_model("all-MiniLM-L6-v2")
    assert Path(path) == (full_precision_dir() or BUNDLED_DIR) and Path(path).is_dir()


def test_a_wrong_configured_dimension_is_a_clear_error():
    embedder = LocalEmbedder("all-MiniLM-L6-v2", dimensions=768)
    with pytest.raises(DimensionMismatch, match="384 dimensions"):
        embedder.embed(["x"])


def test_the_vector_size_comes_from_the_model_or_is_a_clear_error():
    from workbench.embedding.models import _model_dimension

    class Sized:  # newer sentence-transformers name it get_embedding_dimension
        def get_embedding_dimension(self) -> int:
            return 384

    class Unsized:  # a model without a layer that knows its output size
        def get_sentence_embedding_dimension(self) -> None:
            return None

    assert _model_dimension(Sized()) == 384
    with pytest.raises(EmbedderError, match="gives no size for its vectors"):
        _model_dimension(Unsized())


def test_settings_choose_the_embedder():
    from workbench.embedding.e5 import E5Embedder

    local = build_embedder(load_settings({}, env_file=None))  # the default: multilingual E5
    assert isinstance(local, E5Embedder) and local.dimensions == 384
    english = {"SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL": "all-MiniLM-L6-v2"}
    minilm = build_embedder(load_settings(english, env_file=None))
    assert isinstance(minilm, LocalEmbedder) and minilm.model == "all-MiniLM-L6-v2"
    compat = build_embedder(
        load_settings(
            {
                "SVC_KNOWLEDGE_EMBEDDER_PROVIDER": "compat",
                "SVC_KNOWLEDGE_EMBEDDER_BASE_URL": "http://127.0.0.1:9/v1",
                "SVC_KNOWLEDGE_EMBEDDER_MODEL": "m",
                "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "384",
            },
            env_file=None,
        )
    )
    assert isinstance(compat, CompatEmbedder) and compat.base_url == "http://127.0.0.1:9/v1"
    with pytest.raises(EmbedderError, match="SVC_KNOWLEDGE_EMBEDDER_MODEL"):
        build_embedder(
            load_settings(
                {"SVC_KNOWLEDGE_EMBEDDER_BASE_URL": "http://127.0.0.1:9/v1"}, env_file=None
            )
        )


def test_a_refused_connection_names_the_url():
    embedder = CompatEmbedder("http://127.0.0.1:9/v1", "m", 384)
    with pytest.raises(EmbedderError, match=r"http://127.0.0.1:9/v1/embeddings.*running"):
        embedder.embed(["x"])


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([], "non-empty"),
        (["a", 3], r"input\[1\]"),
        (["a", " "], "empty"),
        (["a"] * 5, "at most 4"),
        (["x" * 11], "at most 10"),
    ],
)
def test_embedding_input_is_checked(texts, message):
    with pytest.raises(InvalidInput, match=message):
        check_texts(texts, max_items=4, max_chars=10)


def test_a_hosted_embedder_sends_its_key():
    settings = load_settings(
        {
            "SVC_KNOWLEDGE_EMBEDDER_BASE_URL": "http://127.0.0.1:9/v1",
            "SVC_KNOWLEDGE_EMBEDDER_MODEL": "m",
            "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS": "8",
            "SVC_KNOWLEDGE_EMBEDDER_API_KEY": "emb-secret",
        },
        env_file=None,
    )
    embedder = build_embedder(settings)
    assert embedder._client.headers["authorization"] == "Bearer emb-secret"
    assert "emb-secret" not in repr(settings)
