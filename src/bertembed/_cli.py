"""The ``bertembed`` command line (stdlib argparse).

Subcommands: ``demo`` (the seed's sentence pair, step by step), ``info``
(this build: version, OpenMP, threads, compiler, dtypes), ``bench`` (the
comparison harness with a progress bar, a table, JSON and a plot) and
``embed`` (a checkpoint applied to a large id file in bounded memory, or to
one sentence pair tokenised with the model's ``tokenizer.json``).

Expected failures (a missing or malformed file, a bad id, a bad argument)
print one line, ``bertembed: error: ...``, on stderr and exit non-zero;
they never print a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ._api import bert_embeddings
from ._version import __version__

#: Exit status of a run that failed on bad input (files, ids, arguments).
EXIT_ERROR = 1
#: Exit status of a command line argparse could not make sense of.
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130

#: Exceptions that mean "bad input", reported in one line instead of a traceback.
EXPECTED_ERRORS = (OSError, ValueError, TypeError, IndexError, KeyError, ImportError)

#: The result size one ``embed`` chunk aims at when ``--chunk-rows`` is not given.
AUTO_CHUNK_BYTES = 64 << 20

_NPY_MAGIC = b"\x93NUMPY"

# The seed's sentence pair "The cat sat" / "It slept", WordPiece ids of
# bert-base-uncased, with the seed's H = 4 rows for "cat" and "slept".
DEMO_TOKENS = ["[CLS]", "the", "cat", "sat", "[SEP]", "it", "slept", "[SEP]"]
DEMO_IDS = [101, 1996, 4937, 2938, 102, 2009, 14195, 102]
DEMO_SEGMENTS = [0, 0, 0, 0, 0, 1, 1, 1]


class CLIError(Exception):
    """A failure to report as ``bertembed: error: <message>``."""

    def __init__(self, message: str, status: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------
# progress bar


class ProgressBar:
    """A dependency-free progress bar on a text stream (stderr by default).

    On a terminal the bar is redrawn in place (at most ten times a second);
    anywhere else (a log file, a pipe) one line is written per tenth of the
    work, so logs stay short.

    Parameters
    ----------
    total : int
        The amount of work, in ``unit``.
    label : str, optional
        Text before the bar.
    unit : str, default "steps"
        What ``total`` counts, shown after the counts.
    stream : file-like, optional
        Where to draw; default ``sys.stderr``.
    enabled : bool, default True
        False draws nothing (``--quiet``).
    width : int, default 24
        Characters of the bar itself.

    Examples
    --------
    >>> import io
    >>> buf = io.StringIO()
    >>> bar = ProgressBar(4, label="demo", unit="rows", stream=buf)
    >>> for done in range(1, 5):
    ...     bar.update(done)
    >>> bar.close()
    >>> buf.getvalue().splitlines()[-1].split()[:3]
    ['demo', '[########################]', '100%']
    """

    def __init__(
        self,
        total: int,
        label: str = "",
        *,
        unit: str = "steps",
        stream: TextIO | None = None,
        enabled: bool = True,
        width: int = 24,
    ) -> None:
        self.total = max(int(total), 0)
        self.label = label
        self.unit = unit
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled
        self.width = width
        self.done = 0
        self._start = time.perf_counter()
        self._last_draw = -math.inf
        self._last_decile = -1
        self._closed = False
        try:
            self._tty = bool(self.stream.isatty())
        except (AttributeError, ValueError):
            self._tty = False

    def update(self, done: int, total: int | None = None, label: str | None = None) -> None:
        """Set the amount of work done (absolute, not an increment)."""
        if total is not None:
            self.total = max(int(total), 0)
        if label is not None:
            self.label = label
        self.done = min(max(int(done), 0), self.total) if self.total else int(done)
        if not self.enabled:
            return
        finished = self.total > 0 and self.done >= self.total
        if self._tty:
            now = time.perf_counter()
            if finished or now - self._last_draw >= 0.1:
                self._last_draw = now
                self.stream.write("\r" + self.render() + "\x1b[K")
                self.stream.flush()
        else:
            decile = 10 * self.done // self.total if self.total else 10
            if decile > self._last_decile:
                self._last_decile = decile
                self.stream.write(self.render() + "\n")
                self.stream.flush()

    def __call__(self, done: int, total: int, label: str = "") -> None:
        """The ``progress(done, total, label)`` callback of the benchmark harness."""
        self.update(done, total, label or None)

    def render(self) -> str:
        """The bar as one line of text."""
        frac = self.done / self.total if self.total else 1.0
        filled = round(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self._start
        head = f"{self.label} " if self.label else ""
        return (
            f"{head}[{bar}] {100 * frac:3.0f}%  {self.done}/{self.total} {self.unit}"
            f"  {elapsed:.1f} s"
        )

    def close(self) -> None:
        """Finish the line (terminal) so later output starts on a new one."""
        if self._closed:
            return
        self._closed = True
        if self.enabled and self._tty:
            self.stream.write("\r" + self.render() + "\x1b[K\n")
            self.stream.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------
# demo


def _demo_tables(vocab: int = 30522, hidden: int = 4) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    tok = np.round(rng.uniform(-0.5, 0.5, (vocab, hidden)), 2)
    pos = np.round(rng.uniform(-0.3, 0.3, (512, hidden)), 2)
    seg = np.round(rng.uniform(-0.2, 0.2, (2, hidden)), 2)
    tok[4937] = [0.12, -0.45, 0.78, 0.33]
    tok[14195] = [-0.31, 0.56, 0.14, -0.27]
    pos[2] = [0.05, 0.11, -0.03, 0.22]
    pos[6] = [0.18, -0.07, 0.29, 0.03]
    seg[0] = [0.08, -0.14, 0.06, 0.19]
    seg[1] = [-0.11, 0.22, -0.09, 0.15]
    return tok, pos, seg


def _vec(values: Sequence[float], fmt: str = "+.2f") -> str:
    return "[" + ", ".join(f"{v:{fmt}}" for v in values) + "]"


def cmd_demo(args: argparse.Namespace) -> int:
    """Print the seed's sentence-pair example, row by row."""
    tok, pos, seg = _demo_tables()
    ids = np.array([DEMO_IDS])
    sids = np.array([DEMO_SEGMENTS])
    E = bert_embeddings(ids, sids, tok, pos, seg)
    positions = list(range(len(DEMO_IDS)))
    print('Sentence pair: "The cat sat" / "It slept"  (H = 4)')
    print(f"  token_ids    = {DEMO_IDS}")
    print(f"  position_ids = {positions}")
    print(f"  segment_ids  = {DEMO_SEGMENTS}")
    print()
    print(f"{'token':>8} {'token_id':>8} {'position':>8} {'segment':>7}  embedding")
    for s, name in enumerate(DEMO_TOKENS):
        print(f"{name:>8} {DEMO_IDS[s]:>8} {s:>8} {DEMO_SEGMENTS[s]:>7}  {_vec(E[0, s])}")
    print()
    print("[CLS] is in segment 0; positions run 0..7 across both sentences (no reset).")
    print("Each row is token + position + segment (a sum, not a concatenation):")
    print("  cat   = [0.12,-0.45,0.78,0.33] + [0.05,0.11,-0.03,0.22] + [0.08,-0.14,0.06,0.19]")
    print(f"        = {_vec(E[0, 2], '.2f')}")
    print("  slept = [-0.31,0.56,0.14,-0.27] + [0.18,-0.07,0.29,0.03] + [-0.11,0.22,-0.09,0.15]")
    print(f"        = {_vec(E[0, 6], '.2f')}")
    return 0


