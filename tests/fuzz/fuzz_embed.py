"""Fuzz target for ``bert_embeddings`` and ``BertEmbeddings``.

Usage (from the repository root; ``tests/`` on ``PYTHONPATH`` for the
``helpers`` package)::

    PYTHONPATH=tests python tests/fuzz/fuzz_embed.py -max_total_time=60          # atheris (libFuzzer)
    PYTHONPATH=tests python tests/fuzz/fuzz_embed.py -max_total_time=60 corpus/  # with a corpus dir
    PYTHONPATH=tests python tests/fuzz/fuzz_embed.py crash-<hash>                # replay one input

Without atheris (or with FUZZ_EMBED_HYPOTHESIS=1, or when GCC's ASan
runtime is preloaded, which leaves libFuzzer without coverage) the same
cases are drawn by hypothesis for ``-max_total_time`` seconds (default 60).
``tests/fuzz/test_fuzz_quick.py`` runs a few hundred cases under pytest. A run
ends by printing how many cases it ran and their outcomes (ok, or each
exception type).

Each input becomes one call with random shapes (including 0), id arrays of
every integer dtype and of invalid dtypes (bool, float, complex, object,
str, bytes, timedelta), strides, byte orders, extreme ids, tables of many
dtypes (float16/32/64, ``ml_dtypes.bfloat16`` when ml_dtypes imports,
byte-swapped, strided, lists; with NaN/inf), LayerNorm parameters,
``ln_eps``, ``dtype`` (float16/32/64, bfloat16 as the ml_dtypes type or the
name ``"bfloat16"``), ``num_threads`` and ``out`` buffers good and bad
(float16/32/64 or bfloat16; wrong shape/dtype/byte order, read-only,
strided, a list, overlapping the ids). Layers also draw the constructor's
``table_dtype`` (None, "float32", "float64", "float16", "bfloat16", "int8",
as names or dtypes; and wrong ones: "int4", 3, an object, ...) and the
position rule (absolute from 0 or from an offset, or RoBERTa's padding rule
with a padding id that may be past the table: its positions are predicted
from the ids); an int8 token table holding NaN/inf cannot be quantised. An oracle written from the
documented contract predicts the outcome:

* no fault: the call must succeed and equal ``tests/helpers/reference.py``
  (exactly for float32/float64 sums computed in float64; within a derived
  bound for float32 arithmetic, LayerNorm and float16/bfloat16 results).
  With a ``table_dtype`` the reference reads the tables the layer stores
  (int8: ``q * scale + offset`` in float64); the conversions themselves are
  tested in ``tests/core/tables/test_table_dtypes.py``, here only their kinds
  and (int8) that each value stays within a quantisation step;
* faults: it must raise one of the exception types they map to
  (TypeError, ValueError or IndexError), leave ``out`` untouched;
* always: no input array is modified, and nothing else (no crash, no
  other exception type) may happen.
"""

from __future__ import annotations

import atexit
import collections
import os
import sys
import time

import numpy as np
from helpers.fuzzing import OutcomeLog, gcc_asan_preloaded, instrumented_bertembed, max_total_time
from helpers.reference import reference, values64

try:  # optional: without it there are no bfloat16 arrays to pass
    import ml_dtypes
except ImportError:  # pragma: no cover - exercised where ml_dtypes is missing
    ml_dtypes = None

try:  # atheris instruments the Python code it imports for coverage feedback
    import atheris
except ImportError:  # pragma: no cover - the hypothesis fallback
    atheris = None

if atheris is not None and __name__ == "__main__" and os.environ.get("FUZZ_EMBED_HYPOTHESIS") != "1":
    with instrumented_bertembed(atheris):
        import bertembed
else:
    import bertembed

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
EPS64 = np.finfo(np.float64).eps
EPS32 = np.finfo(np.float32).eps
EPS16 = float(np.finfo(np.float16).eps)
#: ``ml_dtypes.bfloat16`` as a dtype, or None without ml_dtypes.
BF16 = None if ml_dtypes is None else np.dtype(ml_dtypes.bfloat16)
EPS_BF16 = 2.0**-7

#: 16-bit results: (relative bound of one rounding to them, their subnormal step).
NARROW = {F16: (EPS16, 2.0**-24)}
if BF16 is not None:
    NARROW[BF16] = (EPS_BF16, 2.0**-133)

#: Outcomes of the cases run in this process ("ok" or the exception type)
#: and, for the successful calls, what they exercised.
OUTCOMES: collections.Counter[str] = collections.Counter()
FEATURES: collections.Counter[str] = collections.Counter()
_OUTCOME_LOG = OutcomeLog(OUTCOMES)


# ------------------------------------------------------------------ sources


class AtherisDraw:
    """Decisions taken from libFuzzer's bytes."""

    def __init__(self, fdp):
        self.f = fdp

    def int(self, lo: int, hi: int) -> int:
        return self.f.ConsumeIntInRange(lo, hi)

    def pick(self, seq):
        return seq[self.f.ConsumeIntInRange(0, len(seq) - 1)]

    def bool(self) -> bool:
        return self.f.ConsumeBool()

    def blob(self, n: int) -> bytes:
        b = self.f.ConsumeBytes(n)
        return b + bytes(n - len(b))


