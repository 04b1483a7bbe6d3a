"""The embedding layer an artifact holds for the workers to map: as stored, converted, trimmed, or given.

``bertembed export`` always saves it (:func:`save_layer`, with
``save_pretrained``) into ``OUT_DIR/embeddings/``: the artifact's only copy
of the tables, whatever the model directory held besides. Its options:

``--table-dtype {float32,bfloat16,int8}``
    the tables converted once, at export time;
``--trim-corpus FILE...``, ``--trim-ids FILE``, ``--trim-scripts Latin,...``, ``--trim-min-count N``
    only the token rows these choose are kept (:func:`bertembed.trim.select`:
    a union of the ids the model's tokenizer gives for the corpus, the listed
    ids and every token of the scripts; the special tokens and the tokens of
    the model's prompts always);
``--unknown {error,unk}``
    what a trimmed-away token gets: the request is refused naming every
    input that has one (``error``, the default), or the token reads the row
    of the tokenizer's unknown token (``unk``);
``--tokenizer {reduced,full}``
    with ``--unknown error``, a Unigram tokenizer is reduced to the pieces
    that can matter (:mod:`.reduced`, ``reduced``, the default, when it is
    exact); ``full`` keeps every piece, so that a request may ask for the
    rule ``unk``;
``--layer DIR``
    a layer saved beforehand (``bertembed trim MODEL_DIR DIR ...`` writes
    one) instead of the model's; the options above then apply to it.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bertembed import BertEmbeddings
from bertembed import trim as choosing

from . import CHECK_TEXTS, TABLE_DTYPES, TOKENIZER_CHOICES, UNKNOWN_RULES
from .manifest import EMBEDDINGS_DIR
from .reduced import NotReducible, reduce_tokenizer
from .tokens import load_tokenizer

#: Lines of each corpus file a reduced tokenizer is checked on (besides the build's check texts).
REDUCE_CHECK_LINES = 100_000


@dataclass(frozen=True)
class Trim:
    """What to keep of the token table (the ``--trim-*`` options); see :func:`bertembed.trim.select`."""

    corpus: tuple[str, ...] = ()
    ids: str | None = None
    scripts: tuple[str, ...] = field(default=())
    min_count: int = 1
    unknown: str = "error"
    tokenizer: str = "reduced"

    def __post_init__(self) -> None:
        if not (self.corpus or self.ids or self.scripts):
            raise ValueError("nothing to keep: give a corpus, an id file or scripts")
        if self.unknown not in UNKNOWN_RULES:
            raise ValueError(f"unknown must be one of {UNKNOWN_RULES}, got {self.unknown!r}")
        if self.tokenizer not in TOKENIZER_CHOICES:
            raise ValueError(f"tokenizer must be one of {TOKENIZER_CHOICES}, got {self.tokenizer!r}")


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
        As :func:`bertembed.trim.trim_layer`: ``unknown="unk"`` and the
        tokenizer has no unknown token; an id beyond the layer's vocabulary.
    """
    tokenizer = choosing.load_tokenizer(tokenizer_path)
    if do_lower_case:
        tokenizer = dataclasses.replace(tokenizer, tokenizer=load_tokenizer(tokenizer_path, do_lower_case=True))
    listed = None if trim.ids is None else choosing.read_ids(trim.ids)
    extra = np.asarray(extra_ids, np.int64).reshape(-1)
    if extra.size:
        listed = extra if listed is None else np.concatenate([listed, extra])
    small, _ = choosing.trim_layer(
        layer,
        tokenizer,
        corpus=trim.corpus,
        min_count=trim.min_count,
        ids=listed,
        scripts=trim.scripts,
        unknown=trim.unknown,
    )
    return small


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
    service: dict[str, Any],
    source: str | os.PathLike[str],
    *,
    table_dtype: str | None = None,
    trim: Trim | None = None,
) -> dict[str, Any]:
    """Save the layer the workers map into ``out_dir/embeddings``; return its manifest entry.

    The layer is loaded from `source` (the model's Transformer directory, a
    split's layer or a layer saved by ``bertembed trim``) with
    `table_dtype` (converted; None keeps the stored dtype), trimmed as `trim`
    says (converting and trimming commute), and saved with
    ``save_pretrained``: the artifact's only copy of the tables. The entry
    (directory, table dtype, bytes of the tables, and whether, how far and
    with what unknown rule the layer is trimmed) is also put into `service`
    as ``service["embeddings"]``.

    Examples
    --------
    >>> save_layer("out/", service, "model/", trim=Trim(corpus=("texts.txt",)))["kept_rows"]  # doctest: +SKIP
    1234
    """
    if table_dtype is not None and table_dtype not in TABLE_DTYPES:
        raise ValueError(f"table_dtype must be one of {', '.join(TABLE_DTYPES)}, got {table_dtype!r}")
    out_dir = Path(out_dir)
    target = out_dir / EMBEDDINGS_DIR
    source = Path(source).expanduser()
    if source.resolve() == target.resolve():
        raise ValueError(f"{source}: the layer to map is OUT_DIR/{EMBEDDINGS_DIR} itself; give another directory")
    loaded = BertEmbeddings.from_pretrained(source, table_dtype=table_dtype)
    if trim is not None:
        tokenizer = out_dir / service["sentence"]["tokenizer_dir"] / "tokenizer.json"
        lower = bool(service["sentence"]["do_lower_case"])
        loaded = trimmed(loaded, tokenizer, trim, prompt_ids(service, tokenizer), do_lower_case=lower)
    loaded.save_pretrained(target)
    entry: dict[str, Any] = {"dir": EMBEDDINGS_DIR, **describe(loaded)}
    service["embeddings"] = entry
    if trim is not None and loaded.unknown == "error" and trim.tokenizer == "reduced":
        service["tokenizer"] = _reduce(out_dir, service, loaded, trim)
    return entry