# --------------------------------------------------------------------------
# info


def cmd_info(args: argparse.Namespace) -> int:
    """Print what this build is and can do (``bertembed.show_config`` as a command)."""
    from ._config import config

    facts = config()
    if args.json:
        print(json.dumps(facts, indent=2, default=str))
        return 0
    width = max(len(key) for key in facts)
    for key, value in facts.items():
        print(f"{key + ':':<{width + 1}} {value}")
    return 0


# --------------------------------------------------------------------------
# bench


def _select_cases(cases: Sequence[Any], pattern: str | None) -> list[Any]:
    """The cases whose name or label contains ``pattern`` (case-insensitive)."""
    chosen = list(cases)
    if pattern:
        needle = pattern.lower()
        chosen = [c for c in chosen if needle in _case_text(c).lower()]
        if not chosen:
            names = ", ".join(_case_text(c) for c in cases)
            raise CLIError(f"--cases {pattern!r} matches none of the cases: {names}")
    return chosen


def _case_text(case: Any) -> str:
    for attr in ("label", "name"):
        value = getattr(case, attr, None)
        if isinstance(value, str):
            return value
    return str(case)


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the comparison harness; print a table, optionally save JSON and a plot."""
    from . import _bench

    if args.plot is not None:
        _require_matplotlib()
        _check_out_dir(args.plot, "--plot")
    if args.json is not None:
        _check_out_dir(args.json, "--json")
    cases = _select_cases(_bench.DEFAULT_CASES, args.cases)
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 15)
    kwargs: dict[str, Any] = {"repeats": repeats, "threads": args.threads}
    if args.peers is not None:
        kwargs["peers"] = [p.strip() for p in args.peers.split(",") if p.strip()]
    with ProgressBar(len(cases), "bench", unit="steps", enabled=not args.quiet) as bar:
        results = _bench.run(cases, progress=bar, **kwargs)
    print(_bench.format_table(results))
    if args.json is not None:
        _write_text(args.json, json.dumps(results, indent=2, default=str) + "\n")
        print(f"wrote {args.json}")
    if args.plot is not None:
        plot_results(results, args.plot)
        print(f"wrote {args.plot}")
    return 0


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.partial-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CLIError(
            "--plot needs matplotlib, which is not installed "
            "(pip install matplotlib, or pip install 'bertembed[plot]')"
        ) from None


def _result_times(result: Mapping[str, Any]) -> dict[str, float]:
    """``{contender: median seconds per call}`` of one result row of the harness."""
    timings = result.get("timings")
    if not isinstance(timings, Mapping):
        return {}
    times = {}
    for name, stats in timings.items():
        value = stats.get("median_s") if isinstance(stats, Mapping) else stats
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            times[str(name)] = float(value)
    return times


def _result_group(result: Mapping[str, Any]) -> str:
    """The series a result belongs to: everything that defines a case but the batch size."""
    parts = [str(result.get("dtype", ""))]
    parts.append("+ LayerNorm" if result.get("layer_norm") else "sum")
    if result.get("out"):
        parts.append("into out=")
    if "seq" in result:
        parts.append(f"S={result['seq']}")
    if "H" in result:
        parts.append(f"H={result['H']}")
    if "threads" in result:
        parts.append(f"{result['threads']} threads")
    return ", ".join(p for p in parts if p)


def _result_batch(result: Mapping[str, Any]) -> int | None:
    batch = result.get("batch")
    return int(batch) if isinstance(batch, int) and not isinstance(batch, bool) else None


def plot_results(results: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Draw time per call against batch size, log-log, one line per contender.

    Cases that differ in anything but the batch size (dtype, LayerNorm,
    sequence length, ...) go into separate panels; only series with several
    batch sizes are drawn, unless there are none.

    Parameters
    ----------
    results : sequence of dict
        Rows as returned by ``bertembed._bench.run``.
    path : pathlib.Path
        Where to write the image (the format follows the suffix, e.g. ``.png``).
    """
    _require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    groups: dict[str, list[Mapping[str, Any]]] = {}
    for result in results:
        if _result_batch(result) is not None and _result_times(result):
            groups.setdefault(_result_group(result), []).append(result)
    if not groups:
        raise CLIError("--plot: the benchmark results have no batch sizes or timings to draw")
    # Series over several batch sizes are what the plot is for; single cases
    # (the other goal rows) are drawn only when there is no such series.
    sweeps = {k: v for k, v in groups.items() if len({_result_batch(r) for r in v}) > 1}
    groups = sweeps or groups
    ncols = min(len(groups), 2)
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(6.0 * ncols, 4.2 * nrows), squeeze=False
    )
    for ax, (title, rows) in zip(axes.flat, groups.items(), strict=False):
        series: dict[str, list[tuple[int, float]]] = {}
        for row in rows:
            batch = _result_batch(row) or 0
            for name, seconds in _result_times(row).items():
                series.setdefault(name, []).append((batch, seconds))
        batches = sorted({b for points in series.values() for b, _ in points})
        for name in sorted(series, key=lambda n: (n != "bertembed", n)):
            points = sorted(series[name])
            xs = [b for b, _ in points]
            ys = [1e3 * t for _, t in points]
            style = {"linewidth": 2.5, "zorder": 3} if name == "bertembed" else {}
            ax.plot(xs, ys, marker="o", label=name, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("batch size B")
        ax.set_ylabel("median time per call (ms)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    fig.suptitle(f"bertembed {__version__}: time per call (lower is better)")
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.partial-{os.getpid()}{path.suffix}")
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if tmp.exists():
            tmp.unlink()


# --------------------------------------------------------------------------
# embed


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
    from ._model import BertEmbeddings

    if not path.exists():
        raise CLIError(f"{path}: no such model directory or file")
    try:
        return BertEmbeddings.from_pretrained(path, dtype=dtype)
    except CLIError:
        raise
    except EXPECTED_ERRORS as exc:
        raise CLIError(f"cannot load the model: {_describe(exc)}") from None


def _auto_chunk_rows(seq: int, hidden: int, itemsize: int) -> int:
    return max(1, AUTO_CHUNK_BYTES // max(1, seq * hidden * itemsize))


def _partial_path(out: Path) -> Path:
    return out.with_name(f".{out.name}.partial-{os.getpid()}")


def _check_out_dir(out: Path, option: str = "--out") -> None:
    """Fail early (before any work) when ``out`` cannot be written as a file."""
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise CLIError(f"{option} {out}: the directory {parent} does not exist")
    if out.is_dir():
        raise CLIError(f"{option} {out}: is a directory, expected a file name")


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
            return (
                f"{path}: {name} {value} at [{pos}] is out of range for the model's "
                f"{table} with {rows} rows"
            )
    return str(exc)


def _embed_file(args: argparse.Namespace, layer: Any) -> int:
    ids = _load_ids(args.ids, "token ids")
    segs = None
    if args.segment_ids is not None:
        if layer.type_vocab_size == 0:
            raise CLIError(f"{args.model}: the model has no segment table; drop --segment-ids")
        segs = _load_ids(args.segment_ids, "segment ids")
        if segs.shape != ids.shape:
            raise CLIError(
                f"shapes differ: {args.segment_ids} has shape {segs.shape}, "
                f"{args.ids} has shape {ids.shape}"
            )
    _check_out_dir(args.out)
    for src in (args.ids, args.segment_ids):
        if _same_file(args.out, src):
            raise CLIError(f"--out {args.out} would overwrite the input {src}")
    seq = ids.shape[-1]
    if seq > layer.max_positions:
        raise CLIError(
            f"{args.ids}: sequences of {seq} tokens are longer than the model's "
            f"{layer.max_positions} positions"
        )
    hidden, dtype = layer.hidden_size, np.dtype(layer.dtype)
    batch = ids.shape[0] if ids.ndim == 2 else 1
    chunk = args.chunk_rows or _auto_chunk_rows(seq, hidden, dtype.itemsize)
    if ids.ndim == 1:
        chunk = 1  # one sequence: a single call
    out_path: Path = args.out
    tmp = _partial_path(out_path)
    start_time = time.perf_counter()
    try:
        result = np.lib.format.open_memmap(
            tmp, mode="w+", dtype=dtype, shape=(*ids.shape, hidden)
        )
        with ProgressBar(
            batch, "embed", unit="rows" if ids.ndim == 2 else "sequence", enabled=not args.quiet
        ) as bar:
            for start in range(0, batch, chunk):
                stop = min(start + chunk, batch)
                if ids.ndim == 2:
                    tok_chunk = ids[start:stop]
                    seg_chunk = None if segs is None else segs[start:stop]
                    target = result[start:stop]
                else:
                    tok_chunk, seg_chunk, target = ids, segs, result
                try:
                    layer(tok_chunk, seg_chunk, out=target, num_threads=args.threads)
                except IndexError as exc:
                    checks = [
                        ("token id", args.ids, np.asarray(tok_chunk), layer.vocab_size,
                         "token table"),
                    ]
                    if seg_chunk is not None:
                        checks.append(
                            ("segment id", args.segment_ids, np.asarray(seg_chunk),
                             layer.type_vocab_size, "segment table")
                        )
                    raise CLIError(_bad_id_message(exc, checks, start)) from None
                bar.update(stop)
        result.flush()
        del result
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


def _tokenize_pair(
    model: Path, text_a: str, text_b: str | None
) -> tuple[list[str], list[int], list[int]]:
    """``[CLS] a [SEP] b [SEP]`` with the model's WordPiece tokenizer: tokens, ids, segments."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise CLIError(
            "--text-a needs the optional 'tokenizers' package (pip install tokenizers); "
            "or pass token ids with --ids"
        ) from None
    directory = model if model.is_dir() else model.parent
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise CLIError(f"{path}: not found; --text-a needs the model's tokenizer.json (or use --ids)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as exc:  # the tokenizers package raises a bare Exception
        raise CLIError(f"{path}: cannot read the tokenizer: {exc}") from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    if cls_id is None or sep_id is None:
        raise CLIError(f"{path}: the vocabulary has no [CLS] or [SEP] token (not a BERT tokenizer?)")
    enc_a = tokenizer.encode(text_a, add_special_tokens=False)
    tokens = ["[CLS]", *enc_a.tokens, "[SEP]"]
    ids = [cls_id, *enc_a.ids, sep_id]
    segments = [0] * len(ids)  # [CLS], sentence A and the first [SEP]
    if text_b is not None:
        enc_b = tokenizer.encode(text_b, add_special_tokens=False)
        tokens += [*enc_b.tokens, "[SEP]"]
        ids += [*enc_b.ids, sep_id]
        segments += [1] * (len(enc_b.ids) + 1)  # sentence B and the second [SEP]
    return tokens, ids, segments


def _embed_text(args: argparse.Namespace, layer: Any) -> int:
    tokens, ids, segments = _tokenize_pair(args.model, args.text_a, args.text_b)
    if len(ids) > layer.max_positions:
        raise CLIError(
            f"the pair has {len(ids)} tokens, more than the model's {layer.max_positions} positions"
        )
    if layer.type_vocab_size < (2 if args.text_b is not None else 1):
        raise CLIError(f"{args.model}: the model's segment table cannot hold sentence B")
    tok_ids = np.array([ids], dtype=np.int64)
    seg_ids = np.array([segments], dtype=np.int64)
    E = layer(tok_ids, seg_ids, num_threads=args.threads)
    width = max(len(t) for t in tokens)
    print(f"{'pos':>4} {'token':<{width}} {'id':>6} {'seg':>3}  embedding (first values)")
    for s, token in enumerate(tokens):
        head = ", ".join(f"{v:+.4f}" for v in E[0, s, :4])
        more = ", ..." if E.shape[-1] > 4 else ""
        print(f"{s:>4} {token:<{width}} {ids[s]:>6} {segments[s]:>3}  [{head}{more}]")
    if args.out is not None:
        _check_out_dir(args.out)
        tmp = _partial_path(args.out)
        try:
            with open(tmp, "wb") as fh:
                np.save(fh, E)
            os.replace(tmp, args.out)
        finally:
            if tmp.exists():
                tmp.unlink()
        print(f"wrote {args.out}: shape {E.shape} {E.dtype}")
    return 0


def cmd_embed(args: argparse.Namespace) -> int:
    """Embed an id file (chunked, bounded memory) or one tokenised sentence pair."""
    if args.text_a is None and args.text_b is not None:
        raise CLIError("--text-b needs --text-a", EXIT_USAGE)
    if (args.ids is None) == (args.text_a is None):
        raise CLIError("give either --ids FILE.npy or --text-a TEXT", EXIT_USAGE)
    if args.ids is None and args.segment_ids is not None:
        raise CLIError("--segment-ids goes with --ids (text pairs get their own)", EXIT_USAGE)
    if args.ids is not None and args.out is None:
        raise CLIError("--ids needs --out FILE.npy", EXIT_USAGE)
    layer = _load_model(args.model, args.dtype)
    if args.ids is not None:
        return _embed_file(args, layer)
    return _embed_text(args, layer)


# --------------------------------------------------------------------------
# parser and entry point


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``bertembed`` argument parser with its four subcommands."""
    parser = argparse.ArgumentParser(
        prog="bertembed",
        description="Fast, safe BERT input embeddings (token + position + segment, "
        "optional fused LayerNorm) on the CPU.",
        epilog="Run 'bertembed COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"bertembed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="the seed's sentence-pair example, step by step",
        description='Embed the pair "The cat sat" / "It slept" with tiny H = 4 tables and '
        "print the token, position and segment ids and each summed row.",
    )
    demo.set_defaults(func=cmd_demo)

    info = sub.add_parser(
        "info",
        help="version, OpenMP, threads, compiler and dtypes of this build",
        description="Print what this build of bertembed is and can do.",
    )
    info.add_argument("--json", action="store_true", help="print the facts as JSON")
    info.set_defaults(func=cmd_info)

    bench = sub.add_parser(
        "bench",
        help="compare bertembed with NumPy, torch and ONNX Runtime",
        description="Time bertembed and each installed peer on random BERT-base-shaped "
        "tables (fixed seed) and print the medians as a table.",
    )
    bench.add_argument(
        "--repeats", type=_positive_int, metavar="N", help="timed calls per case (default 15)"
    )
    bench.add_argument(
        "--threads", type=_positive_int, metavar="T",
        help="threads for every contender (default: all cores)",
    )
    bench.add_argument(
        "--quick", action="store_true", help="few repeats (3): a smoke test, not a measurement"
    )
    bench.add_argument(
        "--cases", metavar="SUBSTR", help="run only the cases whose name contains SUBSTR"
    )
    bench.add_argument(
        "--peers", metavar="LIST",
        help="comma-separated peers to compare with (default: every installed one)",
    )
    bench.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    bench.add_argument(
        "--plot", type=Path, metavar="FILE.png",
        help="also draw time per call against batch size (needs matplotlib)",
    )
    bench.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    bench.set_defaults(func=cmd_bench)

    embed = sub.add_parser(
        "embed",
        help="embed a token id file (or a sentence pair) with a checkpoint",
        description="Apply the embedding layer of a Hugging Face BERT checkpoint "
        "(config.json + model.safetensors) to a .npy file of token ids, chunk by chunk "
        "(memory stays bounded by --chunk-rows), or to one sentence pair tokenised with "
        "the model's tokenizer.json.",
    )
    embed.add_argument(
        "--model", type=Path, required=True, metavar="DIR",
        help="checkpoint directory (config.json + model.safetensors) or .safetensors file",
    )
    embed.add_argument(
        "--ids", type=Path, metavar="FILE.npy", help="integer token ids, shape (B, S) or (S,)"
    )
    embed.add_argument(
        "--segment-ids", type=Path, metavar="FILE.npy",
        help="segment ids of the same shape (default: all 0)",
    )
    embed.add_argument(
        "--text-a", metavar="TEXT",
        help="instead of --ids: sentence A, tokenised with the model's tokenizer.json "
        "(needs the 'tokenizers' package)",
    )
    embed.add_argument("--text-b", metavar="TEXT", help="sentence B of the pair (segment 1)")
    embed.add_argument(
        "--out", type=Path, metavar="FILE.npy",
        help="where to write the result, shape ids.shape + (H,) (required with --ids)",
    )
    embed.add_argument(
        "--chunk-rows", type=_positive_int, metavar="N",
        help="sequences per chunk (default: about 64 MiB of result per chunk)",
    )
    embed.add_argument(
        "--dtype", choices=("float32", "float64"),
        help="result dtype (default: the checkpoint's, float32 for most)",
    )
    embed.add_argument(
        "--threads", type=_positive_int, metavar="T", help="OpenMP threads (default: automatic)"
    )
    embed.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    embed.set_defaults(func=cmd_embed)
    return parser


def _describe(exc: BaseException) -> str:
    """One line for an expected exception."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    if isinstance(exc, ImportError):
        return f"{exc} (an optional dependency is missing)"
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def _fail(message: str, stream: TextIO | None = None) -> None:
    out = sys.stderr if stream is None else stream
    out.write(f"bertembed: error: {' '.join(message.split())}\n")
    out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``bertembed`` command; return its exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        0 on success, 1 when the input was bad (one ``bertembed: error:`` line
        on stderr), 2 for a command line that cannot be parsed, 130 after Ctrl-C.
        ``--help`` and ``--version`` exit 0 through ``SystemExit`` as usual.
    """
    args = build_parser().parse_args(None if argv is None else list(argv))
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return int(func(args))
    except CLIError as exc:
        _fail(str(exc))
        return exc.status
    except EXPECTED_ERRORS as exc:
        _fail(_describe(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _fail("interrupted")
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