class HypothesisDraw:
    """Decisions drawn by hypothesis (``st.data()``), which shrinks failures."""

    def __init__(self, data):
        from hypothesis import strategies as st

        self.st = st
        self.d = data

    def int(self, lo: int, hi: int) -> int:
        return self.d.draw(self.st.integers(lo, hi))

    def pick(self, seq):
        return self.d.draw(self.st.sampled_from(seq))

    def bool(self) -> bool:
        return self.d.draw(self.st.booleans())

    def blob(self, n: int) -> bytes:
        return self.d.draw(self.st.binary(min_size=n, max_size=n))


# ------------------------------------------------------------------ choices

#: One in FAULT_ODDS decisions that can be wrong is wrong: with ~16 such
#: decisions per case about a third of the cases are valid calls.
FAULT_ODDS = 16


def _choose(draw, valid, faults=()):
    """Mostly a valid option; a fault option one time in FAULT_ODDS.

    The fault branch is the highest integer, so shrinking leads to valid input.
    """
    if faults and draw.int(0, FAULT_ODDS - 1) == FAULT_ODDS - 1:
        return draw.pick(list(faults))
    return draw.pick(list(valid))


# ------------------------------------------------------------------ values

#: Byte codes >= 248 are special values; the rest map to multiples of 1/32
#: in [-4, 3.72], which sum exactly in float16/32/64.
SPECIALS = [np.nan, np.inf, -np.inf, 0.1, 1e30, -0.0, -1e30, 1.0 / 3.0]


def _floats(draw, n: int, specials: bool = True, finite: bool = False) -> np.ndarray:
    """``n`` values; with `finite` no special that is NaN, inf or beyond
    float16's range (those codes keep their plain value)."""
    b = np.frombuffer(draw.blob(n), np.uint8)
    v = (b.astype(np.float64) - 128.0) / 32.0
    if specials:
        for k, val in enumerate(SPECIALS):
            if finite and not abs(val) < 6e4:
                continue
            v[b == 248 + k] = val
    return v


# ------------------------------------------------------------------ tables

VALID_TABLE_KINDS = ["f64", "f32", "f16", ">f8", ">f4", "f32-strided", "f64-fortran", "f64-readonly", "list"] + (
    ["bf16", "bf16-strided"] if BF16 is not None else []
)
# ("u2": raw bfloat16 bits are for checkpoints only; a user's uint16 array is refused.)
INVALID_TABLE_KINDS = ["i64", "i32", "u8", "u2", "bool", "c128", "object", "str", "str-list", "longdouble"]
TABLE_SHAPE_FAULTS = ["1d", "3d", "h0", "h+1"]


def _table_kind(draw):
    kind = _choose(draw, VALID_TABLE_KINDS, INVALID_TABLE_KINDS)
    fault = _choose(draw, [None], TABLE_SHAPE_FAULTS)
    return kind, fault


def _make_table(draw, rows: int, hidden: int, kind: str, fault, finite: bool = False):
    """(value passed to the API, float64 values it stands for or None, errors,
    the dtype it is stored in: "float64", "float32", "float16", "bfloat16" or None)."""
    h = hidden
    if fault == "h0":
        h = 0
    elif fault == "h+1":
        h = hidden + 1
    vals = _floats(draw, rows * h, finite=finite).reshape(rows, h)
    errors: set[type] = set()
    norm = None
    if kind == "f64":
        value = vals
    elif kind == "f32":
        value = vals.astype(F32)
    elif kind == "f16":
        with np.errstate(over="ignore"):
            value = vals.astype(F16)
    elif kind == ">f8":
        value = vals.astype(">f8")
    elif kind == ">f4":
        value = vals.astype(">f4")
    elif kind == "f32-strided":
        value = np.repeat(vals.astype(F32), 2, axis=1)[:, ::2]
    elif kind == "bf16":
        value = vals.astype(BF16)
    elif kind == "bf16-strided":
        value = np.repeat(vals.astype(BF16), 2, axis=1)[:, ::2]
    elif kind == "f64-fortran":
        value = np.asfortranarray(vals)
    elif kind == "f64-readonly":
        value = vals.copy()
        value.flags.writeable = False
    elif kind == "list":
        value = vals.tolist()
    elif kind in ("i64", "i32", "u8", "u2"):
        value = np.zeros((rows, h), {"i64": np.int64, "i32": np.int32, "u8": np.uint8, "u2": np.uint16}[kind])
    elif kind == "bool":
        value = np.ones((rows, h), bool)
    elif kind == "c128":
        value = vals.astype(np.complex128)
    elif kind == "object":
        value = vals.astype(object)
    elif kind == "str":
        value = vals.astype(str)
    elif kind == "str-list":
        value = [["x"] * h for _ in range(rows)]
    elif kind == "longdouble":
        value = vals.astype(np.longdouble)
    else:  # pragma: no cover
        raise AssertionError(kind)

    if fault == "1d":
        value = np.asarray(value).reshape(-1) if isinstance(value, np.ndarray) else [x for row in value for x in row]
    elif fault == "3d":
        value = np.asarray(value).reshape(rows, 1, h) if isinstance(value, np.ndarray) else [[row] for row in value]

    # Oracle: dtype rule first, then shape.
    if isinstance(value, np.ndarray):
        dt = value.dtype
        dtype_ok = (dt.kind == "f" and dt.itemsize in (2, 4, 8)) or (BF16 is not None and dt == BF16)
        arr_shape = value.shape
    else:
        try:
            arr_shape = np.asarray(value, dtype=np.float64).shape
            dt, dtype_ok = F64, True
        except (TypeError, ValueError):
            dt, dtype_ok, arr_shape = None, False, None
    if not dtype_ok:
        errors.add(TypeError)
    elif len(arr_shape) != 2 or arr_shape[1] == 0:
        errors.add(ValueError)
    if dtype_ok:
        store = "bfloat16" if dt.kind == "V" else f"float{8 * dt.itemsize}"
        norm = np.asarray(value).astype(np.float64) if len(arr_shape) == 2 else None
    else:
        store = None
    return value, norm, errors, store


