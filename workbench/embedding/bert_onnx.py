"""A BERT encoder written as an ONNX graph straight from its ``model.safetensors`` (no torch).

The local embedder's models (all-MiniLM-L6-v2 and other sentence-transformers BERT models)
are a plain BERT encoder: embeddings (word + position + token type, LayerNorm), then N layers
of self-attention and a GELU feed-forward block, each closed by a residual LayerNorm. This
module writes that computation with ``onnx.helper`` from the weights and ``config.json``, so
that the base install exports the model with ``onnx`` and ``safetensors`` only; torch is
needed neither to export nor to run it. The graph has the inputs and the output of the torch
export it replaces (``input_ids``, ``attention_mask``, ``token_type_ids`` →
``token_embeddings``, dynamic batch and sequence axes), and gives the same vectors as
sentence-transformers (tested against it when torch is installed, and against reference
vectors always).

Only what these models use is supported: ``model_type`` ``bert``, absolute positions,
``gelu`` (erf) activations. Anything else raises :class:`UnsupportedModel`, and the caller
falls back to the torch exporter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:  # onnx loads when a model is written
    import onnx

OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "token_embeddings"


class UnsupportedModel(ValueError):
    """The model is not a BERT encoder this module can write."""


def bert_config(source: Path) -> dict[str, Any]:
    """``config.json`` of a model folder, checked for what :func:`build_bert_onnx` supports."""
    try:
        config: dict[str, Any] = json.loads((source / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedModel(f"cannot read {source / 'config.json'}: {exc}") from exc
    problems = []
    if config.get("model_type") != "bert":
        problems.append(f"model_type {config.get('model_type')!r} (only 'bert')")
    if config.get("hidden_act", "gelu") != "gelu":
        problems.append(f"hidden_act {config.get('hidden_act')!r} (only 'gelu')")
    if config.get("position_embedding_type", "absolute") != "absolute":
        problems.append(f"position_embedding_type {config.get('position_embedding_type')!r}")
    if config.get("hidden_size", 0) % max(1, config.get("num_attention_heads", 1)):
        problems.append("hidden_size is not a multiple of num_attention_heads")
    if problems:
        raise UnsupportedModel(f"{source}: unsupported " + ", ".join(problems))
    return config


def load_weights(source: Path) -> dict[str, NDArray[Any]]:
    """The tensors of ``model.safetensors`` by name, without a ``bert.`` prefix."""
    from safetensors.numpy import load_file

    weights = load_file(str(source / "model.safetensors"))
    return {name.removeprefix("bert."): value for name, value in weights.items()}


class GraphBuilder:
    """A small builder: nodes, float32 initializers and unique names."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    def const(self, hint: str, value: NDArray[Any]) -> str:
        from onnx import numpy_helper

        name = self.name(hint)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], hint: str | None = None, **attrs: Any) -> str:
        """A node; ``attrs`` are its ONNX attributes (ints, floats, strings, lists of ints),
        passed to ``make_node``'s keywords, which take ``Any``."""
        from onnx import helper

        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out


def build_bert_onnx(source: Path) -> onnx.ModelProto:
    """The ``onnx.ModelProto`` of the BERT encoder in ``source`` (weights inlined)."""
    config = bert_config(source)
    weights = load_weights(source)

    def tensor(name: str) -> NDArray[np.float32]:
        try:
            return np.asarray(weights[name], dtype=np.float32)
        except KeyError:
            raise UnsupportedModel(f"{source}: model.safetensors has no tensor {name!r}") from None

    return build_bert_graph(config, tensor)


# (graph, input_ids) -> the name of the [batch, sequence, hidden] word embeddings
WordLookup = Callable[[GraphBuilder, str], str]
# (graph, x, weight [out, in] as torch stores it) -> the name of x @ weight.T
Product = Callable[[GraphBuilder, str, NDArray[np.float32]], str]


def float_product(g: GraphBuilder, x: str, weight: NDArray[np.float32]) -> str:
    # torch's Linear stores [out, in]; MatMul wants [in, out]
    return g.op("MatMul", [x, g.const("weight", weight.T)])


