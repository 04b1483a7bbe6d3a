"""An artifact from a whole-model ONNX file, with no torch at any step (``bertembed export --onnx``).

``MODEL_DIR`` is the sentence-transformers model directory (``modules.json``,
the tokenizer, the Pooling config); ``MODEL.onnx`` is the whole transformer
as one ONNX graph (ids in, ``last_hidden_state`` out), by default
``MODEL_DIR/onnx/model.onnx``, where sentence-transformers model repositories
keep it. What it does:

1. ``bertembed.onnx.split_model`` cuts the graph after the embedding
   LayerNorm: the embedding tables become a bertembed layer, the rest an
   encoder that takes ``inputs_embeds``;
2. the model's pooling is appended to that encoder as ONNX nodes, its input
   renamed ``embeddings``: ``OUT_DIR/encoder.onnx`` takes and returns what
   :mod:`.from_torch`'s does;
3. the tokenizer is copied and ``service.json`` written;
4. the result is checked: the server's pipeline against the whole ONNX model
   (ONNX Runtime) followed by the same pooling in NumPy, on a few texts;
5. the layer the workers map is saved into ``OUT_DIR/embeddings/``
   (converted with ``--table-dtype``, trimmed with ``--trim-*``, or
   ``--layer DIR``), and the split's own copy removed.

Needs bertembed, onnx, onnxruntime, tokenizers and numpy: the server's own
packages plus ``onnx``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from bertembed import BertEmbeddings
from bertembed.onnx import split_model

from ..server.pipeline import SentenceEmbedder
from . import CHECK_ATOL, CHECK_TEXTS
from .fusion import optimize_encoder, save_encoder
from .int8 import ENCODER_DTYPES, calibration_feeds, check_cosine, quantize_encoder
from .layer import Trim, check_files, save_layer
from .manifest import (
    ENCODER_FILE,
    ENCODER_INPUTS,
    ENCODER_OUTPUT,
    TOKENIZER_DIR,
    new_service_config,
    write_service_config,
)
from .model_config import SentenceConfig, UnsupportedModel, model_name, read_sentence_config
from .tokens import export_tokenizer, pad_token_of, place_tokenizer

#: Where the split's whole layer is kept while the artifact is checked (then removed).
SPLIT_DIR = ".split"
OUTPUT = ENCODER_OUTPUT
#: Pooling modes this script appends as ONNX nodes.
POOLING = ("cls", "max", "mean", "mean_sqrt_len_tokens")


def pool_numpy(modes: Sequence[str], normalize: bool, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """sentence-transformers' pooling (right padding) and normalisation, in NumPy (the check's reference).

    Examples
    --------
    >>> h = np.arange(12.0).reshape(1, 3, 4)
    >>> pool_numpy(["mean"], False, h, np.array([[1, 1, 0]])).tolist()
    [[2.0, 3.0, 4.0, 5.0]]
    """
    m = mask.astype(hidden.dtype)[:, :, None]
    parts = []
    for mode in modes:
        if mode == "cls":
            parts.append(hidden[:, 0])
        elif mode == "max":
            parts.append(np.where(m == 0, -np.inf, hidden).max(axis=1))
        else:
            count = np.maximum(m.sum(axis=1), 1e-9)
            total = (hidden * m).sum(axis=1)
            parts.append(total / (count if mode == "mean" else np.sqrt(count)))
    out = np.concatenate(parts, axis=-1)
    if normalize:
        out = out / np.maximum(np.linalg.norm(out, axis=-1, keepdims=True), 1e-12)
    return out


def _reduce(op: str, x: str, axis: int, out: str, opset: int, keepdims: int = 0) -> list[onnx.NodeProto]:
    """A Reduce node over one axis, axes as an attribute or an input as the opset wants."""
    axes_as_input = opset >= (13 if op == "ReduceSum" else 18)
    if axes_as_input:
        return [
            helper.make_node(
                "Constant", [], [f"{out}_axes"], value=numpy_helper.from_array(np.array([axis], np.int64))
            ),
            helper.make_node(op, [x, f"{out}_axes"], [out], keepdims=keepdims),
        ]
    return [helper.make_node(op, [x], [out], axes=[axis], keepdims=keepdims)]


def _const(name: str, value: float) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.array(value, np.float32)))


def _hidden_output(model: onnx.ModelProto) -> str:
    outputs = [o.name for o in model.graph.output]
    for name in ("last_hidden_state", "token_embeddings"):
        if name in outputs:
            return name
    if len(outputs) == 1:
        return outputs[0]
    raise UnsupportedModel(f"the ONNX model has outputs {outputs}; none is last_hidden_state or token_embeddings")


def append_pooling(encoder: onnx.ModelProto, config: SentenceConfig, normalize: bool = False) -> onnx.ModelProto:
    """The split encoder with pooling (and, with ``normalize``, L2 normalisation) after it:
    ``embeddings``, mask -> ``sentence_embedding``. The service's encoder leaves normalisation to the pipeline."""
    g = encoder.graph
    names = [i.name for i in g.input]
    if names != ["inputs_embeds", "attention_mask"]:
        raise UnsupportedModel(f"the encoder takes {names}; the service feeds inputs_embeds and attention_mask only")
    unknown = [m for m in config.pooling if m not in POOLING]
    if unknown:
        raise UnsupportedModel(f"pooling mode(s) {unknown} not supported on this path (supported: {POOLING})")
    opset = next(o.version for o in encoder.opset_import if o.domain in ("", "ai.onnx"))
    hidden = _hidden_output(encoder)
    g.input[0].name = ENCODER_INPUTS[0]
    for node in g.node:
        for k, name in enumerate(node.input):
            if name == "inputs_embeds":
                node.input[k] = ENCODER_INPUTS[0]
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["pool_mask"], to=TensorProto.FLOAT),
        helper.make_node("Constant", [], ["pool_axis2"], value=numpy_helper.from_array(np.array([2], np.int64))),
        helper.make_node("Unsqueeze", ["pool_mask", "pool_axis2"], ["pool_mask3"]),
        _const("pool_tiny", 1e-9),
        _const("pool_eps", 1e-12),
    ]
    if "max" in config.pooling:
        nodes += [_const("pool_zero", 0.0), _const("pool_neg_inf", -np.inf)]
    if not normalize:
        nodes = [n for n in nodes if n.output[0] != "pool_eps"]
    parts = []
    for k, mode in enumerate(config.pooling):
        out = f"pool_{k}_{mode}"
        if mode == "cls":
            nodes.append(
                helper.make_node("Constant", [], [f"{out}_index"], value=numpy_helper.from_array(np.array(0, np.int64)))
            )
            nodes.append(helper.make_node("Gather", [hidden, f"{out}_index"], [out], axis=1))
        elif mode == "max":
            nodes += [
                helper.make_node("Equal", ["pool_mask3", "pool_zero"], [f"{out}_pad"]),
                helper.make_node("Where", [f"{out}_pad", "pool_neg_inf", hidden], [f"{out}_masked"]),
                *_reduce("ReduceMax", f"{out}_masked", 1, out, opset),
            ]
        else:
            nodes += [
                helper.make_node("Mul", [hidden, "pool_mask3"], [f"{out}_weighted"]),
                *_reduce("ReduceSum", f"{out}_weighted", 1, f"{out}_total", opset),
                *_reduce("ReduceSum", "pool_mask3", 1, f"{out}_count0", opset),
                helper.make_node("Max", [f"{out}_count0", "pool_tiny"], [f"{out}_count"]),
            ]
            if mode == "mean_sqrt_len_tokens":
                nodes.append(helper.make_node("Sqrt", [f"{out}_count"], [f"{out}_sqrt"]))
                nodes.append(helper.make_node("Div", [f"{out}_total", f"{out}_sqrt"], [out]))
            else:
                nodes.append(helper.make_node("Div", [f"{out}_total", f"{out}_count"], [out]))
        parts.append(out)
    pooled = "pool_concat" if normalize else OUTPUT
    nodes.append(helper.make_node("Concat", parts, [pooled], axis=-1))
    if normalize:
        nodes += [
            helper.make_node("Mul", [pooled, pooled], ["norm_sq"]),
            *_reduce("ReduceSum", "norm_sq", -1, "norm_sum", opset, keepdims=1),
            helper.make_node("Sqrt", ["norm_sum"], ["norm"]),
            helper.make_node("Max", ["norm", "pool_eps"], ["norm_clamped"]),
            helper.make_node("Div", [pooled, "norm_clamped"], [OUTPUT]),
        ]
    g.node.extend(nodes)
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", config.dimension]))
    return encoder