#: The layer's ``table_dtype``: (value, the dtype the token table is then
#: stored in). Mostly None (tables kept). "bfloat16" works without ml_dtypes
#: too (the layer then keeps raw bits).
VALID_TABLE_DTYPES = (
    [(None, None)] * 9
    + [
        ("float32", "float32"),
        ("float64", "float64"),
        ("float16", "float16"),
        ("bfloat16", "bfloat16"),
        ("int8", "int8"),
        (np.float16, "float16"),
        (np.dtype(np.int8), "int8"),
        (np.dtype(np.float64), "float64"),
    ]
    + ([(BF16.type, "bfloat16")] if BF16 is not None else [])
)
#: Wrong ones and their error: not a dtype at all is a TypeError, a dtype or
#: name outside the list a ValueError.
TABLE_DTYPE_FAULTS = [
    ("int4", ValueError),
    ("float", ValueError),
    ("", ValueError),
    ("Float32", ValueError),
    (np.int32, ValueError),
    (np.dtype(np.complex64), ValueError),
    (3, TypeError),
    (object(), TypeError),
]


# ------------------------------------------------------------------ ids

VALID_ID_KINDS = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", ">i4", ">i8", ">u8", "<i2", "intp", "uintp", "list"]
INVALID_ID_KINDS = ["bool", "f8", "f4", "f2", "object", "str", "bytes", "c16", "m8", "float-list"]
BAD_IDS = [-1, 0, 1, 127, 128, 255, 256, -129, 2**31 - 1, 2**31, 2**32, -(2**31) - 1, 2**63 - 1, -(2**63), 2**64 - 1]


def _id_kind(draw):
    return _choose(draw, VALID_ID_KINDS, INVALID_ID_KINDS)


def _make_ids(draw, shape: tuple[int, ...], rows: int, kind: str, fault_ok: bool = True):
    """An id array of ``shape`` (ids in range unless a fault is drawn), as ``kind``."""
    n = int(np.prod(shape, dtype=np.int64))
    pyvals = [int(b) % max(rows, 1) for b in draw.blob(n)]
    dt = (
        None
        if kind in ("list", "float-list")
        else np.dtype({"intp": np.intp, "uintp": np.uintp}.get(kind, kind if kind not in INVALID_ID_KINDS else "i8"))
    )
    if n and fault_ok and _choose(draw, [False], [True]):
        bad = draw.pick([rows, rows + 1, *BAD_IDS])
        if dt is not None and dt.kind in "iu":
            info = np.iinfo(dt)
            bad = min(max(bad, int(info.min)), int(info.max))
        pyvals[draw.int(0, n - 1)] = bad
    base = np.array(pyvals, dtype=object).reshape(shape)
    if kind == "list":
        return base.tolist()
    if kind == "float-list":
        return base.astype(np.float64).tolist()
    if kind == "bytes":
        return base.astype(str).astype(bytes)
    if kind == "str":
        return base.astype(str)
    if kind == "object":
        return base  # Python ints in an object array
    if kind == "bool":
        return base.astype(bool)
    if kind == "m8":
        return base.astype(np.int64).astype("m8[s]")
    if kind in ("f8", "f4", "f2", "c16"):
        with np.errstate(over="ignore"):
            return base.astype(np.float64).astype(kind)
    arr = base.astype(dt)
    layout = draw.pick(["contig", "contig", "strided", "fortran", "reversed", "readonly"])
    if layout == "strided" and arr.ndim:
        arr = np.repeat(arr, 2, axis=-1)[..., ::2]
    elif layout == "fortran":
        arr = np.asfortranarray(arr)
    elif layout == "reversed" and arr.ndim:
        arr = arr[..., ::-1]
    elif layout == "readonly":
        arr.flags.writeable = False
    return arr


def _effective_ids(value):
    """(int array as the API should see it, or None when the dtype is refused)."""
    arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    if arr.dtype.kind in "iu":
        return arr
    if arr.size == 0 and not isinstance(value, np.ndarray) and arr.dtype.kind == "f":
        return arr.astype(np.int64)
    return None


