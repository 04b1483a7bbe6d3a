"""``bertembed export MODEL_DIR OUT_DIR``: one self-contained artifact directory for ``bertembed serve``.

From a sentence-transformers (or plain Hugging Face) model directory the
encoder is exported with torch (:mod:`bertembed.serve.artifact.from_torch`);
with ``--onnx [MODEL.onnx]`` it is cut out of a whole-model ONNX file
instead, with no torch at any step
(:mod:`bertembed.serve.artifact.from_onnx`). Either way the embedding layer
the workers map is saved beside it: converted (``--table-dtype``), trimmed
(``--trim-*``) or given (``--layer``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from .common import CLIError, positive_int

if TYPE_CHECKING:
    from ..serve.artifact.layer import Trim


def _dims(text: str) -> list[int]:
    from ..serve.artifact.model_config import parse_dims

    try:
        return parse_dims(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _quiet_libraries(verbose: bool) -> None:
    if verbose:
        return
    import logging

    logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # no notes about torchvision ops
    try:
        import onnxruntime as ort

        ort.set_default_logger_severity(3)
    except ImportError:  # pragma: no cover - the serve extra brings it
        pass


def trim_of(args: argparse.Namespace) -> Trim | None:
    """The :class:`~bertembed.serve.artifact.layer.Trim` the ``--trim-*`` options ask for (None: keep every row)."""
    from ..serve.artifact.layer import Trim

    if not (args.trim_corpus or args.trim_ids or args.trim_scripts):
        return None
    scripts = tuple(s for group in args.trim_scripts or () for s in group.split(",") if s.strip())
    return Trim(
        tuple(args.trim_corpus or ()), args.trim_ids, scripts, args.trim_min_count, args.unknown, args.tokenizer
    )


def cmd_export(args: argparse.Namespace) -> int:
    """Build the artifact, then say what was written."""
    try:
        from ..serve.artifact.model_config import UnsupportedModel

        trim = trim_of(args)
    except ImportError as exc:
        raise CLIError(f"{exc}; install the server's packages: pip install 'bertembed[serve]'") from None
    _quiet_libraries(args.verbose)
    common = {
        "name": args.name,
        "matryoshka": args.matryoshka_dims,
        "trim": trim,
        "layer": args.layer,
        "table_dtype": args.table_dtype,
        "encoder_dtype": args.encoder_dtype,
    }
    try:
        if args.onnx is not None:
            from ..serve.artifact import from_onnx

            onnx_file = None if args.onnx == "" else args.onnx
            path = from_onnx.build(args.model_dir, args.out_dir, onnx_file, **common)
        else:
            try:
                from ..serve.artifact import from_torch
            except ImportError as exc:
                raise CLIError(
                    f"{exc}: exporting from a model directory needs torch "
                    "(pip install 'bertembed[export]'), or give --onnx MODEL.onnx"
                ) from None
            path = from_torch.export(args.model_dir, args.out_dir, verbose=args.verbose, **common)
    except UnsupportedModel as exc:
        raise CLIError(f"not supported: {exc}") from None
    _report(path)
    return 0


def _report(path: Path) -> None:
    from ..serve.artifact.int8 import COSINE_MIN
    from ..serve.artifact.layer import summary, tokenizer_summary

    service = json.loads(path.read_text(encoding="utf-8"))
    out = path.parent
    sentence, encoder = service["sentence"], service["encoder"]
    fused = ", ".join(f"{n} {op}" for op, n in encoder["optimizer"]["fused"].items()) or "nothing fused"
    check = encoder.get("max_abs_diff_vs_torch", encoder.get("max_abs_diff_vs_whole_model"))
    cosine = encoder.get("cosine_min_vs_torch", encoder.get("cosine_min_vs_whole_model"))
    if cosine is None:
        checked = f"max |artifact - reference| = {check:.2g}"
    else:  # int8: the float32 encoder passed the max-difference check, the int8 one is checked by cosine
        checked = (
            f"int8; float32 before quantisation: max |artifact - reference| = {check:.2g}; int8: checked by "
            f"cosine instead (a max-difference check cannot hold for int8), least cosine to the reference "
            f"{cosine:.4f} (>= {COSINE_MIN} required)"
        )
    print(
        f"wrote {out / encoder['file']} (model_type {service.get('model_type', '?')}, opset {encoder['opset']}, "
        f"{fused}; {checked})"
    )
    if encoder.get("external_data"):
        print(f"wrote {out / encoder['external_data']} (the encoder's weights: keep it beside {encoder['file']})")
    print(
        f"pooling {'+'.join(sentence['pooling'])}, normalize {sentence['normalize']}, "
        f"max_seq_length {sentence['max_seq_length']}, dimension {sentence['dimension']}"
    )
    if "embeddings" in service:
        print(summary(service["embeddings"], out))
    line = tokenizer_summary(service.get("tokenizer") or {})
    if line:
        print(line)
    total = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"artifact: {out} ({total / 2**20:.1f} MiB); serve it with: bertembed serve {out}")


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``export`` on the subcommand parsers ``sub``."""
    from ..serve.artifact import ENCODER_DTYPES, TABLE_DTYPES, TOKENIZER_CHOICES, UNKNOWN_RULES

    p = sub.add_parser(
        "export",
        help="build a server artifact from a model directory or a whole-model ONNX file (extra 'serve')",
        description="Write OUT_DIR for 'bertembed serve': encoder.onnx (the transformer layers, fused, and "
        "the model's pooling), the embedding layer the workers map, the tokenizer and service.json. From "
        "MODEL_DIR (sentence-transformers or Hugging Face) the encoder is exported with torch; with --onnx "
        "it is cut out of a whole-model ONNX file with no torch. The artifact is checked against the "
        "model before it is written.",
    )
    p.add_argument("model_dir", metavar="MODEL_DIR", help="sentence-transformers or Hugging Face model directory")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the artifact directory (created; its files replaced)")
    p.add_argument("--name", help="the model name the server answers to (default: MODEL_DIR's name)")
    p.add_argument(
        "--onnx",
        nargs="?",
        const="",
        metavar="MODEL.onnx",
        help="build from this whole-model ONNX file, without torch (default file: MODEL_DIR/onnx/model.onnx)",
    )
    p.add_argument(
        "--table-dtype",
        choices=TABLE_DTYPES,
        help="store the embedding tables in this dtype (default: as the checkpoint has them, float32)",
    )
    p.add_argument(
        "--encoder-dtype",
        choices=ENCODER_DTYPES,
        default="float32",
        help="the encoder's weights: float32 (default) or int8 (ONNX Runtime's dynamic quantisation, "
        "smoothed; checked by cosine to the model, at least 0.99 on every check text, instead of the "
        "float32 check's largest difference)",
    )
    p.add_argument(
        "--layer",
        metavar="SAVED_LAYER",
        help="map this saved layer (e.g. the OUT_DIR of 'bertembed trim') instead of the model's",
    )
    p.add_argument("--trim-corpus", nargs="+", metavar="FILE", help="keep the token rows of these texts")
    p.add_argument("--trim-ids", metavar="FILE", help="keep these token ids (.npy, or text)")
    p.add_argument(
        "--trim-scripts", nargs="+", metavar="NAMES", help="keep every token of these Unicode scripts (Latin,...)"
    )
    p.add_argument(
        "--trim-min-count", type=positive_int, default=1, metavar="N", help="keep a corpus token seen N times"
    )
    p.add_argument(
        "--unknown",
        choices=UNKNOWN_RULES,
        default="error",
        help="a token the trimmed layer does not keep: the request is refused naming it (error, default) or "
        "the token reads the unknown token's row (unk)",
    )
    p.add_argument(
        "--tokenizer",
        choices=TOKENIZER_CHOICES,
        default="reduced",
        help="with --unknown error, keep only the tokenizer's pieces that can matter (reduced, default; exact, "
        "checked on the corpus; Unigram tokenizers such as XLM-R's: a fraction of their memory) or every piece "
        "(full: a request may then ask for the rule 'unk')",
    )
    p.add_argument(
        "--matryoshka-dims",
        type=_dims,
        default=[],
        metavar="D1,D2,...",
        help="the reduced sizes the model was trained for (Matryoshka loss): only then does the server "
        "accept a request's 'dimensions'",
    )
    p.add_argument("--verbose", action="store_true", help="show the libraries' own load reports and warnings")
    p.set_defaults(func=cmd_export)
