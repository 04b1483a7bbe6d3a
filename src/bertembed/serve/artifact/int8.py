"""An int8 encoder (``bertembed export --encoder-dtype int8``): ONNX Runtime's dynamic quantisation, smoothed.

The fused float32 encoder (:mod:`.fusion`) is quantised with
``onnxruntime.quantization.quantize_dynamic`` (int8 weights, one scale per
output channel; the activations quantised to uint8 at run time, one scale
per call): each layer's ``Attention`` becomes ``QAttention`` and each
quantised ``MatMul`` a ``MatMulInteger`` that ONNX Runtime's graph
optimiser turns into ``DynamicQuantizeMatMul``. What stays float: the
LayerNorms, GELU, softmax, the pooling, the feed-forward block's second
``MatMul`` (the one fed by the GELU), the whole last layer, and in encoders
of :data:`FIRST_LAYER_FLOAT_FROM` layers or more the whole first layer
(:func:`quantisable`; a layer ends at its GELU-fed ``MatMul``, so this holds
whether the attention is fused or not). Why:

- the last layer: with it quantised, the least cosine on short real texts
  fell from 0.994 to 0.992 on all-MiniLM-L6-v2, too close to
  :data:`COSINE_MIN` once the service's batching is added, for about 6%
  more speed;
- the first layer, from 12 layers: all-mpnet-base-v2 (12 layers, attention
  not fused) with all 60 projections quantised missed the retrieval goal
  (top-10 overlap with float32 0.9498 on 400 package-name queries against
  2000 package summaries, goal 0.95). Its last layer float: 0.9503; the
  first alone: 0.9538; the attention output projections float too (last
  layer float): 0.9568, but 44 nodes quantised instead of 50; first and last
  layers float: 0.9560, least cosine on 1000 held-out texts 0.9955 (was
  0.9938), on the documents 0.9983 (was 0.9909), speed-up 1.61x (measured
  under ``nice`` on a shared 2-core machine; 1.81x before, on a busier
  one). With 6 layers a second float layer would take one of the five
  int8 layers, and all-MiniLM-L6-v2's speed-up (1.53x measured before,
  1.43x in the same shared run; goal 1.5x) cannot spare it (not measured),
  hence the threshold; its encoder is unchanged.

Quantised as is, all-MiniLM-L6-v2 loses too much (cosine to float32 down to
0.979 on real texts): a few hidden channels carry values far larger than
the rest, and one activation scale per call spends the 256 levels on them.
Before quantising, each quantised weight's input is divided channel by
channel by ``s = max|x|**a / max|w|**(1 - a)`` (``a``:
:data:`SMOOTHING_ALPHA`) and the weight's rows
multiplied by ``s`` (an exact rewrite in float: a ``Mul`` by ``1/s`` is
inserted before the node, so the residual path still sees the unscaled
tensor), which moves the outliers into the weights, whose scales are per
channel. ``max|x|`` is measured on :data:`CALIBRATION_TEXTS` through the
float32 encoder. The GELU-fed ``MatMul`` is left float because the same
rewrite made it worse, and quantised without it, alone, it already costs
more than the other three kinds of node together.

The result is checked by cosine, not by :data:`~bertembed.serve.artifact.CHECK_ATOL`:
every one of :data:`~bertembed.serve.artifact.CHECK_TEXTS` must reach
:data:`COSINE_MIN` against the reference (torch, or the whole ONNX model).

Needs onnx and onnxruntime (``onnxruntime.quantization`` ships with it).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import ENCODER_DTYPES

__all__ = ["COSINE_MIN", "ENCODER_DTYPES", "calibration_feeds", "check_cosine", "cosines", "quantize_encoder"]
#: Least cosine between an int8 artifact and its reference on every check text.
COSINE_MIN = 0.99
#: The exponent of the smoothing (0.5 would split a channel's range evenly between its activation and its
#: weight row; more moves more of it into the weights: 0.65 did best of 0.5, 0.65 and 0.8 on all-MiniLM-L6-v2).
SMOOTHING_ALPHA = 0.65
#: Encoders with at least this many layers keep their first layer float too, besides the last (each float
#: layer costs about 1/layers of the speed-up: all-MiniLM-L6-v2's 6 layers cannot spare a second one).
FIRST_LAYER_FLOAT_FROM = 12
#: Operators whose output feeds a node that stays float.
_GELU_OPS = ("Gelu", "BiasGelu", "FastGelu")
#: Texts the activations' ranges are measured on (written for this project: everyday and technical
#: English, other languages, lists, numbers and code, short and long).
CALIBRATION_TEXTS = (
    "The meeting was moved to Thursday afternoon because half the team was travelling.",
    "How do I reset my password if I no longer have access to the recovery email?",
    "Boil the pasta for nine minutes, then drain it and keep a cup of the water.",
    "The library's search results are ranked by the cosine similarity of their vectors.",
    "Error: connection refused while contacting the package mirror; retrying in 30 seconds.",
    "def mean(xs): return sum(xs) / len(xs)  # fails on an empty list",
    "She planted tomatoes, basil and two rows of beans along the southern fence.",
    "Quarterly revenue rose 4.2% to $18.3 million, driven by subscriptions in Europe.",
    "A cheap and cheerful guide to walking the coast path in bad weather.",
    "Install the package with pip, then run the command with --help to see its options.",
    "The patient reported mild headaches and dizziness after the second dose.",
    "Why does the train always stop for ten minutes just outside the station?",
    "Der Zug nach München fährt heute von Gleis 7 ab.",
    "Le musée est fermé le lundi et les jours fériés.",
    "El informe final se publicará a finales de marzo.",
    "東京の天気は明日から崩れる見込みです。",
    "Thanks!",
    "ok",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The referee disallowed the goal after a long look at the replay.",
    "Keep the receipt: returns are accepted within thirty days of purchase.",
    "A lightweight library for parsing command-line arguments, with subcommands and shell completion.",
    "Utilities for compressing and decompressing files in the xz and lzma formats.",
    "The kernel module provides support for USB serial adapters based on the FTDI chips.",
    "In 1969 two astronauts walked on the Moon while a third orbited above them.",
    "If anything can go wrong, it will; and if nothing can go wrong, something still will.",
    "Please find attached the signed contract and the invoice for the first instalment.",
    "The cat knocked a glass off the table and looked at me as if it were my fault.",
    "Machine translation has improved a great deal, but idioms are still hard.",
    "Turn left at the bakery, go past the school, and the clinic is on your right.",
    " ".join(
        [
            "A long text about a long journey: the road wound through the hills, past farms and villages,",
            "over rivers and under bridges, while the travellers talked about everything and nothing,",
            "about books they had read, meals they had eaten and places they still hoped to see one day.",
        ]
        * 6
    ),
    "¿Dónde está la estación de autobuses? 🚌 Ünïcödé façade, naïve café.",
)


def _with_contrib_opset(model: onnx.ModelProto) -> None:
    """Declare the ``com.microsoft`` domain of the fused operators (ONNX's shape inference, which the
    quantiser runs, refuses a graph that uses a domain it does not import), in place."""
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))


def layers(model: onnx.ModelProto) -> list[list[tuple[onnx.NodeProto, bool]]]:
    """The nodes :func:`quantisable` considers (``Attention``, and ``MatMul`` with a 2-D constant
    weight), in the graph's order, grouped by layer: each with whether a GELU feeds it (the node
    that ends its layer; nodes after the last one form a group of their own)."""
    weights = {i.name: i for i in model.graph.initializer}
    producer = {out: node for node in model.graph.node for out in node.output}
    found: list[list[tuple[onnx.NodeProto, bool]]] = [[]]
    for node in model.graph.node:
        if node.op_type not in ("Attention", "MatMul") or len(node.input) < 2:
            continue
        weight = weights.get(node.input[1])
        if weight is None or len(weight.dims) != 2:
            continue
        source = producer.get(node.input[0])
        gelu_fed = source is not None and source.op_type in _GELU_OPS
        found[-1].append((node, gelu_fed))
        if gelu_fed:
            found.append([])
    return [layer for layer in found if layer]


def quantisable(model: onnx.ModelProto) -> tuple[list[onnx.NodeProto], list[onnx.NodeProto]]:
    """The nodes to quantise (``Attention``, and ``MatMul`` with a 2-D constant weight) and those
    of them left float (a ``MatMul`` fed by a GELU, the last layer's, and with
    :data:`FIRST_LAYER_FLOAT_FROM` layers or more the first layer's).

    The layers are told apart by the GELU-fed ``MatMul`` that ends each of them (in the graph's
    order), so they are found whether the attention is fused (``Attention``) or not (query, key
    and value ``MatMul`` s, as in MPNet).
    """
    chosen: list[onnx.NodeProto] = []
    kept: list[onnx.NodeProto] = []
    ends: list[int] = []  # len(chosen) after each layer
    for layer in layers(model):
        for node, gelu_fed in layer:
            if gelu_fed:
                kept.append(node)
                ends.append(len(chosen))
            else:
                chosen.append(node)
    if len(ends) > 1:  # the last layer stays float
        kept += chosen[ends[-2] :]
        chosen = chosen[: ends[-2]]
    if len(ends) >= FIRST_LAYER_FLOAT_FROM:  # and the first
        kept += chosen[: ends[0]]
        chosen = chosen[ends[0] :]
    return chosen, kept


def channel_ranges(
    model: onnx.ModelProto, nodes: Sequence[onnx.NodeProto], feeds: Iterable[dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """Largest ``|x|`` per input channel of each node's first input over the real (unmasked) tokens of ``feeds``."""
    import onnxruntime as ort

    probe = onnx.ModelProto.FromString(model.SerializeToString())
    names = list(dict.fromkeys(node.input[0] for node in nodes))
    known = {o.name for o in probe.graph.output}
    for name in names:
        if name not in known:
            probe.graph.output.append(helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the tensors as named
    session = ort.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ranges: dict[str, np.ndarray] = {}
    for feed in feeds:
        real = feed["attention_mask"].astype(bool)
        for name, value in zip(names, session.run(names, feed), strict=True):
            top = np.abs(value[real]).max(axis=0)
            ranges[name] = top if name not in ranges else np.maximum(ranges[name], top)
    return ranges


def smooth(model: onnx.ModelProto, nodes: Sequence[onnx.NodeProto], ranges: dict[str, np.ndarray]) -> None:
    """Divide each node's input by ``s`` per channel (a ``Mul`` inserted before it) and multiply its
    weight's rows by ``s``, in place: the same function in float, with the activations' outliers
    moved into the weights."""
    graph = model.graph
    weights = {i.name: i for i in graph.initializer}
    for node in nodes:
        init = weights[node.input[1]]
        w = numpy_helper.to_array(init).astype(np.float32)
        x_max = np.maximum(ranges[node.input[0]].astype(np.float64), 1e-5)
        w_max = np.maximum(np.abs(w).max(axis=1).astype(np.float64), 1e-5)
        s = x_max**SMOOTHING_ALPHA / w_max ** (1.0 - SMOOTHING_ALPHA)
        init.CopyFrom(numpy_helper.from_array((w * s[:, None]).astype(np.float32), init.name))
        inverse = f"{node.name}_smooth_inv"
        scaled = f"{node.input[0]}_smoothed_for_{node.name}"
        graph.initializer.append(numpy_helper.from_array((1.0 / s).astype(np.float32), inverse))
        mul = helper.make_node("Mul", [node.input[0], inverse], [scaled], name=f"{node.name}_smooth")
        graph.node.insert(list(graph.node).index(node), mul)
        node.input[0] = scaled


def quantize_encoder(
    model: onnx.ModelProto, feeds: Iterable[dict[str, np.ndarray]]
) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """The int8 encoder of a fused float32 one, and what was done (for ``service.json``).

    Parameters
    ----------
    model : onnx.ModelProto
        The fused encoder (``embeddings``, ``attention_mask`` -> pooled vectors); not modified.
    feeds : iterable of dict
        The encoder's inputs for :data:`CALIBRATION_TEXTS` (:func:`calibration_feeds`).

    Returns
    -------
    onnx.ModelProto
        The quantised encoder.
    dict
        ``{"method", "per_channel", "weight_type", "smoothing_alpha", "calibration_texts",
        "quantized": {op: n}, "float": {op: n}}``.
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.ModelProto.FromString(model.SerializeToString())
    _with_contrib_opset(model)
    chosen, kept = quantisable(model)
    if not chosen:
        raise ValueError("the encoder has no Attention or MatMul with a constant weight: nothing to quantise")
    feeds = list(feeds)
    smooth(model, chosen, channel_ranges(model, chosen, feeds))
    disabled = logging.root.manager.disable
    logging.disable(max(disabled, logging.WARNING))  # the quantiser's advice about pre-processing
    try:
        with tempfile.TemporaryDirectory(prefix="bertembed-int8-") as tmp:
            out = Path(tmp) / "encoder.int8.onnx"
            quantize_dynamic(
                model,
                out,
                per_channel=True,
                weight_type=QuantType.QInt8,
                nodes_to_quantize=[node.name for node in chosen],
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
            quantized = onnx.load(str(out))
    finally:
        logging.disable(disabled)
    counts: dict[str, dict[str, int]] = {"quantized": {}, "float": {}}
    for key, nodes in (("quantized", chosen), ("float", kept)):
        for node in nodes:
            counts[key][node.op_type] = counts[key].get(node.op_type, 0) + 1
    info = {
        "method": "onnxruntime.quantization.quantize_dynamic, smoothed",
        "per_channel": True,
        "weight_type": "int8",
        "activation_type": "uint8 (dynamic, one scale per call)",
        "smoothing_alpha": SMOOTHING_ALPHA,
        "calibration_texts": len(CALIBRATION_TEXTS),
        **counts,
    }
    return quantized, info


def calibration_feeds(tokenizer: Any, layer: Any, batch: int = 8) -> list[dict[str, np.ndarray]]:
    """The encoder's inputs for :data:`CALIBRATION_TEXTS`, as the service computes them: the tokenizer
    (truncating and padding, :func:`.tokens.batch_tokenizer`) then bertembed's layer."""
    feeds: list[dict[str, np.ndarray]] = []
    for start in range(0, len(CALIBRATION_TEXTS), batch):
        encodings = tokenizer.encode_batch(list(CALIBRATION_TEXTS[start : start + batch]))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds.append({"embeddings": np.asarray(layer(ids), dtype=np.float32), "attention_mask": mask})
    return feeds


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Row-wise cosine of two (N, D) arrays (an all-zero pair counts as 1).

    Examples
    --------
    >>> cosines(np.array([[1.0, 0.0], [0.0, 0.0]]), np.array([[2.0, 0.0], [0.0, 0.0]])).tolist()
    [1.0, 1.0]
    """
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    norms = np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1)
    dots = (got * want).sum(axis=1)
    return np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 1.0)


def check_cosine(got: np.ndarray, want: np.ndarray, against: str) -> float:
    """The least cosine of ``got`` to ``want`` over the check texts; raise ValueError below :data:`COSINE_MIN`."""
    least = float(cosines(got, want).min())
    if not least >= COSINE_MIN:
        raise ValueError(
            f"the int8 encoder's vectors reach only cosine {least:.4f} to {against} on the check texts "
            f"(< {COSINE_MIN}): this model does not keep its quality in int8; export it with "
            "--encoder-dtype float32 (the default); service.json not written"
        )
    return least