def _padding_positions(case, ids, padding_idx: int, rows: int, n: int, dtype_fault: bool):
    """The padding rule's positions for `ids` (None if they cannot be computed), noting its errors in `case`.

    Pads read row `padding_idx`, the other tokens rows ``padding_idx + 1, + 2, ...`` in their row; a
    position past the table (``rows`` rows), or a padding id that is not a row, is a ValueError.
    """
    if dtype_fault or ids.ndim not in (1, 2):
        return None
    flat = np.atleast_2d(ids).astype(object)  # (exact comparisons for every integer dtype)
    real = flat != padding_idx
    counts = real.sum(axis=1) if flat.size else np.zeros(1, np.int64)
    if n == 0:
        if padding_idx >= rows:  # (whether an empty call checks it is not part of the contract)
            case.optional.add(ValueError)
    elif padding_idx >= rows or padding_idx + int(counts.max()) >= rows:
        case.errors.add(ValueError)
    positions = np.where(real, padding_idx + np.cumsum(real, axis=1), padding_idx)
    return positions.astype(np.int64).reshape(ids.shape)


def _out_of_range(arr: np.ndarray, rows: int) -> bool:
    return any(v < 0 or v >= rows for v in arr.astype(object).ravel())


# ------------------------------------------------------------------ the case


class Case:
    """Everything one fuzz input decided, plus the oracle's prediction."""

    def __init__(self):
        self.errors: set[type] = set()
        #: Errors the call may raise or not (an empty call with a padding id past the table).
        self.optional: set[type] = set()
        self.arrays: list[np.ndarray] = []  # inputs that must not change


def _check_kind(got, rdtype, shape) -> None:
    assert isinstance(got, np.ndarray), f"the result is a {type(got).__name__}, not an array"
    assert got.dtype == rdtype, f"result dtype differs: {got.dtype}, expected {rdtype}"
    assert got.shape == shape, f"result shape differs: {got.shape}, expected {shape}"


def _check_result(case, got, ref, rdtype, fp32, ln):
    """``got`` equals ``ref``: exactly for float32/float64 sums computed in
    float64, else within a derived bound.

    ``fp32``: the kernel computes in float32 (neither a table nor the result is
    float64), as documented; the bound is then a few float32 ulps of the
    magnitudes involved (``case.conv_mag``: the magnitude of an int8 token
    value's own float32 rounding, ``q * scale + offset``, fused or not).
    LayerNorm amplifies rounding by ``rstd * |w|``. float16 and bfloat16
    results are rounded once more (through float32 when computed in float64).
    """
    _check_kind(got, rdtype, ref.shape)
    if got.size == 0:
        return
    narrow = NARROW.get(rdtype)
    got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
    mag = np.where(np.isfinite(case.abs_ref), case.abs_ref, 0.0)  # |t| + |p| + |g|
    if ln is None:
        if not fp32 and narrow is None:
            np.testing.assert_array_equal(got, ref)
            return
        tol = EPS32 * (2 * mag + case.conv_mag) if fp32 else np.zeros_like(mag)
    else:
        w, b = ln
        hdim = mag.shape[-1]
        unit = EPS32 if fp32 else EPS64
        with np.errstate(all="ignore"):
            rowmax = np.max(mag, axis=-1, keepdims=True)
            rstd = 1.0 / np.sqrt(np.var(case.raw_sum, axis=-1, keepdims=True) + case.eps)
            tol = 16 * unit * (rowmax * (hdim + 2) * rstd * np.abs(w) + (0.0 if b is None else np.abs(b)))
            if rdtype != F64:
                tol = tol + 4 * EPS32 * np.abs(ref64)
    if narrow is not None:  # rounded once more, to 16 bits (through float32 when wide)
        tol = tol + narrow[0] * np.abs(ref64) + narrow[1]
    with np.errstate(all="ignore"):
        tol = np.where(np.isfinite(tol), tol, 0.0)
    gf, rf = np.isfinite(got64), np.isfinite(ref64)
    np.testing.assert_array_equal(gf, rf, err_msg="finite/non-finite pattern differs")
    np.testing.assert_array_equal(got64[~rf], ref64[~rf], err_msg="non-finite values differ")
    diff = np.abs(got64[rf] - ref64[rf])
    bad = diff > tol[rf]
    if bad.any():
        k = int(np.argmax(bad))
        raise AssertionError(
            f"result differs from the reference at {int(bad.sum())} places: "
            f"got {got64[rf][k]!r}, expected {ref64[rf][k]!r} (tolerance {tol[rf][k]:.3g})"
        )


def _same_bits(arr: np.ndarray, before: np.ndarray) -> bool:
    """Whether ``arr`` still holds ``before`` (bitwise; also for bfloat16,
    whose NaN NumPy's comparisons do not treat as floats)."""
    return arr.shape == before.shape and arr.tobytes() == before.tobytes()


#: ``dtype`` arguments: valid ones and faults (TypeError).
DTYPE_CHOICES = [None, None, None, np.float32, np.float64, "float32", "f8", np.float16] + (
    [BF16.type, "bfloat16"] if BF16 is not None else []
)
DTYPE_FAULTS = [np.int32, "banana", object, np.complex64] + (["bfloat16"] if BF16 is None else [BF16.newbyteorder()])
RESULT_DTYPES = (F32, F64, F16) + ((BF16,) if BF16 is not None else ())
#: ``out`` faults ("f16"/"bf16": an out of that dtype whatever the result's).
OUT_FAULTS = ["wrong-shape", "wrong-dtype", "swapped", "f16", "readonly", "strided", "list", "overlap"] + (
    ["bf16"] if BF16 is not None else []
)


