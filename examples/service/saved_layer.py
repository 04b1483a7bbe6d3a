"""The embedding layer an export saves for the workers to map: converted, trimmed, or given.

Both builds (``export_encoder.py`` and ``from_onnx.py``) take the same options
(:func:`add_arguments`):

``--table-dtype {float32,bfloat16,int8}`` (``export_encoder.py`` only)
    the tables converted once, at export time;
``--trim-corpus FILE...``, ``--trim-ids FILE``, ``--trim-scripts Latin,...``, ``--trim-min-count N``
    only the token rows these choose are kept (:func:`bertembed.trim.select`:
    a union of the ids the model's tokenizer gives for the corpus, the listed
    ids and every token of the scripts; the special tokens and the tokens of
    the model's prompts always);
``--trim-unknown {error,unk}``
    what a trimmed-away token gets: the service refuses the request with a
    422 naming the token (``error``, the default), or the row of the
    tokenizer's unknown token (``unk``);
``--layer DIR``
    a layer saved beforehand (``bertembed trim MODEL_DIR DIR ...`` writes
    one) instead of the export's checkpoint; the options above then apply to
    it.

:func:`save_layer` writes the result with ``save_pretrained`` into
``OUT_DIR/embeddings/`` and adds an ``embeddings`` entry to ``service.json``
naming it; the workers map that directory instead of the checkpoint.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pipeline import SERVICE_FILE, load_tokenizer

from bertembed import BertEmbeddings
from bertembed import trim as choosing

#: Where the saved layer goes (relative to OUT_DIR).
EMBEDDINGS_DIR = "embeddings"
#: Table dtypes ``--table-dtype`` accepts.
TABLE_DTYPES = ("float32", "bfloat16", "int8")
#: What ``--trim-unknown`` accepts.
UNKNOWN_RULES = ("error", "unk")


@dataclass(frozen=True)
class Trim:
    """What to keep of the token table (the ``--trim-*`` options); see :func:`bertembed.trim.select`."""

    corpus: tuple[str, ...] = ()
    ids: str | None = None
    scripts: tuple[str, ...] = field(default=())
    min_count: int = 1
    unknown: str = "error"

    def __post_init__(self) -> None:
        if not (self.corpus or self.ids or self.scripts):
            raise ValueError("nothing to keep: give a corpus, an id file or scripts")
        if self.unknown not in UNKNOWN_RULES:
            raise ValueError(f"unknown must be one of {UNKNOWN_RULES}, got {self.unknown!r}")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser, *, table_dtype: bool) -> None:
    """The layer options on an export's command line (``--table-dtype`` only where asked for)."""
    if table_dtype:
        parser.add_argument(
            "--table-dtype",
            choices=TABLE_DTYPES,
            help="also save the embedding layer with its tables converted to this dtype "
            "(OUT_DIR/embeddings/), for the workers to map (default: map model.safetensors)",
        )
    parser.add_argument(
        "--layer",
        metavar="DIR",
        help="map this saved layer (e.g. the OUT_DIR of 'bertembed trim') instead of the checkpoint's; "
        "copied into OUT_DIR/embeddings/",
    )
    parser.add_argument("--trim-corpus", nargs="+", metavar="FILE", help="keep the token rows of these texts")
    parser.add_argument("--trim-ids", metavar="FILE", help="keep these token ids (.npy, or text)")
    parser.add_argument(
        "--trim-scripts", nargs="+", metavar="NAMES", help="keep every token of these Unicode scripts (Latin,...)"
    )
    parser.add_argument(
        "--trim-min-count", type=_positive, default=1, metavar="N", help="keep a corpus token seen N times (default 1)"
    )
    parser.add_argument(
        "--trim-unknown",
        choices=UNKNOWN_RULES,
        default="error",
        help="a trimmed-away token: a 422 naming it (error, default) or the unknown token's row (unk)",
    )


def trim_of(args: argparse.Namespace) -> Trim | None:
    """The :class:`Trim` the parsed ``--trim-*`` options ask for (None: keep every row)."""
    if not (args.trim_corpus or args.trim_ids or args.trim_scripts):
        return None
    scripts = tuple(s for group in args.trim_scripts or () for s in group.split(",") if s.strip())
    return Trim(tuple(args.trim_corpus or ()), args.trim_ids, scripts, args.trim_min_count, args.trim_unknown)


def prompt_ids(service: dict[str, Any], tokenizer_path: Path) -> np.ndarray:
    """The ids of the model's prompts as the service tokenizes them (kept by every trim)."""
    sentence = service["sentence"]
    prompts = [p for p in (sentence.get("prompts") or {}).values() if p]
    if not prompts:
        return np.zeros(0, np.int64)
    tokenizer = load_tokenizer(tokenizer_path, do_lower_case=bool(sentence["do_lower_case"]))
    ids = [i for e in tokenizer.encode_batch(prompts, add_special_tokens=False) for i in e.ids]
    return np.asarray(ids, np.int64)


def check_files(trim: Trim | None, layer: str | os.PathLike[str] | None) -> None:
    """Refuse, before an export's slow steps, a corpus or id file or a layer directory that is not there."""
    files = [*(trim.corpus if trim else ()), *([trim.ids] if trim and trim.ids else [])]
    for name in files:
        if not Path(name).expanduser().is_file():
            raise FileNotFoundError(f"{name}: no such file (a --trim-corpus or --trim-ids file)")
    if layer is not None and not (Path(layer).expanduser() / "config.json").is_file():
        raise FileNotFoundError(f"{layer}: no config.json; --layer takes a saved layer (bertembed trim's OUT_DIR)")


