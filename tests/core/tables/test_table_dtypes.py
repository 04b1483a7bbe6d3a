"""float16, bfloat16 and int8 tables, float16 and bfloat16 results: read and
written by the kernel as they are, compared with the float64 twin and, for
the conversions themselves, bit for bit with NumPy and ml_dtypes."""

import os
import platform
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers.extras import needs
from helpers.reference import result_tolerance, twin, values64

from bertembed import BertEmbeddings, bert_embeddings

# The row kernels this machine's build may hold, narrowest first
# (BERTEMBED_ISA names one as a cap).
ISAS = ["baseline", "neon"] if platform.machine().lower() in ("aarch64", "arm64") else ["baseline", "avx2", "avx512"]

ml_dtypes = needs("ml_dtypes", "bfloat16")
BF16 = np.dtype(ml_dtypes.bfloat16)
TABLE_DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
RESULT_DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]


def _tables(rng, h, dtypes, v=40, p=12):
    tok, pos, seg = (rng.standard_normal((n, h)) for n in (v, p, 2))
    return [x.astype(dt) for x, dt in zip((tok, pos, seg), dtypes, strict=True)]


@pytest.mark.parametrize("tok_dt", TABLE_DTYPES, ids=str)
@pytest.mark.parametrize("small_dt", TABLE_DTYPES, ids=str)
@pytest.mark.parametrize("rdt", RESULT_DTYPES, ids=str)
@pytest.mark.parametrize("ln", [False, True])
def test_every_table_and_result_dtype(rng, tok_dt, small_dt, rdt, ln):
    h = 37  # odd: vector bodies and scalar tails both run
    tok, pos, seg = _tables(rng, h, (tok_dt, small_dt, small_dt))
    ids, sids = rng.integers(0, 40, (3, 12)), rng.integers(0, 2, (3, 12))
    kw = dict(ln_weight=rng.uniform(0.5, 2, h), ln_bias=rng.standard_normal(h)) if ln else {}
    want = twin(ids, tok, pos=pos, seg=seg, segment_ids=sids, **kw)
    for threads in (1, 2):
        got = bert_embeddings(ids, sids, tok, pos, seg, dtype=rdt, num_threads=threads, **kw)
        assert got.dtype == rdt
        np.testing.assert_allclose(got.astype(np.float64), want, **result_tolerance(rdt))


def test_low_precision_tables_are_not_copied(rng):
    for dt in (np.float16, BF16):
        tok, pos, seg = _tables(rng, 8, (dt, dt, dt))
        layer = BertEmbeddings(tok, pos, seg)
        assert layer._tables.tok.data is tok and layer._tables.pos.data is pos
        assert layer.table_dtype == np.dtype(dt).name
        assert layer.dtype == np.float32  # results in float32 by default
        assert layer.nbytes == tok.nbytes + pos.nbytes + seg.nbytes


def test_float64_result_of_float32_arithmetic_rule(rng):
    """float16 tables with a float64 result are summed in float64: exactly the
    float64 sum of the float16 values."""
    tok, pos, seg = _tables(rng, 16, (np.float16,) * 3)
    ids, sids = rng.integers(0, 40, (2, 12)), rng.integers(0, 2, (2, 12))
    got = bert_embeddings(ids, sids, tok, pos, seg, dtype=np.float64)
    np.testing.assert_array_equal(got, twin(ids, tok, pos=pos, seg=seg, segment_ids=sids))