def _call(
    case,
    api,
    stream,
    tok_ids,
    seg_ids,
    tok,
    pos,
    seg,
    position_ids,
    ln_w,
    ln_b,
    eps,
    out,
    dtype,
    num_threads,
    table_dtype,
    rule=None,
):
    saved = getattr(bertembed._core.embed, "STREAM_MIN_BYTES", None)
    if stream and saved is not None:
        bertembed._core.embed.STREAM_MIN_BYTES = 0
    try:
        if api == "function":
            return bertembed.bert_embeddings(
                tok_ids,
                seg_ids,
                tok,
                pos,
                seg,
                position_ids=position_ids,
                ln_weight=ln_w,
                ln_bias=ln_b,
                ln_eps=eps,
                out=out,
                dtype=dtype,
                num_threads=num_threads,
            )
        rules = {
            None: {},
            "absolute": {},
            "padding": {"position_rule": "padding", "padding_idx": rule and rule[1]},
            "offset": {"position_rule": bertembed.PositionRule("absolute", offset=rule and rule[1])},
        }
        layer = bertembed.BertEmbeddings(
            tok,
            pos,
            seg,
            ln_weight=ln_w,
            ln_bias=ln_b,
            ln_eps=eps,
            dtype=dtype,
            table_dtype=table_dtype,
            **rules[rule and rule[0]],
        )
        case.layer = layer
        return layer(tok_ids, seg_ids, position_ids=position_ids, out=out, num_threads=num_threads)
    finally:
        if saved is not None:
            bertembed._core.embed.STREAM_MIN_BYTES = saved


def _stored_tables(case, td, orig_tok, stores):
    """The tables a layer built with ``table_dtype=td`` stores, as float64
    values, after checking that each is stored as predicted; for int8 also
    the magnitude of each token value's terms (``|q| * scale + |offset|``)."""
    t = case.layer._tables
    tabs = (t.tok, t.pos, t.seg)
    kinds = tuple(None if x is None else x.dtype_name for x in tabs)
    assert kinds == stores, f"tables stored as {kinds}, expected {stores}"
    assert case.layer.table_dtype == stores[0], case.layer.table_dtype
    values = [None if x is None else values64(x.data, x.scale) for x in tabs]
    tok_mag = None
    if td == "int8":
        q, qs = t.tok.data, t.tok.scale.astype(np.float64)
        assert q.dtype == np.int8 and qs.shape == (q.shape[0], 2), (q.dtype, qs.shape)
        tok_mag = np.abs(q.astype(np.float64)) * qs[:, :1] + np.abs(qs[:, 1:])
        # Each value within a step of its row (a wrong quantiser would pass
        # the comparison with the kernel, which reads what is stored).
        err = np.abs(values[0] - orig_tok)
        bound = 1.01 * qs[:, :1] + 4 * EPS32 * (np.abs(orig_tok) + np.abs(qs[:, 1:]))
        assert (err <= bound).all(), "an int8 value is more than a step off its row's value"
    return values, tok_mag


def run_case(draw, force: dict | None = None) -> str:
    """Draw one case, run it, check it against the oracle. Returns the outcome
    ("ok" or the exception type's name).

    `force` fixes some decisions (for tests of the oracle itself): ``"api"``
    ("function" or "layer"), ``"table_dtype"`` (a name from
    :data:`VALID_TABLE_DTYPES`, layers only), ``"dtype"`` (the ``dtype``
    argument) and ``"position_rule"`` ("absolute", "padding" or "offset":
    the layer's rule, layers only).
    """
    outcome, tags = _run_case(draw, force or {})
    OUTCOMES[outcome] += 1
    if outcome == "ok":
        FEATURES.update(tags)
    _OUTCOME_LOG.tick()
    return outcome


