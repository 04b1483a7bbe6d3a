"""``bertembed convert``: a checkpoint's embedding layer converted once, saved to be mapped.

``bertembed convert MODEL_DIR OUT_DIR --table-dtype int8`` loads the
embedding layer of a checkpoint (mapped, as ``from_pretrained`` does),
converts its tables in the kernel (``int8``: the token table, quantised per
row; the float dtypes: every table), and writes the result as
``BertEmbeddings.save_pretrained`` does: ``OUT_DIR/config.json`` and
``OUT_DIR/model.safetensors``. ``BertEmbeddings.from_pretrained(OUT_DIR)``
then maps the converted tables in every process, with no conversion and no
private copy. A progress bar on stderr follows the conversion and the write.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from .._checkpoints import save
from .._core import dtypes
from .._core.tables import convert_tables, converted_by
from .._layer import BertEmbeddings, stored_tables
from .common import CLIError, ProgressBar, positive_int

#: What ``--table-dtype`` accepts (the dtype registry's conversions).
TABLE_DTYPES = dtypes.CONVERSIONS

MIB = 1 << 20


def _check_out(model: Path, out: Path) -> None:
    """Refuse to write over the source, over a directory that is not a saved layer, or (Windows) over a mapped layer."""
    if out.exists() and not out.is_dir():
        raise CLIError(f"OUT_DIR {out}: not a directory")
    source = model if model.is_dir() else model.parent
    if out.exists() and source.exists() and os.path.samefile(out, source):
        raise CLIError(f"OUT_DIR {out}: is the model's own directory (its config.json and weights would be replaced)")
    config = out / save.CONFIG_NAME
    if config.is_file():
        try:
            saved = save.is_saved(json.loads(config.read_text(encoding="utf-8")))
        except (OSError, ValueError, AttributeError):
            saved = False
        if not saved:
            raise CLIError(
                f"OUT_DIR {out}: holds a config.json that is not a saved bertembed layer; not overwriting it"
            )
    save.check_destination(out)  # (Windows: a live layer maps OUT_DIR's weights; before converting anything)


def cmd_convert(args: argparse.Namespace) -> int:
    """Load, convert, save; print what was written."""
    model, out = Path(args.model_dir).expanduser(), Path(args.out_dir).expanduser()
    _check_out(model, out)
    layer = BertEmbeddings.from_pretrained(model)
    tables = stored_tables(layer)
    todo = converted_by(tables, args.table_dtype)
    # One bar over the rows of every table converted, one table after the other.
    state: dict[str, Any] = {"label": "", "base": 0, "total": 0}
    with ProgressBar(sum(t.rows for t in todo), "converting", unit="rows", enabled=not args.quiet) as bar:

        def progress(done: int, total: int, label: str) -> None:
            if label != state["label"]:
                state.update(label=label, base=state["base"] + state["total"])
            state["total"] = total
            bar.update(state["base"] + done, label=label)

        new = convert_tables(tables, args.table_dtype, num_threads=args.threads or 0, progress=progress)
    total_bytes = new.nbytes
    with ProgressBar(
        total_bytes // MIB or 1, f"writing {save.WEIGHTS_NAME}", unit="MiB", enabled=not args.quiet
    ) as bar:
        save.save(
            out,
            new,
            layer.dtype,
            layer.position_rule,
            layer.zero_masked_rows,
            layer.model_type,
            progress=lambda done, total, label: bar.update(done // MIB, total // MIB or 1, label),
        )
    size = (out / save.WEIGHTS_NAME).stat().st_size
    print(
        f"{out}: {layer.model_type} embeddings, token table {new.tok.dtype_name} "
        f"({new.tok.rows} x {new.tok.hidden}), {size / MIB:.1f} MiB in {save.WEIGHTS_NAME} "
        f"(was {tables.nbytes / MIB:.1f} MiB of tables)"
    )
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``convert`` on the subcommand parsers ``sub``."""
    convert = sub.add_parser(
        "convert",
        help="convert a checkpoint's embedding tables (int8, bfloat16...) and save them to be mapped",
        description="Load the embedding layer of MODEL_DIR, store its tables as --table-dtype "
        "(int8: the token table quantised per row; a float dtype: every table) and save it in OUT_DIR "
        "(config.json and model.safetensors), for BertEmbeddings.from_pretrained(OUT_DIR) to map.",
    )
    convert.add_argument(
        "model_dir", metavar="MODEL_DIR", help="a Hugging Face model directory (or weights file), or a saved layer"
    )
    convert.add_argument("out_dir", metavar="OUT_DIR", help="where to save the converted layer (created)")
    convert.add_argument("--table-dtype", required=True, choices=TABLE_DTYPES, help="how to store the tables")
    convert.add_argument(
        "--threads", type=positive_int, default=None, metavar="N", help="threads for the conversion (default: all)"
    )
    convert.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    convert.set_defaults(func=cmd_convert)
