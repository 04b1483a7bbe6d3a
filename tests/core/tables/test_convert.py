"""Table conversion in the kernel (``table_dtype=``) against its plain-NumPy twin.

Every source dtype (float32, float64, float16, bfloat16, int8) converted to
every target (float16, bfloat16, float32, float64, int8) must equal
tests/helpers/table_conversion.py bit for bit, for odd shapes, empty tables,
non-contiguous and byte-swapped inputs, values that test the rounding
(ties, float16 subnormals and overflow, NaN and inf), with one thread and
with several. NaN or inf in a table being quantised is an error naming the
table and its first bad row.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from helpers.extras import needs
from helpers.table_conversion import convert as twin_convert
from helpers.table_conversion import float32_to_bfloat16_bits

from bertembed import BertEmbeddings
from bertembed._core import tables

ml_dtypes = needs("ml_dtypes", "bfloat16")
BF16 = np.dtype(ml_dtypes.bfloat16)

SOURCES = ["float32", "float64", "float16", "bfloat16", "int8"]
TARGETS = ["float16", "bfloat16", "float32", "float64", "int8"]
SHAPES = [(1, 1), (3, 7), (4, 8), (5, 9), (6, 129), (3, 300), (2, 1000), (40, 37)]


def _values(rng, shape, *, hard=False):
    """Random float64 values; `hard` mixes in values that test the rounding."""
    v = rng.standard_normal(shape) * np.exp(rng.uniform(-3, 3, (shape[0], 1)))
    if hard and v.size:
        flat = v.reshape(-1)
        picks = np.array(
            [
                0.0,
                -0.0,
                1.0,
                -1.5,
                65504.0,
                65519.99,
                65520.0,
                1e6,
                6.0e-8,
                2.0**-25,
                3 * 2.0**-25,
                2.0**-14 * (1 - 2.0**-11),
                1 + 2.0**-11,
                1 + 3 * 2.0**-11,
                1 + 2.0**-8,
                1 + 3 * 2.0**-8,
                1e-40,
                3.4e38,
                1e300,
                -1e-300,
            ]
        )
        where = rng.choice(flat.size, min(flat.size, 3 * picks.size), replace=False)
        flat[where] = rng.choice(picks, where.size)
    return v


def _source(values, kind):
    """(data as the layer stores it, scale) of `values` stored as `kind`."""
    if kind == "bfloat16":
        with np.errstate(over="ignore"):
            return float32_to_bfloat16_bits(values.astype(np.float32)).view(BF16), None
    if kind == "int8":
        q, scale = twin_convert(values, "float64", "int8")
        return q, scale
    with np.errstate(over="ignore"):
        return values.astype(kind), None


def _table(data, kind, scale=None):
    if kind == "int8":
        return tables.Table(data, tables.I8, scale)
    return tables.as_table("token_embeddings", data)


def _assert_same(got: tables.Table, want, target):
    data, scale = want
    assert got.dtype_name == target
    gd = np.asarray(got.data)
    if target == "bfloat16":
        gd = gd.view(np.uint16)
    assert gd.shape == data.shape
    if target in ("float16", "float32", "float64", "bfloat16"):
        # bit for bit, except that any NaN matches any NaN
        as_float = gd.view(BF16) if target == "bfloat16" else gd
        want_float = data.view(BF16) if target == "bfloat16" else data
        nan = np.isnan(want_float.astype(np.float64))
        np.testing.assert_array_equal(np.isnan(as_float.astype(np.float64)), nan)
        uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[gd.dtype.itemsize]
        np.testing.assert_array_equal(gd.view(uint)[~nan], data.view(uint)[~nan])
    else:
        np.testing.assert_array_equal(gd, data)
        np.testing.assert_array_equal(got.scale.view(np.uint32), scale.view(np.uint32))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("source", SOURCES)
def test_every_source_and_target_equals_the_twin(source, target, threads):
    rng = np.random.default_rng(zlib.crc32(f"{source} {target}".encode()))
    for shape in SHAPES:
        for hard in (False, True):
            if hard and (target == "int8" or source == "int8"):
                hard = False  # huge values: quantising them is tested below
            data, scale = _source(_values(rng, shape, hard=hard), source)
            table = _table(data, source, scale)
            if target == source:
                assert tables.convert(table, "t", target) is table
                continue
            want = twin_convert(
                np.asarray(data).view(np.uint16) if source == "bfloat16" else data, source, target, scale
            )
            _assert_same(tables.convert(table, "t", target, num_threads=threads), want, target)


def test_float64_to_float16_rounds_once():
    """Values whose float32 rounding would move them onto a float16 tie."""
    ulp16 = 2.0**-10
    ties = 1 + ulp16 / 2 + np.array([2.0**-40, -(2.0**-40), 2.0**-30, 0.0])
    sub = 2.0**-24 * (np.array([0.5, 1.5, 2.5, 0.5 + 2.0**-30, 1023.5, 1023.75]))
    values = np.concatenate([ties, -ties, sub, -sub, [65519.999999, 65520.0, np.inf, -np.inf, np.nan]])
    got = tables.convert(tables.as_table("t", values.reshape(1, -1)), "t", "float16")
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got.data[0], values.astype(np.float16))


def test_bfloat16_matches_ml_dtypes():
    rng = np.random.default_rng(3)
    values = (rng.standard_normal((7, 333)) * 10.0 ** rng.integers(-40, 38, (7, 1))).astype(np.float32)
    got = tables.convert(tables.as_table("t", values), "t", "bfloat16")
    np.testing.assert_array_equal(got.data.view(np.uint16), values.astype(BF16).view(np.uint16))


@pytest.mark.parametrize("target", TARGETS)
def test_empty_tables(target):
    for kind in ("float32", "float64", "float16", "bfloat16"):
        data, _ = _source(np.zeros((0, 5)), kind)
        got = tables.convert(_table(data, kind), "t", target)
        assert got.data.shape == (0, 5) and got.dtype_name == target
        if target == "int8":
            assert got.scale.shape == (0, 2)


@pytest.mark.parametrize("target", TARGETS)
def test_non_contiguous_and_byte_swapped_tables(target):
    rng = np.random.default_rng(5)
    base = rng.standard_normal((30, 50)).astype(np.float32)
    variants = {
        "rows": base[::3],
        "columns": base[:, 3:40],
        "strided": base[1::2, ::3],
        "fortran": np.asfortranarray(base),
        "swapped": base.astype(">f4"),
        "swapped-f64": base.astype(">f8")[::2],
        "swapped-f16": base.astype(">f2"),
    }
    for name, arr in variants.items():
        layer = BertEmbeddings(arr, np.zeros((4, arr.shape[1]), np.float32), table_dtype=target)
        native = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("="))
        kind = native.dtype.name
        want = twin_convert(native, kind, target)
        if kind == target:
            np.testing.assert_array_equal(layer._tables.tok.data, native, err_msg=name)
        else:
            _assert_same(layer._tables.tok, want, target)


def test_several_blocks_with_progress(monkeypatch):
    monkeypatch.setattr(tables, "_BLOCK_BYTES", 64 * 4 * 7)  # 7 rows a block
    rng = np.random.default_rng(7)
    values = rng.standard_normal((100, 64)).astype(np.float32)
    seen = []
    got = tables.convert(
        tables.as_table("t", values),
        "token_embeddings",
        "int8",
        progress=lambda done, total, label: seen.append((done, total, label)),
    )
    _assert_same(got, twin_convert(values, "float32", "int8"), "int8")
    assert [d for d, _, _ in seen] == [*range(7, 100, 7), 100]
    assert {(t, lab) for _, t, lab in seen} == {(100, "converting token_embeddings to int8")}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_name_the_table_and_first_row(bad, threads, monkeypatch):
    monkeypatch.setattr(tables, "_BLOCK_BYTES", 16 * 4 * 10)  # 10 rows a block: the bad rows in later blocks
    rng = np.random.default_rng(11)
    for source in ("float32", "float64", "float16", "bfloat16"):
        values = rng.standard_normal((60, 16))
        values[23, 5] = bad
        values[41, 0] = bad
        values[57, 15] = bad
        data, _ = _source(values, source)
        with pytest.raises(
            ValueError,
            match=r"^cannot quantise a table holding NaN or inf to int8: "
            r"token_embeddings row 23 holds one$",
        ):
            tables.convert(_table(data, source), "token_embeddings", "int8", num_threads=threads)
        # Other targets keep them.
        got = tables.convert(_table(data, source), "token_embeddings", "float16", num_threads=threads)
        assert np.isnan(got.data[23, 5]) if np.isnan(bad) else got.data[23, 5] == bad


def test_errors_through_the_layer_name_the_table():
    tok, pos = np.zeros((5, 8)), np.zeros((4, 8))
    tok[3, 2] = np.inf
    with pytest.raises(ValueError, match=r"token_embeddings row 3 holds one"):
        BertEmbeddings(tok, pos, table_dtype="int8")


def test_a_range_too_wide_for_a_float32_scale_is_refused():
    tok = np.zeros((3, 4))
    tok[1] = [-1e300, 0.0, 1.0, 1e300]
    with pytest.raises(
        ValueError,
        match=r"^cannot quantise token_embeddings to int8: row 1 spans -1e\+300 to "
        r"1e\+300, too wide a range for a float32 scale$",
    ):
        tables.convert(tables.as_table("t", tok), "token_embeddings", "int8")
    with pytest.raises(ValueError, match="too wide a range"):
        twin_convert(tok, "float64", "int8")


def test_quantised_rows_keep_their_promises():
    """Every element within a step of its row; each row's mean error removed; its whole range used."""
    rng = np.random.default_rng(13)
    values = rng.standard_normal((50, 384)) * rng.uniform(0.001, 10, (50, 1)) + rng.uniform(-5, 5, (50, 1))
    got = tables.convert(tables.as_table("t", values), "t", "int8")
    q, scale = got.data, got.scale.astype(np.float64)
    err = q * scale[:, :1] + scale[:, 1:] - values
    assert (np.abs(err) <= scale[:, :1] * (1 + 1e-5)).all()
    assert (np.abs(err.mean(axis=1)) <= 1e-6 * scale[:, 0] + 1e-6 * np.abs(scale[:, 1])).all()
    assert (q.min(axis=1) == -128).all() and (q.max(axis=1) == 127).all()


@pytest.mark.skipif(
    not getattr(__import__("sys"), "_is_gil_enabled", lambda: True)(),
    reason="free-threaded build: there is no GIL to release",
)
def test_conversion_releases_the_gil():
    from helpers.gil import longest_stall

    from bertembed._core import _kernel

    values = np.random.default_rng(17).standard_normal((20000, 768)).astype(np.float32)
    src = tables.Table(values, tables.F32)
    dst = tables.Table(np.empty(values.shape, np.int8), tables.I8, np.empty((20000, 2), np.float32))

    def convert():
        for _ in range(2):
            _kernel.convert_rows(src, dst, 0, values.shape[0], 1)

    convert()  # warm-up: the result's pages
    fractions = [(lambda d, s: s / d)(*longest_stall(convert)) for _ in range(3)]
    assert min(fractions) < 0.5, f"another Python thread stalled for most of each conversion: {fractions}"