def _run_case(draw, force: dict) -> tuple[str, list[str]]:
    case = Case()
    api = force["api"] if "api" in force else draw.pick(["function", "layer"])
    hidden = draw.int(1, 6)
    vocab = draw.int(0, 24)
    npos = draw.int(0, 10)
    nseg = _choose(draw, [None, 1, 2, 2, 3], [0])

    # The layer's table_dtype: td is the dtype it names (None: keep the tables).
    td_value = td = None
    if api == "layer":
        if "table_dtype" in force:
            td_value = td = force["table_dtype"]
        else:
            td_value, td = _choose(draw, VALID_TABLE_DTYPES, TABLE_DTYPE_FAULTS)
        if isinstance(td, type):  # a wrong value: the error it must give
            case.errors.add(td)
            td = None
    # Quantising NaN/inf is an error: int8 token tables draw them one time in FAULT_ODDS.
    finite = td == "int8" and _choose(draw, [True], [False])

    tok, tok_n, e, tok_store = _make_table(draw, vocab, hidden, *_table_kind(draw), finite=finite)
    case.errors |= e
    pos, pos_n, e, pos_store = _make_table(draw, npos, hidden, *_table_kind(draw))
    case.errors |= e
    seg = seg_n = seg_store = None
    if nseg is not None:
        seg, seg_n, e, seg_store = _make_table(draw, nseg, hidden, *_table_kind(draw))
        case.errors |= e
    widths = {t.shape[1] for t in (tok_n, pos_n, seg_n) if t is not None}
    if len(widths) > 1:
        case.errors.add(ValueError)
    # How the (token, position, segment) tables are stored: a float table_dtype
    # converts them all, "int8" only the token table.
    if td is None:
        stores = (tok_store, pos_store, seg_store)
    elif td == "int8":
        stores = (td, pos_store, seg_store)
        if tok_n is not None and not np.isfinite(tok_n).all():
            case.errors.add(ValueError)
    else:
        stores = (td, td, None if seg is None else td)
    # H as the token table has it (a shape fault may have changed it).
    hid = tok_n.shape[1] if tok_n is not None else hidden

    # LayerNorm parameters and eps.
    ln_mode = _choose(
        draw,
        ["none", "none", "both", "both", "int", "list", "f32", "weight-only"],
        ["bias-only", "wrong-shape", "complex", "object", "bool"],
    )
    ln_w = ln_b = None
    ln = None
    if ln_mode != "none":
        w = _floats(draw, hid, specials=False)
        b = _floats(draw, hid, specials=False)
        if ln_mode in ("both", "list", "f32", "int"):
            if ln_mode == "int":
                w, b = np.round(w).astype(np.int64), np.round(b).astype(np.int32)
            elif ln_mode == "f32":
                w, b = w.astype(F32), b.astype(F32)
            ln = (np.asarray(w, np.float64), np.asarray(b, np.float64))
            ln_w, ln_b = (w.tolist(), b.tolist()) if ln_mode == "list" else (w, b)
        elif ln_mode == "weight-only":  # LayerNorm without bias (ModernBERT)
            ln_w = w
            ln = (np.asarray(w, np.float64), None)
        elif ln_mode == "bias-only":
            ln_b = b
            case.errors.add(ValueError)
        elif ln_mode == "wrong-shape":
            ln_w, ln_b = np.append(w, 1.0), b
            case.errors.add(ValueError)
        else:
            conv = {"complex": np.complex128, "object": object, "bool": bool}[ln_mode]
            ln_w, ln_b = w.astype(conv), b
            case.errors.add(TypeError)
    eps_choice = _choose(
        draw,
        [1e-12, 1e-12, 1e-5, 0.1, 1, np.float32(1e-6), np.int64(2)],
        [0.0, -1.0, np.nan, np.inf, True, "1e-5", None],
    )
    case.eps = 1e-12
    if isinstance(eps_choice, (bool, str)) or eps_choice is None:
        case.errors.add(TypeError)
    elif not (np.isfinite(float(eps_choice)) and float(eps_choice) > 0):
        case.errors.add(ValueError)
    else:
        case.eps = float(eps_choice)

    # Result dtype.
    if "dtype" in force:
        dtype_choice = force["dtype"]
    else:
        dtype_choice = _choose(draw, DTYPE_CHOICES, DTYPE_FAULTS)
    if isinstance(dtype_choice, str) and dtype_choice == "bfloat16":
        dt_param = BF16 if BF16 is not None else "invalid"  # (needs ml_dtypes)
    else:
        try:
            dt_param = None if dtype_choice is None else np.dtype(dtype_choice)
        except TypeError:
            dt_param = "invalid"
    if isinstance(dt_param, str) or (dt_param is not None and dt_param not in RESULT_DTYPES):
        case.errors.add(TypeError)
        dt_param = F64

    # Ids.
    ndim = _choose(draw, [2, 2, 1], [0, 3])
    bsz = draw.int(0, 4)
    seq = draw.int(0, _choose(draw, [min(npos, 8)], [8]))
    shape = {2: (bsz, seq), 1: (seq,), 0: (), 3: (bsz, seq, 1)}[ndim]
    tok_ids = _make_ids(draw, shape, vocab, _id_kind(draw))
    if ndim == 0 and draw.bool():
        tok_ids = 3
    tok_eff = _effective_ids(tok_ids)
    tok_dtype_fault = tok_eff is None  # (unless "overlap" below replaces the ids)
    if tok_dtype_fault:
        tok_eff = np.zeros(shape, np.int64)
    if tok_eff.ndim not in (1, 2):
        case.errors.add(ValueError)
    eshape = tok_eff.shape if tok_eff.ndim in (1, 2) else (1, 1)
    batch, seq = (1, eshape[0]) if len(eshape) == 1 else eshape
    n = batch * seq

    seg_mode = _choose(draw, ["none", "same", "same"] if seg is not None else ["none"], ["wrong-shape", "same"])
    seg_ids = None
    seg_eff = None
    if seg_mode != "none":
        sshape = eshape if seg_mode == "same" else (*eshape[:-1], eshape[-1] + 1)
        seg_ids = _make_ids(draw, sshape, nseg or 0, _id_kind(draw))
        seg_eff = _effective_ids(seg_ids)
        if seg is None:
            case.errors.add(ValueError)
        if seg_eff is None:
            case.errors.add(TypeError)
        elif seg_eff.shape != tok_eff.shape:
            case.errors.add(ValueError)

    pos_mode = _choose(draw, ["none", "none", "S", "1S", "BS"], ["bad"])
    position_ids = None
    pos_eff = None
    if pos_mode != "none":
        pshape = {"S": (seq,), "1S": (1, seq), "BS": (batch, seq), "bad": (batch + 1, seq + 1)}
        position_ids = _make_ids(draw, pshape[pos_mode], npos, _id_kind(draw))
        pos_eff = _effective_ids(position_ids)
        if pos_eff is None:
            case.errors.add(TypeError)
        elif pos_eff.shape not in {(seq,), (1, seq), (batch, seq)}:
            case.errors.add(ValueError)
    from_rule = pos_mode == "none"  # the layer's position rule numbers them (decided below)

    # The result dtype the call should produce.
    out_mode = _choose(draw, ["none", "none", "good"], OUT_FAULTS)
    rshape = (*tok_eff.shape, hid) if tok_eff.ndim in (1, 2) else (1, 1, hid)
    if api == "layer":  # default: float64 for a float64 token table, else float32
        rdtype = dt_param if dt_param is not None else (F32 if stores[0] not in (None, "float64") else F64)
    elif dt_param is not None:
        rdtype = dt_param
    elif out_mode in ("good", "readonly", "strided", "wrong-shape", "overlap"):
        rdtype = draw.pick(list(RESULT_DTYPES))  # taken from out
    elif out_mode == "f16":
        rdtype = F16  # taken from out
    elif out_mode == "bf16":
        rdtype = BF16
    else:
        rdtype = F64
    out = None
    if out_mode != "none":
        odt = rdtype
        oshape = rshape
        if out_mode == "wrong-dtype":
            odt = np.dtype(np.int32) if (api == "function" and dt_param is None) else (F32 if rdtype == F64 else F64)
            case.errors.add(TypeError)
        elif out_mode == "swapped":
            odt = rdtype.newbyteorder()
            case.errors.add(TypeError)
        elif out_mode in ("f16", "bf16"):
            odt = F16 if out_mode == "f16" else BF16
            if rdtype != odt:
                case.errors.add(TypeError)
        elif out_mode == "wrong-shape":
            oshape = (*rshape[:-1], hid + 1)
            case.errors.add(ValueError)
        if out_mode == "strided":
            out = np.full((*rshape[:-1], 2 * hid), 7.0, odt)[..., ::2]
            if not out.flags.c_contiguous:  # (NumPy ignores strides of size-1 axes)
                case.errors.add(ValueError)
        elif out_mode == "list":
            out = np.zeros(rshape).tolist()
            case.errors.add(TypeError)
        else:
            out = np.full(oshape, 7.0, odt)
            if out_mode == "readonly":
                out.flags.writeable = False
                case.errors.add(ValueError)
        if out_mode == "overlap" and tok_eff.ndim in (1, 2) and hid > 0:
            # token_ids live inside `out`: the kernel would overwrite its own input.
            view = out.view({8: np.int64, 4: np.int32, 2: np.int16}[odt.itemsize])[..., 0]
            view[...] = np.arange(view.size).reshape(view.shape) % max(vocab, 1)
            tok_ids, tok_eff = view, view
            tok_dtype_fault = False
            if out.size:
                case.errors.add(ValueError)
        if isinstance(out, np.ndarray):
            case.out_before = out.copy()
    if tok_dtype_fault:
        case.errors.add(TypeError)

    # Range faults matter only when there is something to compute.
    if n > 0 and tok_eff.ndim in (1, 2):
        if _out_of_range(tok_eff, vocab):
            case.errors.add(IndexError)
        if seg is not None:
            if seg_eff is None and seg_ids is None and nseg == 0:
                case.errors.add(IndexError)
            if seg_eff is not None and _out_of_range(seg_eff, nseg or 0):
                case.errors.add(IndexError)
        if pos_eff is not None and _out_of_range(pos_eff, npos):
            case.errors.add(IndexError)

    num_threads = _choose(draw, [None, None, 1, 2, 3, np.int32(2)], [0, -2, 1.5, True, "2"])
    if num_threads in (0, -2) and not isinstance(num_threads, bool):
        case.errors.add(ValueError)
    elif isinstance(num_threads, (bool, float, str)):
        case.errors.add(TypeError)

    for v in (tok, pos, seg, tok_ids, seg_ids, position_ids, ln_w, ln_b):
        if isinstance(v, np.ndarray):
            case.arrays.append((v, v.copy()))

    # Large results take the non-temporal-store path; make small ones take it too.
    stream = draw.bool()

    # The layer's position rule (drawn last, so that earlier decisions of an input keep their bytes).
    kind, rule_arg, rule_pos = "absolute", None, None
    if api == "layer":
        kind = (
            force["position_rule"]
            if "position_rule" in force
            else draw.pick(["absolute", "absolute", "padding", "offset"])
        )
        rule_arg = (kind, draw.int(0, npos + 1) if kind == "padding" else draw.int(1, 3))
    if from_rule and kind == "padding":
        rule_pos = _padding_positions(case, tok_eff, rule_arg[1], npos, n, tok_dtype_fault)
    elif from_rule:
        offset = rule_arg[1] if kind == "offset" else 0
        if seq + offset > npos:
            case.errors.add(ValueError)
        elif offset and tok_eff.ndim in (1, 2):
            rule_pos = np.broadcast_to(np.arange(offset, offset + seq), tok_eff.shape).copy()
    pos_ref = pos_eff if pos_eff is not None else rule_pos

    # Run it.
    outcome = "ok"
    tags: list[str] = []
    try:
        got = _call(
            case,
            api,
            stream,
            tok_ids,
            seg_ids,
            tok,
            pos,
            seg,
            position_ids,
            ln_w,
            ln_b,
            eps_choice,
            out,
            dtype_choice,
            num_threads,
            td_value,
            rule_arg,
        )
    except (TypeError, ValueError, IndexError) as exc:
        if type(exc) not in case.errors | case.optional:
            raise AssertionError(
                f"unexpected {type(exc).__name__}: {exc}; expected one of "
                f"{sorted(t.__name__ for t in case.errors) or 'success'}"
            ) from exc
        if isinstance(out, np.ndarray):
            assert _same_bits(out, case.out_before), "out modified on error"
        outcome = type(exc).__name__
    else:
        if case.errors:
            raise AssertionError(f"call succeeded, expected one of {sorted(t.__name__ for t in case.errors)}")
        if out is not None:
            assert got is out, "the result is not `out`"
        tok_mag = None
        if td is not None:  # the reference reads what the layer stores
            (tok_n, pos_n, seg_n), tok_mag = _stored_tables(case, td, tok_n, stores)
        # The kernel computes in float64 when a table or the result is float64.
        fp32 = rdtype != F64 and "float64" not in stores
        tags = [f"api={api}", f"result={rdtype.name}", "float32 arithmetic" if fp32 else "float64 arithmetic"]
        tags += [f"{name} table stored" for name in sorted(set(stores) - {None})]
        tags += ["layernorm"] if ln is not None else []
        tags += [f"layer table_dtype={td}", f"layer position rule {kind}"] if api == "layer" else []
        if n == 0:  # nothing to look up (reference() asserts on a 0-row table)
            _check_kind(got, rdtype, rshape)
            return outcome, ["empty"]
        ref = reference(
            tok_eff,
            seg_eff,
            tok_n,
            pos_n,
            seg_n,
            position_ids=pos_ref,
            ln_weight=None if ln is None else ln[0],
            ln_bias=None if ln is None else ln[1],
            ln_eps=case.eps,
            dtype=rdtype,
        )
        with np.errstate(all="ignore"):
            case.raw_sum = reference(tok_eff, seg_eff, tok_n, pos_n, seg_n, position_ids=pos_ref)
            tok_abs = np.abs(tok_n) if tok_mag is None else tok_mag
            case.abs_ref = reference(
                tok_eff, seg_eff, tok_abs, np.abs(pos_n), None if seg_n is None else np.abs(seg_n), position_ids=pos_ref
            )
            case.conv_mag = 0.0
            if fp32 and tok_mag is not None:  # int8: q * scale + offset rounded in float32
                case.conv_mag = tok_mag[np.asarray(tok_eff, np.int64)]
            _check_result(case, got, ref, rdtype, fp32, ln)
    for arr, before in case.arrays:
        if arr.dtype.kind == "O":  # NaN != NaN inside object arrays
            assert repr(arr.tolist()) == repr(before.tolist()), "an input array was modified"
        else:
            assert _same_bits(arr, before), "an input array was modified"
    return outcome, tags