def trimmed(
    layer: BertEmbeddings, tokenizer_path: Path, trim: Trim, extra_ids: Any = (), *, do_lower_case: bool = False
) -> BertEmbeddings:
    """`layer` keeping the rows `trim` chooses (with `tokenizer_path`'s tokenizer) and `extra_ids`.

    With `do_lower_case` (sentence-transformers' setting) the corpus is
    tokenized as the service tokenizes it: lowercased first.

    Raises
    ------
    ValueError
        ``unknown="unk"`` and the tokenizer has no unknown token; an id
        beyond the layer's vocabulary.
    """
    tokenizer = choosing.load_tokenizer(tokenizer_path)
    if do_lower_case:
        tokenizer = dataclasses.replace(tokenizer, tokenizer=load_tokenizer(tokenizer_path, do_lower_case=True))
    listed = None if trim.ids is None else choosing.read_ids(trim.ids)
    extra = np.asarray(extra_ids, np.int64).reshape(-1)
    if extra.size:
        listed = extra if listed is None else np.concatenate([listed, extra])
    choice = choosing.select(tokenizer, corpus=trim.corpus, min_count=trim.min_count, ids=listed, scripts=trim.scripts)
    unknown: str | int = "error"
    if trim.unknown == "unk":
        if tokenizer.unk_id is None:
            raise ValueError(f"{tokenizer_path} has no unknown token: --trim-unknown unk cannot be used")
        unknown = int(tokenizer.unk_id)
    beyond = choice.ids[choice.ids >= layer.vocab_size]
    if beyond.size:
        raise ValueError(f"id {int(beyond[0])} is beyond the layer's vocabulary of {layer.vocab_size} ids")
    return layer.trimmed(choice.ids, unknown=unknown)


def describe(layer: BertEmbeddings) -> dict[str, Any]:
    """What ``service.json``'s ``embeddings`` entry and the service's ``/info`` say of a layer."""
    return {
        "table_dtype": layer.table_dtype,
        "bytes": layer.nbytes,
        "trimmed": layer.is_trimmed,
        "vocab_size": layer.vocab_size,
        "kept_rows": layer.kept_rows,
        "unknown": layer.unknown,
    }


def save_layer(
    out_dir: str | os.PathLike[str],
    *,
    table_dtype: str | None = None,
    trim: Trim | None = None,
    layer: str | os.PathLike[str] | None = None,
) -> dict[str, Any] | None:
    """Save the layer the workers map into ``out_dir/embeddings`` and name it in ``service.json``.

    The layer is `layer` (a saved layer directory) or the export's
    checkpoint, loaded with `table_dtype` (converted), then trimmed as `trim`
    says (converting and trimming commute). With none of the three, nothing
    is written: the workers map the checkpoint.

    Returns
    -------
    dict or None
        The ``embeddings`` entry written into service.json (directory, table
        dtype, bytes of the tables, and whether, how far and with what
        unknown rule the layer is trimmed).

    Examples
    --------
    >>> save_layer("out/", trim=Trim(corpus=("texts.txt",)))["kept_rows"]  # doctest: +SKIP
    1234
    """
    if table_dtype is not None and table_dtype not in TABLE_DTYPES:
        raise ValueError(f"table_dtype must be one of {', '.join(TABLE_DTYPES)}, got {table_dtype!r}")
    if table_dtype is None and trim is None and layer is None:
        return None
    check_files(trim, layer)
    out_dir = Path(out_dir)
    path = out_dir / SERVICE_FILE
    service = json.loads(path.read_text(encoding="utf-8"))
    transformer = out_dir / service["sentence"]["transformer_dir"]
    source = Path(layer).expanduser() if layer is not None else transformer
    if source.resolve() == (out_dir / EMBEDDINGS_DIR).resolve():
        raise ValueError(f"{source}: the layer to map is OUT_DIR/{EMBEDDINGS_DIR} itself; give another directory")
    loaded = BertEmbeddings.from_pretrained(source, table_dtype=table_dtype)
    if trim is not None:
        tokenizer = transformer / "tokenizer.json"
        lower = bool(service["sentence"]["do_lower_case"])
        loaded = trimmed(loaded, tokenizer, trim, prompt_ids(service, tokenizer), do_lower_case=lower)
    loaded.save_pretrained(out_dir / EMBEDDINGS_DIR)
    entry: dict[str, Any] = {"dir": EMBEDDINGS_DIR, **describe(loaded)}
    service["embeddings"] = entry
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(service, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return entry


def summary(entry: dict[str, Any], out_dir: Path) -> str:
    """One line for an export's output: where the layer went and what it holds."""
    line = f"wrote {out_dir / entry['dir']}/ ({entry['table_dtype']} tables, {entry['bytes'] / 2**20:.1f} MiB"
    if entry.get("trimmed"):
        line += (
            f"; trimmed to {entry['kept_rows']:,} of {entry['vocab_size']:,} token rows, "
            f"unknown tokens: {'a 422' if entry['unknown'] == 'error' else 'the row of id ' + str(entry['unknown'])}"
        )
    return line + ")"