@pytest.mark.parametrize("small_dt", [np.dtype(np.float32), BF16], ids=str)
@pytest.mark.parametrize("rdt", [np.float32, np.float64])
def test_int8_token_table(rng, rdt, small_dt):
    """With float32 position and segment tables, and with bfloat16 ones (an int8
    token table quantised from a bfloat16 checkpoint). h = 40: each body's
    vector steps and its scalar tail run."""
    h = 40
    tok, pos, seg = _tables(rng, h, (np.float32, small_dt, small_dt))
    w, b = rng.uniform(0.5, 2, h), rng.standard_normal(h)
    layer = BertEmbeddings(tok, pos, seg, ln_weight=w, ln_bias=b, table_dtype="int8", dtype=rdt)
    assert layer.table_dtype == "int8"
    q, scale = layer._tables.tok.data, layer._tables.tok.scale
    assert q.dtype == np.int8 and scale.dtype == np.float32 and scale.shape == (40, 2)
    assert (q.min(axis=1) == -128).all() and (q.max(axis=1) == 127).all()  # each row's whole range
    # Every element is within one step of its row (half a step of rounding,
    # and at most half a step of shift from the offset that removes the mean error).
    step = scale[:, :1].astype(np.float64)
    err = np.abs(q * step + scale[:, 1:] - tok)
    assert (err <= step * (1 + 1e-5)).all()
    assert np.abs((q * step + scale[:, 1:] - tok).mean(axis=1)).max() < 1e-3 * step.max()
    ids, sids = rng.integers(0, 40, (3, 12)), rng.integers(0, 2, (3, 12))
    want = twin(ids, q, tok_scale=scale, pos=pos, seg=seg, segment_ids=sids, ln_weight=w, ln_bias=b)
    np.testing.assert_allclose(layer(ids, sids), want, **result_tolerance(rdt))
    # int8 stores the token table only; the others are kept as they are.
    assert np.shares_memory(layer._tables.pos.data, pos)
    assert layer.nbytes == q.nbytes + scale.nbytes + pos.nbytes + seg.nbytes


def test_int8_rows_of_zeros_and_non_finite_values(rng):
    tok = rng.standard_normal((5, 8))
    tok[2] = 0.0
    tok[3] = 0.25  # constant rows are exact
    layer = BertEmbeddings(tok, np.zeros((4, 8)), table_dtype="int8")
    assert layer._tables.tok.scale[2, 0] == 0 and layer._tables.tok.scale[3, 0] == 0
    np.testing.assert_array_equal(layer([[3]]), np.full((1, 1, 8), 0.25, np.float32))
    np.testing.assert_array_equal(layer([[2, 2]]), np.zeros((1, 2, 8), np.float32))
    tok[1, 3] = np.nan
    with pytest.raises(ValueError, match="cannot quantise a table holding NaN or inf to int8"):
        BertEmbeddings(tok, np.zeros((4, 8)), table_dtype="int8")


@pytest.mark.parametrize("target", ["float16", "bfloat16", "float32", "float64"])
def test_table_dtype_converts_every_table(rng, target):
    tok, pos, seg = _tables(rng, 8, (np.float32,) * 3)
    layer = BertEmbeddings(tok, pos, seg, table_dtype=target)
    assert layer.table_dtype == target
    for table, original in ((layer._tables.tok, tok), (layer._tables.pos, pos), (layer._tables.seg, seg)):
        assert table.dtype_name == target
        rounded = original.astype(BF16 if target == "bfloat16" else target)
        np.testing.assert_array_equal(values64(table.data), rounded.astype(np.float64))


def test_table_dtype_errors(rng):
    tok, pos, seg = _tables(rng, 8, (np.float32,) * 3)
    with pytest.raises(ValueError, match=r"^table_dtype must be one of float32, float64, float16, bfloat16, int8"):
        BertEmbeddings(tok, pos, seg, table_dtype="int4")
    with pytest.raises(TypeError, match=r"^table_dtype must be one of"):
        BertEmbeddings(tok, pos, seg, table_dtype=object())


def test_uint16_and_int8_arrays_are_not_tables(rng):
    """Raw bits or quantised values without their meaning are refused."""
    tok, pos, seg = _tables(rng, 8, (np.float32,) * 3)
    for bad in (tok.view(np.uint16), np.zeros((40, 8), np.int8)):
        with pytest.raises(TypeError, match=r"^token_embeddings must be a float32, float64, float16 or bfloat16"):
            bert_embeddings([[1]], None, bad, pos, seg)