def _check(
    whole_path: Path, config: SentenceConfig, out_dir: Path, pad_id: int, pad_token: str, *, cosine: bool = False
) -> float:
    """Largest difference between the service's pipeline and the whole ONNX model + NumPy pooling
    (with ``cosine``: the least cosine between them, raising below :data:`.int8.COSINE_MIN`)."""
    tokenizer = export_tokenizer(config, pad_id, pad_token)
    whole = ort.InferenceSession(str(whole_path), providers=["CPUExecutionProvider"])
    embedder = SentenceEmbedder(out_dir)
    embedder.start()
    encodings = tokenizer.encode_batch(list(CHECK_TEXTS))
    ids = np.array([e.ids for e in encodings], np.int64)
    mask = np.array([e.attention_mask for e in encodings], np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    names = [i.name for i in whole.get_inputs()]
    outputs = [o.name for o in whole.get_outputs()]
    hidden_name = next((n for n in ("last_hidden_state", "token_embeddings") if n in outputs), outputs[0])
    hidden = whole.run([hidden_name], {n: feeds[n] for n in names})[0]
    want = pool_numpy(config.pooling, config.normalize, hidden, mask)
    got, _ = embedder.embed(list(CHECK_TEXTS))
    if cosine:
        return check_cosine(got, want, "the whole ONNX model")
    return float(np.abs(got - want).max())


def build(
    model_dir: str | Path,
    out_dir: str | Path,
    onnx_path: str | Path | None = None,
    *,
    name: str | None = None,
    matryoshka: Sequence[int] = (),
    trim: Trim | None = None,
    layer: str | Path | None = None,
    table_dtype: str | None = None,
    encoder_dtype: str = "float32",
) -> Path:
    """Write the artifact ``out_dir`` from a whole-model ONNX file; return the path of service.json.

    The check runs on the split's whole float32 layer; the layer the
    workers map is then saved as :func:`.layer.save_layer` does (converted
    to `table_dtype`, trimmed as `trim` says, or `layer` instead), and the
    split's own copy is removed.

    Raises
    ------
    UnsupportedModel
        The sentence-transformers pipeline is not one the server reproduces.
    ValueError
        The ONNX graph cannot be split (the message names the node), or the check failed (with
        ``encoder_dtype="int8"``, :mod:`.int8`: the float32 encoder passes CHECK_ATOL first, then the
        int8 one must reach cosine :data:`.int8.COSINE_MIN` on every check text).
    """
    if encoder_dtype not in ENCODER_DTYPES:
        raise ValueError(f"encoder_dtype must be one of {ENCODER_DTYPES}, got {encoder_dtype!r}")
    check_files(trim, layer)
    model_dir, out_dir = Path(model_dir), Path(out_dir)
    service_name = name or model_name(model_dir)
    whole_path = Path(onnx_path) if onnx_path is not None else model_dir / "onnx" / "model.onnx"
    if not whole_path.is_file():
        raise FileNotFoundError(f"{whole_path}: no such file (give the whole-model ONNX file with --onnx)")
    config = read_sentence_config(model_dir)
    transformer = Path(config.transformer_dir)
    split_dir = out_dir / SPLIT_DIR
    result = split_model(whole_path, split_dir)
    encoder = append_pooling(onnx.load(str(result.encoder)), config)
    with open(transformer / "config.json", encoding="utf-8") as fh:
        model_config = json.load(fh)
    heads = model_config.get("num_attention_heads", model_config.get("n_heads"))
    if heads:
        encoder, fusions = optimize_encoder(encoder, num_heads=int(heads), hidden_size=config.hidden_size)
    else:
        fusions = {"fused": {}, "scale_rewrites": 0}
    for file in ("encoder.onnx", "encoder.onnx.data"):
        (split_dir / file).unlink(missing_ok=True)
    external = save_encoder(encoder, out_dir / ENCODER_FILE)
    place_tokenizer(transformer, out_dir / TOKENIZER_DIR)
    pad_id, pad_token = pad_token_of(transformer / "tokenizer.json", model_config)
    service = new_service_config(
        name=service_name,
        model_type=result.model_type,
        source=whole_path,
        sentence=config.to_json(),
        dimension=config.dimension,
        matryoshka=matryoshka,
        pad_id=pad_id,
        pad_token=pad_token,
        input_width=BertEmbeddings.from_pretrained(split_dir).hidden_size,
        opset=_opset(encoder),
        external=external,
        optimizer=fusions,
        built_with={"onnx": onnx.__version__, "onnxruntime": ort.__version__},
        split={
            "model_type": result.model_type,
            "position_rule": result.position_rule,
            "layer_norm": result.layer_norm,
            "max_abs_diff_layer_vs_graph": result.max_difference,
        },
    )
    service["embeddings"] = {"dir": SPLIT_DIR}  # the split's whole layer, for the check; replaced below
    path = write_service_config(out_dir, service)
    try:
        diff = _check(whole_path, config, out_dir, pad_id, pad_token)
        if not diff <= CHECK_ATOL:
            raise ValueError(
                f"the artifact's pipeline differs from the whole ONNX model by {diff:.3g} "
                f"(> {CHECK_ATOL}); {path} not written"
            )
        service["encoder"]["max_abs_diff_vs_whole_model"] = diff
        service["encoder"]["dtype"] = encoder_dtype
        if encoder_dtype == "int8":
            layer32 = BertEmbeddings.from_pretrained(split_dir, table_dtype="float32")
            feeds = calibration_feeds(export_tokenizer(config, pad_id, pad_token), layer32)
            quantized, info = quantize_encoder(encoder, feeds)
            save_encoder(quantized, out_dir / ENCODER_FILE)
            service["encoder"]["quantization"] = info
            least = _check(whole_path, config, out_dir, pad_id, pad_token, cosine=True)
            service["encoder"]["cosine_min_vs_whole_model"] = least
        source = layer if layer is not None else split_dir
        save_layer(out_dir, service, source, table_dtype=table_dtype, trim=trim)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(split_dir, ignore_errors=True)
    return write_service_config(out_dir, service)


def _opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset."""
    return next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