def build_bert_graph(
    config: Mapping[str, Any],
    tensor: Callable[[str], NDArray[np.float32]],
    words: WordLookup | None = None,
    product: Product = float_product,
) -> onnx.ModelProto:
    """The ``onnx.ModelProto`` of a BERT encoder: ``config`` as in ``config.json``, ``tensor``
    gives each float32 weight by its Hugging Face name (without ``bert.``); ``words`` builds
    the word embedding lookup when the table is not a plain float32 matrix; ``product``
    multiplies by a weight matrix (default: a float32 ``MatMul``)."""
    from onnx import TensorProto, helper

    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    head_dim = hidden // heads
    eps = float(config.get("layer_norm_eps", 1e-12))
    g = GraphBuilder()

    def linear(x: str, prefix: str) -> str:
        product_ = product(g, x, tensor(f"{prefix}.weight"))
        return g.op("Add", [product_, g.const(f"{prefix}.bias", tensor(f"{prefix}.bias"))])

    def layer_norm(x: str, prefix: str) -> str:
        scale = g.const(f"{prefix}.weight", tensor(f"{prefix}.weight"))
        bias = g.const(f"{prefix}.bias", tensor(f"{prefix}.bias"))
        return g.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)

    # embeddings: word + position + token type, then LayerNorm
    if words is None:
        table = g.const("word", tensor("embeddings.word_embeddings.weight"))
        word_vectors = g.op("Gather", [table, "input_ids"])
    else:
        word_vectors = words(g, "input_ids")
    # the first `sequence` rows of the position table
    length = g.op("Shape", ["input_ids"], start=1, end=2)
    first = g.const("first", np.array([0], dtype=np.int64))
    table = g.const("position", tensor("embeddings.position_embeddings.weight"))
    positions = g.op("Slice", [table, first, length, first])
    types = g.op(
        "Gather",
        [g.const("type", tensor("embeddings.token_type_embeddings.weight")), "token_type_ids"],
    )
    summed = g.op("Add", [g.op("Add", [word_vectors, positions]), types])
    x = layer_norm(summed, "embeddings.LayerNorm")

    # attention mask: 0 where attended, the float32 minimum where padded ([batch, 1, 1, seq])
    mask = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    inverted = g.op("Sub", [g.const("one_f", np.array(1.0, dtype=np.float32)), mask])
    lowest = g.const("lowest", np.array(np.finfo(np.float32).min, dtype=np.float32))
    additive = g.op(
        "Unsqueeze",
        [g.op("Mul", [inverted, lowest]), g.const("axes", np.array([1, 2], dtype=np.int64))],
    )
    split_shape = g.const("split", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge_shape = g.const("merge", np.array([0, 0, hidden], dtype=np.int64))
    root = g.const("root", np.array(math.sqrt(head_dim), dtype=np.float32))
    sqrt2 = g.const("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    half = g.const("half", np.array(0.5, dtype=np.float32))

    def split_heads(t: str, perm: list[int]) -> str:
        return g.op("Transpose", [g.op("Reshape", [t, split_shape])], perm=perm)

    for n in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{n}"
        q = split_heads(linear(x, f"{p}.attention.self.query"), [0, 2, 1, 3])
        k = split_heads(linear(x, f"{p}.attention.self.key"), [0, 2, 3, 1])
        v = split_heads(linear(x, f"{p}.attention.self.value"), [0, 2, 1, 3])
        scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, k]), root]), additive])
        probs = g.op("Softmax", [scores], axis=-1)
        context = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = g.op("Reshape", [context, merge_shape])
        attended = linear(context, f"{p}.attention.output.dense")
        x = layer_norm(g.op("Add", [attended, x]), f"{p}.attention.output.LayerNorm")
        inner = linear(x, f"{p}.intermediate.dense")
        # exact GELU: 0.5 * x * (1 + erf(x / sqrt(2)))
        erf = g.op("Erf", [g.op("Div", [inner, sqrt2])])
        gelu = g.op(
            "Mul",
            [
                g.op("Mul", [inner, half]),
                g.op("Add", [erf, g.const("one_g", np.array(1.0, dtype=np.float32))]),
            ],
        )
        out = linear(gelu, f"{p}.output.dense")
        x = layer_norm(g.op("Add", [out, x]), f"{p}.output.LayerNorm")
    g.nodes.append(helper.make_node("Identity", [x], [OUTPUT_NAME], name=OUTPUT_NAME))

    dims = ["batch", "sequence"]
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, dims) for name in INPUT_NAMES]
    output = helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [*dims, hidden])
    graph = helper.make_graph(g.nodes, "bert_encoder", inputs, [output], g.initializers)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="knowledge-workbench",
    )
    model.ir_version = min(model.ir_version, 8)  # readable by older onnxruntime releases
    return model


def write_bert_onnx(source: Path, target: Path) -> None:
    """Build the graph of ``source`` and save it to ``target`` (one file, weights inlined)."""
    import onnx

    model = build_bert_onnx(source)
    onnx.checker.check_model(model)
    onnx.save_model(model, str(target))