def test_byte_swapped_bfloat16_results_are_refused_and_tables_are_read(rng):
    """A big-endian bfloat16 result would be written in native order and read
    back as other values: refused like a byte-swapped float16 one. A
    byte-swapped bfloat16 table is read as NumPy reads it."""
    swapped = BF16.newbyteorder()
    tok, pos, seg = _tables(rng, 8, (BF16,) * 3)
    ids = rng.integers(0, 40, (2, 5))
    with pytest.raises(TypeError, match=r"^dtype must be float32, float64, float16 or bfloat16, got >V2$"):
        bert_embeddings(ids, None, tok, pos, seg, dtype=swapped)
    with pytest.raises(TypeError, match=r"^dtype must be float32, float64, float16 or bfloat16, got >V2$"):
        BertEmbeddings(tok, pos, seg, dtype=swapped)
    with pytest.raises(TypeError, match=r"^out has dtype >V2, expected float64$"):  # as for >f2
        bert_embeddings(ids, None, tok, pos, seg, out=np.zeros((2, 5, 8), swapped))
    layer = BertEmbeddings(tok, pos, seg, dtype=BF16)
    out = np.zeros((2, 5, 8), swapped)
    with pytest.raises(TypeError, match=r"^out has dtype >V2, expected bfloat16$"):
        layer(ids, out=out)
    assert (out.astype(np.float64) == 0).all()
    got = bert_embeddings(ids, None, tok.astype(swapped), pos, seg, dtype=np.float64)
    np.testing.assert_array_equal(got, twin(ids, values64(tok), pos=values64(pos), seg=values64(seg)))


# --------------------------------------------------- the conversions themselves

CONVERSIONS = textwrap.dedent(
    """
    import sys
    import numpy as np, ml_dtypes
    from bertembed import bert_embeddings
    from bertembed._core import _kernel
    bf16 = np.dtype(ml_dtypes.bfloat16)
    every = np.arange(65536, dtype=np.uint16)

    def same(got, want, what):
        got, want = np.asarray(got).ravel(), np.asarray(want).ravel()
        gn, wn = np.isnan(got.astype(np.float32)), np.isnan(want.astype(np.float32))
        assert (gn == wn).all(), what + ": NaN pattern"
        bits = {2: np.uint16, 4: np.uint32}[got.dtype.itemsize]
        bad = (got.view(bits) != want.view(bits)) & ~gn
        assert not bad.any(), (what, got[bad][:5], want[bad][:5])

    def one_table(table, dtype):
        # No position term: each row is the table row itself, converted.
        v, h = table.shape
        return bert_embeddings(np.arange(v)[None], None, table, None, None, dtype=dtype)[0]

    # every float16 and every bfloat16 value, widened to float32 and float64
    for name, dt in (("float16", np.float16), ("bfloat16", bf16)):
        table = every.view(dt).reshape(-1, 16)
        same(one_table(table, np.float32), table.astype(np.float32), name + " -> float32")
        same(one_table(table, np.float64).astype(np.float32), table.astype(np.float32), name + " -> float64")

    # float32 values narrowed: random bit patterns, plus every boundary case
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    special = np.array([0.0, -0.0, 65504, 65519.996, 65520, 65536, np.inf, -np.inf, np.nan,
                        2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-25 * 1.0000001,
                        1 + 2.0**-11, 1 + 3 * 2.0**-11, 3.3895314e38, 1.1754942e-38], np.float32)
    values = np.concatenate([bits.view(np.float32), special,
                             (every.view(np.float16).astype(np.float32)),
                             np.nextafter(every.view(np.float16).astype(np.float32), np.float32(np.inf))])
    values = values[: values.size // 16 * 16].reshape(-1, 16)
    with np.errstate(all="ignore"):
        same(one_table(values, np.float16), values.astype(np.float16), "float32 -> float16")
        same(one_table(values, bf16), values.astype(bf16), "float32 -> bfloat16")
    print(_kernel.build_info()["isa"])
    """
)


@pytest.mark.parametrize("isa", ISAS)
def test_conversions_bit_for_bit_on_each_isa(isa):
    """Every float16/bfloat16 value widened, and float32 values (random bits and
    the rounding, overflow, subnormal and NaN boundaries) narrowed, equal NumPy's
    and ml_dtypes' own conversions, with each instruction set's row kernel."""
    env = dict(os.environ, BERTEMBED_ISA=isa)
    res = subprocess.run([sys.executable, "-c", CONVERSIONS], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    order = ISAS
    assert order.index(res.stdout.strip()) <= order.index(isa)
