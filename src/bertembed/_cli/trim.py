"""``bertembed trim``: a checkpoint's embedding layer with only the token rows a service needs.

``bertembed trim MODEL_DIR OUT_DIR --corpus en.txt de.txt --min-count 2``
loads the embedding layer of a checkpoint (or a saved layer, e.g. the layer
directory ``split-onnx`` wrote), chooses the ids to keep (:mod:`bertembed.trim`:
the ids the model's ``tokenizer.json`` gives for the corpus, an explicit id
list, every token of given Unicode scripts, or a union; the special tokens
always), trims the token table to those rows (optionally storing them as
int8 or bfloat16) and saves the result as ``save_pretrained`` does, with the
id map, for ``BertEmbeddings.from_pretrained(OUT_DIR)`` to map. It prints
the rows kept, the bytes before and after, the share of corpus tokens
covered and, with ``--held-out``, the share of held-out tokens and texts
covered: how often a service would meet the unknown rule.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from .. import trim as choosing
from .._checkpoints import save
from .._core.tables import convert_tables, converted_by
from .._layer import BertEmbeddings, save_layer, stored_tables
from .common import EXIT_USAGE, CLIError, ProgressBar, positive_int
from .convert import TABLE_DTYPES, _check_out

MIB = 1 << 20
KIB = 1 << 10


def _tokenizer_path(args: argparse.Namespace, model: Path) -> Path | None:
    if args.tokenizer is not None:
        return Path(args.tokenizer).expanduser()
    beside = (model if model.is_dir() else model.parent) / "tokenizer.json"
    return beside if beside.is_file() else None


def _unknown(args: argparse.Namespace, tok: Any) -> str | int:
    """``--unknown`` as :func:`bertembed.trim.trim_layer` takes it: ``"error"``, ``"unk"`` or an id."""
    value = args.unknown
    if value == "unk" and tok is None:
        if args.ids is not None:
            choosing.read_ids(args.ids)  # a malformed id file is the first thing to say
        raise CLIError("--unknown unk takes the unknown token of the model's tokenizer: give --tokenizer FILE")
    if value in ("error", "unk"):
        return value
    try:
        return int(value)
    except ValueError:
        raise CLIError(f"--unknown must be error, unk or a token id, got {value!r}", EXIT_USAGE) from None


def _bytes_bar(enabled: bool, label: str) -> ProgressBar:
    return ProgressBar(1, label, unit="KiB", enabled=enabled)


def _kib(n: int) -> int:
    return -(-n // KIB)


def _share(x: float) -> str:
    return f"{100 * x:.2f}%"


def cmd_trim(args: argparse.Namespace) -> int:
    """Choose, trim, (convert,) save; print what was kept and how well it covers."""
    if not (args.corpus or args.ids or args.scripts):
        raise CLIError("nothing to choose from: give --corpus FILE..., --ids FILE or --scripts NAMES", EXIT_USAGE)
    model, out = Path(args.model_dir).expanduser(), Path(args.out_dir).expanduser()
    if not model.exists():
        raise CLIError(f"{model}: no such model directory or file")
    _check_out(model, out)
    tok_path = _tokenizer_path(args, model)
    needs_tokenizer = bool(args.corpus or args.scripts or args.held_out)
    if needs_tokenizer and tok_path is None:
        raise CLIError(
            f"{model}: no tokenizer.json beside the model; --corpus, --scripts and --held-out read the "
            "model's tokenizer: give it with --tokenizer FILE"
        )
    tok = None if tok_path is None else choosing.load_tokenizer(tok_path)
    layer = BertEmbeddings.from_pretrained(model)
    show = not args.quiet

    def bar_progress(bar: ProgressBar) -> Any:
        return lambda done, total, label: bar.update(_kib(done), _kib(total))

    scripts = [s for group in args.scripts or () for s in group.split(",")]
    unknown = _unknown(args, tok)
    with _bytes_bar(show and bool(args.corpus), "counting corpus tokens") as bar:
        small, choice = choosing.trim_layer(
            layer,
            tok,
            corpus=args.corpus or (),
            min_count=args.min_count,
            ids=args.ids,
            scripts=scripts,
            unknown=unknown,
            progress=bar_progress(bar),
        )
    tables = stored_tables(small)
    if args.table_dtype is not None and args.table_dtype != tables.tok.dtype_name:
        converted = converted_by(tables, args.table_dtype)
        with ProgressBar(sum(t.rows for t in converted), "converting", unit="rows", enabled=show) as bar:
            label_now = [""]
            base_total = [0, 0]  # rows of the tables done before this one; rows of this one

            def progress(done: int, total: int, label: str) -> None:
                if label != label_now[0]:
                    label_now[0] = label
                    base_total[0] += base_total[1]
                base_total[1] = total
                bar.update(base_total[0] + done, label=label)

            tables = convert_tables(tables, args.table_dtype, num_threads=args.threads or 0, progress=progress)
    with _bytes_bar(show, f"writing {save.WEIGHTS_NAME}") as bar:
        save_layer(small, out, tables, progress=bar_progress(bar))
    size = (out / save.WEIGHTS_NAME).stat().st_size
    before = layer.nbytes
    print(
        f"{out}: {layer.model_type} embeddings trimmed to {small.kept_rows:,} of {small.vocab_size:,} token rows "
        f"({_share(small.kept_rows / max(small.vocab_size, 1))}), token table {tables.tok.dtype_name}"
    )
    print(
        f"  bytes: {before / MIB:.1f} MiB of tables before, {size / MIB:.1f} MiB in {save.WEIGHTS_NAME} after "
        f"({before / max(size, 1):.1f}x smaller)"
    )
    parts = []
    if args.corpus:
        parts.append(f"{choice.from_corpus:,} from the corpus (min count {args.min_count})")
    if args.ids is not None:
        parts.append(f"{choice.from_ids:,} listed")
    if scripts:
        parts.append(f"{choice.from_scripts:,} for the scripts {', '.join(scripts)}")
    parts.append(f"special tokens always ({', '.join(map(str, small.special_token_ids))})")
    print(f"  kept: {'; '.join(parts)}")
    if choice.corpus is not None:
        print(f"  corpus: {_share(choice.corpus.token_share)} of {choice.corpus.tokens:,} tokens covered")
    if args.held_out:
        with _bytes_bar(show, "measuring held-out coverage") as bar:
            cover = choosing.coverage(tok, small.kept_ids, args.held_out, progress=bar_progress(bar))
        rule = "an IndexError" if small.unknown == "error" else f"the row of id {small.unknown}"
        print(
            f"  held-out: {_share(cover.token_share)} of {cover.tokens:,} tokens covered; "
            f"{_share(cover.text_share)} of {cover.texts:,} texts fully covered "
            f"(embedded exactly as untrimmed; the others get {rule})"
        )
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``trim`` on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "trim",
        help="keep only the token rows a corpus, an id list or Unicode scripts need, and save the layer",
        description="Load the embedding layer of MODEL_DIR, keep only the token rows chosen by --corpus "
        "(ids the model's tokenizer.json gives for the texts, one per line), --ids and --scripts (a union; "
        "the special tokens always), and save it in OUT_DIR (config.json and model.safetensors with the id "
        "map) for BertEmbeddings.from_pretrained(OUT_DIR). Calls take the original ids; a text whose tokens "
        "are all kept is embedded exactly as by the full layer.",
    )
    p.add_argument("model_dir", metavar="MODEL_DIR", help="a Hugging Face model directory, or a saved layer")
    p.add_argument("out_dir", metavar="OUT_DIR", help="where to save the trimmed layer (created)")
    p.add_argument("--corpus", nargs="+", metavar="FILE", help="UTF-8 text files, one text per line")
    p.add_argument("--ids", metavar="FILE", help="token ids to keep: a .npy array, or text (ids by spaces/commas)")
    p.add_argument(
        "--scripts",
        nargs="+",
        metavar="NAMES",
        help="Unicode scripts (Latin,Cyrillic,...): keep every token a text in them can give (needs regex)",
    )
    p.add_argument("--tokenizer", metavar="FILE", help="the model's tokenizer.json (default: MODEL_DIR/tokenizer.json)")
    p.add_argument(
        "--min-count", type=positive_int, default=1, metavar="N", help="keep a corpus id seen at least N times"
    )
    p.add_argument(
        "--unknown",
        default="error",
        metavar="error|unk|ID",
        help="an id trimmed away: an error (default), or the row of the unknown token (unk) or of ID",
    )
    p.add_argument("--table-dtype", choices=TABLE_DTYPES, help="also store the tables as this dtype")
    p.add_argument("--held-out", nargs="+", metavar="FILE", help="texts to measure coverage on (one per line)")
    p.add_argument("--threads", type=positive_int, default=None, metavar="N", help="threads for the conversion")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_trim)
