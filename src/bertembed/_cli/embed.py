"""``bertembed embed``: a checkpoint applied to an id file, or to one text or text pair.

With ``--ids`` the ids are memory-mapped and embedded chunk by chunk into a
memory-mapped ``.npy`` file under a temporary name, renamed when complete
(memory stays bounded by ``--chunk-rows``, or by :data:`AUTO_CHUNK_BYTES` of
result per chunk); with ``--text`` (and ``--text-pair``) the text is tokenised
with the model's ``tokenizer.json`` (:mod:`bertembed._cli.text`: the ids and
token types its own tokenizer gives) and its rows are printed.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .. import BertEmbeddings
from .common import (
    EXIT_USAGE,
    EXPECTED_ERRORS,
    CLIError,
    ProgressBar,
    check_out_dir,
    describe,
    partial_path,
    positive_int,
)
from .text import encode, load_tokenizer

#: The result size one chunk aims at when ``--chunk-rows`` is not given.
AUTO_CHUNK_BYTES = 64 << 20

_NPY_MAGIC = b"\x93NUMPY"


def _load_ids(path: Path, what: str) -> np.ndarray:
    """A memory-mapped integer ``.npy`` array, or a CLIError that says what is wrong."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(len(_NPY_MAGIC))
    except IsADirectoryError:
        raise CLIError(f"{path}: is a directory, expected a .npy file of {what}") from None
    except OSError as exc:
        raise CLIError(f"{path}: {exc.strerror or exc}") from None
    if magic != _NPY_MAGIC:
        raise CLIError(f"{path}: not a .npy file (save {what} with numpy.save)")
    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise CLIError(f"{path}: cannot read {what}: {exc}") from None
    if arr.dtype.kind not in "iu":
        raise CLIError(f"{path}: {what} must be integers, got dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise CLIError(f"{path}: {what} must have shape (B, S) or (S,), got shape {arr.shape}")
    return arr


def _load_model(path: Path, dtype: str | None) -> Any:
    if not path.exists():
        raise CLIError(f"{path}: no such model directory or file")
    try:
        return BertEmbeddings.from_pretrained(path, dtype=dtype)
    except CLIError:
        raise
    except EXPECTED_ERRORS as exc:
        raise CLIError(f"cannot load the model: {describe(exc)}") from None


def _auto_chunk_rows(seq: int, hidden: int, itemsize: int) -> int:
    return max(1, AUTO_CHUNK_BYTES // max(1, seq * hidden * itemsize))


def _same_file(a: Path, b: Path | None) -> bool:
    if b is None:
        return False
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _bad_id_message(
    exc: IndexError,
    chunks: Sequence[tuple[str, Path, np.ndarray, int, str]],
    start: int,
) -> str:
    """Re-word an out-of-range error of one chunk with its position in the whole file."""
    for name, path, chunk, rows, table in chunks:
        bad = (chunk < 0) | (chunk >= rows)
        if bad.any():
            where = np.unravel_index(int(np.argmax(bad)), chunk.shape)
            value = int(chunk[where])
            index = [int(k) for k in where]
            if chunk.ndim == 2:
                index[0] += start
            pos = ", ".join(str(k) for k in index)
            return f"{path}: {name} {value} at [{pos}] is out of range for the model's {table} with {rows} rows"
    return str(exc)


def _embed_file(args: argparse.Namespace, model: Path, layer: Any) -> int:
    ids = _load_ids(args.ids, "token ids")
    segs = None
    if args.segment_ids is not None:
        if layer.type_vocab_size == 0:
            raise CLIError(f"{model}: the model has no segment table; drop --segment-ids")
        segs = _load_ids(args.segment_ids, "segment ids")
        if segs.shape != ids.shape:
            raise CLIError(
                f"shapes differ: {args.segment_ids} has shape {segs.shape}, {args.ids} has shape {ids.shape}"
            )
    check_out_dir(args.out)
    for src in (args.ids, args.segment_ids):
        if _same_file(args.out, src):
            raise CLIError(f"--out {args.out} would overwrite the input {src}")
    seq = ids.shape[-1]
    if seq > layer.max_positions:
        raise CLIError(
            f"{args.ids}: sequences of {seq} tokens are longer than the model's {layer.max_positions} positions"
        )
    hidden, dtype = layer.hidden_size, np.dtype(layer.dtype)
    batch = ids.shape[0] if ids.ndim == 2 else 1
    chunk = args.chunk_rows or _auto_chunk_rows(seq, hidden, dtype.itemsize)
    if ids.ndim == 1:
        chunk = 1  # one sequence: a single call
    out_path: Path = args.out
    tmp = partial_path(out_path)
    start_time = time.perf_counter()
    # The result is written chunk by chunk through one buffer, not mapped: a
    # mapping (or a view of it) still alive at the rename or the clean-up
    # would keep the file open on Windows, and memory stays bounded either way.
    shape = (*ids.shape, hidden)
    buffer = np.empty((min(chunk, batch), seq, hidden) if ids.ndim == 2 else shape, dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    try:
        with open(tmp, "wb") as fh:
            np.lib.format.write_array_header_1_0(fh, header)
            with ProgressBar(
                batch, "embed", unit="rows" if ids.ndim == 2 else "sequence", enabled=not args.quiet
            ) as bar:
                for start in range(0, batch, chunk):
                    stop = min(start + chunk, batch)
                    if ids.ndim == 2:
                        tok_chunk = ids[start:stop]
                        seg_chunk = None if segs is None else segs[start:stop]
                        target = buffer[: stop - start]
                    else:
                        tok_chunk, seg_chunk, target = ids, segs, buffer
                    try:
                        layer(tok_chunk, seg_chunk, out=target, num_threads=args.threads)
                    except IndexError as exc:
                        checks = [
                            ("token id", args.ids, np.asarray(tok_chunk), layer.vocab_size, "token table"),
                        ]
                        if seg_chunk is not None:
                            checks.append(
                                (
                                    "segment id",
                                    args.segment_ids,
                                    np.asarray(seg_chunk),
                                    layer.type_vocab_size,
                                    "segment table",
                                )
                            )
                        raise CLIError(_bad_id_message(exc, checks, start)) from None
                    fh.write(target.reshape(-1).view(np.uint8).data)
                    bar.update(stop)
        os.replace(tmp, out_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    seconds = time.perf_counter() - start_time
    tokens = int(np.prod(ids.shape))
    rate = tokens / seconds if seconds > 0 else float("inf")
    print(
        f"wrote {out_path}: shape {(*ids.shape, hidden)} {dtype}, "
        f"{tokens} tokens in {seconds:.2f} s ({rate:,.0f} tokens/s)"
    )
    return 0


def max_tokens(layer: Any) -> int | None:
    """The most tokens one sequence may have for ``layer``'s position table (None: no limit).

    Absolute positions from ``offset`` use rows ``offset .. offset + S - 1``; the
    padding rule (RoBERTa) numbers real tokens from ``padding_idx + 1``.
    """
    rows = layer.max_positions
    if not rows:
        return None
    rule = layer.position_rule
    if rule.kind == "padding":
        return max(rows - rule.padding_idx - 1, 0)
    return max(rows - rule.offset, 0)


def _embed_text(args: argparse.Namespace, model: Path, layer: Any) -> int:
    tokenizer = load_tokenizer(model)
    enc = encode(tokenizer, args.text, args.text_pair)
    what = "pair" if args.text_pair is not None else "text"
    if not enc.ids:
        raise CLIError(f"the {what} gives no tokens")
    limit, truncated_from = max_tokens(layer), None
    if limit is not None and len(enc.ids) > limit:
        if not args.truncate:
            raise CLIError(
                f"the {what} has {len(enc.ids)} tokens, more than the {limit} the model's position "
                f"table allows; pass --truncate to keep the first {limit} (special tokens kept)"
            )
        # The tokenizer's own truncation: it cuts the text(s), never the special tokens.
        tokenizer.enable_truncation(max_length=limit)
        truncated_from, enc = len(enc.ids), encode(tokenizer, args.text, args.text_pair)
    tok_ids = np.array([enc.ids], dtype=np.int64)
    seg_ids = None
    if layer.type_vocab_size:
        # The token types the tokenizer's template gives; a model without a
        # segment table (type_vocab_size 0) takes none, as in transformers.
        worst = max(enc.type_ids, default=0)
        if worst >= layer.type_vocab_size:
            raise CLIError(
                f"{model}: the tokenizer gives token type {worst}, but the model's segment "
                f"table has {layer.type_vocab_size} row{'s' if layer.type_vocab_size != 1 else ''}"
            )
        seg_ids = np.array([enc.type_ids], dtype=np.int64)
    E = layer(tok_ids, seg_ids, num_threads=args.threads)
    width = max(len("token"), *(len(t) for t in enc.tokens))
    print(f"{'index':>5} {'token':<{width}} {'id':>6} {'type':>4}  embedding (first values)")
    for s, token in enumerate(enc.tokens):
        head = ", ".join(f"{v:+.4f}" for v in E[0, s, :4])
        more = ", ..." if E.shape[-1] > 4 else ""
        print(f"{s:>5} {token:<{width}} {enc.ids[s]:>6} {enc.type_ids[s]:>4}  [{head}{more}]")
    if truncated_from is not None:
        print(f"(--truncate: {truncated_from} tokens cut to {len(enc.ids)}, the model's limit)")
    if seg_ids is None and any(enc.type_ids):
        print("(the model has no segment table: the token types are shown, not embedded)")
    if args.out is not None:
        check_out_dir(args.out)
        tmp = partial_path(args.out)
        try:
            with open(tmp, "wb") as fh:
                np.save(fh, E)
            os.replace(tmp, args.out)
        finally:
            if tmp.exists():
                tmp.unlink()
        print(f"wrote {args.out}: shape {E.shape} {E.dtype}")
    return 0


def _model_path(args: argparse.Namespace) -> Path:
    given = [p for p in (args.model, args.model_option) if p is not None]
    if not given:
        raise CLIError("give the model: bertembed embed MODEL ... (or --model MODEL)", EXIT_USAGE)
    if len(given) == 2 and given[0] != given[1]:
        raise CLIError(f"two models given: {given[0]} and --model {given[1]}", EXIT_USAGE)
    return given[0]


def cmd_embed(args: argparse.Namespace) -> int:
    """Embed an id file (chunked, bounded memory) or one text or text pair."""
    model = _model_path(args)
    if args.text is None and args.text_pair is not None:
        raise CLIError("--text-pair needs --text", EXIT_USAGE)
    if (args.ids is None) == (args.text is None):
        raise CLIError("give either --ids FILE.npy or --text TEXT", EXIT_USAGE)
    if args.ids is None and args.segment_ids is not None:
        raise CLIError("--segment-ids goes with --ids (a text gets its tokenizer's types)", EXIT_USAGE)
    if args.ids is not None and args.truncate:
        raise CLIError("--truncate goes with --text (an id file is embedded as it is)", EXIT_USAGE)
    if args.ids is not None and args.out is None:
        raise CLIError("--ids needs --out FILE.npy", EXIT_USAGE)
    layer = _load_model(model, args.dtype)
    if args.ids is not None:
        return _embed_file(args, model, layer)
    return _embed_text(args, model, layer)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``embed`` on the subcommand parsers ``sub``."""
    embed = sub.add_parser(
        "embed",
        help="embed a token id file, or a text (pair), with a checkpoint",
        description="Apply the embedding layer of a Hugging Face checkpoint "
        "(config.json + model.safetensors) to a .npy file of token ids, chunk by chunk "
        "(memory stays bounded by --chunk-rows), or to one text or text pair tokenised with "
        "the model's own tokenizer.json: the same ids and token types as its tokenizer gives "
        "(its post-processor's special tokens and types; its padding and truncation settings "
        "are not applied: --truncate cuts a too-long text to the model's limit).",
    )
    embed.add_argument(
        "model",
        nargs="?",
        type=Path,
        metavar="MODEL",
        help="checkpoint directory (config.json + model.safetensors) or .safetensors file",
    )
    embed.add_argument("--model", dest="model_option", type=Path, metavar="MODEL", help="the same as MODEL")
    embed.add_argument("--ids", type=Path, metavar="FILE.npy", help="integer token ids, shape (B, S) or (S,)")
    embed.add_argument(
        "--segment-ids",
        type=Path,
        metavar="FILE.npy",
        help="segment ids of the same shape (default: all 0)",
    )
    embed.add_argument(
        "--text",
        "--text-a",
        dest="text",
        metavar="TEXT",
        help="instead of --ids: a text, tokenised with the model's tokenizer.json (needs the 'tokenizers' package)",
    )
    embed.add_argument(
        "--text-pair",
        "--text-b",
        dest="text_pair",
        metavar="TEXT",
        help="the second text of a pair (its token types are the tokenizer's)",
    )
    embed.add_argument(
        "--truncate",
        action="store_true",
        help="with --text: cut a text (pair) longer than the model's position table allows to "
        "that many tokens, as its tokenizer truncates (the special tokens are kept; a pair "
        "loses tokens from its longer text first); without it, a too-long text is an error",
    )
    embed.add_argument(
        "--out",
        type=Path,
        metavar="FILE.npy",
        help="where to write the result, shape ids.shape + (H,) (required with --ids)",
    )
    embed.add_argument(
        "--chunk-rows",
        type=positive_int,
        metavar="N",
        help="sequences per chunk (default: about 64 MiB of result per chunk)",
    )
    embed.add_argument(
        "--dtype",
        choices=("float32", "float64"),
        help="result dtype (default: the checkpoint's, float32 for most)",
    )
    embed.add_argument("--threads", type=positive_int, metavar="T", help="OpenMP threads (default: automatic)")
    embed.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    embed.set_defaults(func=cmd_embed)