# ------------------------------------------------------------------ drivers


def TestOneInput(data: bytes) -> None:
    with np.errstate(all="ignore"):
        run_case(AtherisDraw(atheris.FuzzedDataProvider(data)))


def hypothesis_main(argv: list[str]) -> None:
    """The fallback: hypothesis runs until ``-max_total_time`` seconds have passed."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(
        max_examples=500, deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck)
    )
    @given(st.data())
    def fuzz(data):
        with np.errstate(all="ignore"):
            run_case(HypothesisDraw(data))

    budget = max_total_time(argv)
    end = time.monotonic() + budget
    while time.monotonic() < end:
        fuzz()
    print(f"fuzz_embed (hypothesis fallback): {budget:.0f} s, no failure")
    print_stats()


def print_stats(file=None) -> None:
    """How many cases ran, their outcomes, and what the successful ones exercised."""
    total = sum(OUTCOMES.values())
    if not total:
        return
    out = file or sys.stdout
    print(f"fuzz_embed: {total} cases", file=out)
    for name, k in OUTCOMES.most_common():
        print(f"  {name:<12} {k:>8}  {100.0 * k / total:5.1f}%", file=out)
    ok = OUTCOMES["ok"]
    print(f"  successful calls ({ok}), by what they exercised:", file=out)
    for name, k in sorted(FEATURES.items()):
        print(f"    {name:<26} {k:>8}", file=out)


def main(argv: list[str]) -> None:
    use_hypothesis = atheris is None or os.environ.get("FUZZ_EMBED_HYPOTHESIS") == "1"
    if not use_hypothesis and gcc_asan_preloaded():
        print(
            "fuzz_embed: GCC ASan runtime preloaded, atheris would get no coverage; using the hypothesis driver",
            file=sys.stderr,
        )
        use_hypothesis = True
    if use_hypothesis:
        hypothesis_main(argv)
        return
    atexit.register(print_stats, sys.stderr)  # (atheris.Fuzz() ends the process)
    atheris.Setup(argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