def _corpus_lines(files: tuple[str, ...]) -> list[str]:
    lines: list[str] = []
    for name in files:
        with open(Path(name).expanduser(), encoding="utf-8", errors="replace") as fh:
            lines.extend(line.rstrip("\n") for line in itertools.islice(fh, REDUCE_CHECK_LINES))
    return lines


def _reduce(out_dir: Path, service: dict[str, Any], layer: BertEmbeddings, trim: Trim) -> dict[str, Any]:
    """Reduce the artifact's tokenizer for `layer` (trimmed, rule "error"): what ``service.json`` records."""
    sentence = service["sentence"]
    path = out_dir / sentence["tokenizer_dir"] / "tokenizer.json"
    texts = [*CHECK_TEXTS, *_corpus_lines(trim.corpus)]
    try:
        counts = reduce_tokenizer(path, layer.kept_ids, texts, do_lower_case=bool(sentence["do_lower_case"]))
    except NotReducible as exc:
        return {"reduced": False, "why": str(exc)}
    return {"reduced": True, **counts}


def summary(entry: dict[str, Any], out_dir: Path) -> str:
    """One line for an export's output: where the layer went and what it holds."""
    line = f"wrote {out_dir / entry['dir']}/ ({entry['table_dtype']} tables, {entry['bytes'] / 2**20:.1f} MiB"
    if entry.get("trimmed"):
        line += (
            f"; trimmed to {entry['kept_rows']:,} of {entry['vocab_size']:,} token rows, "
            f"unknown tokens: {'a 422' if entry['unknown'] == 'error' else 'the row of id ' + str(entry['unknown'])}"
        )
    return line + ")"


def tokenizer_summary(entry: dict[str, Any]) -> str | None:
    """One line for an export's output on the tokenizer's reduction (None: none was asked for)."""
    if not entry:
        return None
    if not entry["reduced"]:
        return f"tokenizer kept whole ({entry['why']})"
    return (
        f"tokenizer reduced to {entry['kept_pieces']:,} of {entry['pieces']:,} pieces "
        f"({entry['bytes_after'] / 2**20:.1f} MiB of {entry['bytes_before'] / 2**20:.1f} MiB; "
        "requests may not ask for the rule 'unk': --tokenizer full keeps every piece)"
    )
