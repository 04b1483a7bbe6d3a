"""The kernel against the plain-NumPy reference, over shapes, dtypes and layouts."""

import itertools

import numpy as np
import pytest
from helpers.reference import reference, tolerance

from bertembed import BertEmbeddings, bert_embeddings

FLOATS = [np.float32, np.float64]
INTS = [np.int32, np.int64]


def make(rng, b, s, v=40, p=20, g=3, h=12, tdt=np.float64, sdt=np.float64, idt=np.int64):
    tok = rng.standard_normal((v, h)).astype(tdt)
    pos = rng.standard_normal((p, h)).astype(sdt)
    seg = rng.standard_normal((g, h)).astype(sdt)
    ids = rng.integers(0, v, (b, s)).astype(idt)
    sids = rng.integers(0, g, (b, s)).astype(idt)
    return ids, sids, tok, pos, seg


def rtol_for(table_dtypes, result_dtype):
    """float32 anywhere in the chain: float32 tolerance; else float64's."""
    if np.float32 in (*table_dtypes, result_dtype):
        return tolerance(np.float32)
    return tolerance(np.float64)


@pytest.mark.parametrize(("tdt", "sdt", "rdt", "idt"), list(itertools.product(FLOATS, FLOATS, FLOATS, INTS)))
def test_all_dtype_combinations(rng, tdt, sdt, rdt, idt):
    for b, s in [(1, 1), (3, 7), (5, 20)]:
        ids, sids, tok, pos, seg = make(rng, b, s, tdt=tdt, sdt=sdt, idt=idt)
        got = bert_embeddings(ids, sids, tok, pos, seg, dtype=rdt)
        assert got.dtype == rdt and got.shape == (b, s, 12)
        want = reference(ids, sids, tok, pos, seg, dtype=rdt)
        np.testing.assert_allclose(got, want, **rtol_for((tdt, sdt), rdt))


def test_float32_tables_float64_result_is_exact_float64_sum(rng):
    """Widened row by row and summed in float64: equal to NumPy's float64 sum."""
    ids, sids, tok, pos, seg = make(rng, 4, 9, tdt=np.float32, sdt=np.float32)
    got = bert_embeddings(ids, sids, tok, pos, seg, dtype=np.float64)
    t64, p64, g64 = (x.astype(np.float64) for x in (tok, pos, seg))
    np.testing.assert_array_equal(got, t64[ids] + p64[np.arange(9)] + g64[sids])


def test_float64_is_bit_exact(rng):
    ids, sids, tok, pos, seg = make(rng, 6, 11)
    got = bert_embeddings(ids, sids, tok, pos, seg)
    np.testing.assert_array_equal(got, tok[ids] + pos[np.arange(11)] + seg[sids])


def test_mixed_position_and_segment_table_dtypes(rng):
    ids, sids, tok, pos, seg = make(rng, 2, 5)
    got = bert_embeddings(ids, sids, tok, pos.astype(np.float32), seg)
    want = reference(ids, sids, tok, pos.astype(np.float32), seg)
    np.testing.assert_allclose(got, want, **tolerance(np.float64))


@pytest.mark.parametrize("seed", range(25))
def test_random_shapes(seed):
    rng = np.random.default_rng(seed)
    b, s, h = rng.integers(0, 9), rng.integers(0, 30), rng.integers(1, 70)
    v, p, g = rng.integers(1, 100), s + rng.integers(1, 5), rng.integers(1, 4)
    ids, sids, tok, pos, seg = make(rng, b, s, v=v, p=p, g=g, h=h)
    threads = int(rng.integers(1, 4))
    got = bert_embeddings(ids, sids, tok, pos, seg, num_threads=threads)
    assert got.shape == (b, s, h)
    np.testing.assert_allclose(got, reference(ids, sids, tok, pos, seg), **tolerance(np.float64))


@pytest.mark.parametrize(("b", "s"), [(0, 5), (3, 0), (0, 0)])
def test_empty_batch_or_sequence(rng, b, s):
    ids, sids, tok, pos, seg = make(rng, b, s)
    got = bert_embeddings(ids, sids, tok, pos, seg)
    assert got.shape == (b, s, 12) and got.dtype == np.float64
    out = np.empty((b, s, 12), np.float32)
    assert bert_embeddings(ids, sids, tok, pos, seg, out=out) is out


def test_empty_python_lists(rng):
    _, _, tok, pos, seg = make(rng, 1, 1)
    assert bert_embeddings([], None, tok, pos, seg).shape == (0, 12)
    assert bert_embeddings([[]], [[]], tok, pos, seg).shape == (1, 0, 12)


def test_one_dimensional_ids(rng):
    ids, sids, tok, pos, seg = make(rng, 1, 9)
    got = bert_embeddings(ids[0], sids[0], tok, pos, seg)
    assert got.shape == (9, 12)
    np.testing.assert_array_equal(got, bert_embeddings(ids, sids, tok, pos, seg)[0])


def test_non_contiguous_and_fortran_inputs(rng):
    ids, sids, tok, pos, seg = make(rng, 6, 10, h=16)
    want = reference(ids, sids, tok, pos, seg)
    tok_strided = np.repeat(tok, 2, axis=1)[:, ::2]  # a column-strided view, equal values
    assert not tok_strided.flags.c_contiguous
    cases = {
        "fortran ids": (np.asfortranarray(ids), np.asfortranarray(sids), tok, pos, seg),
        "strided ids": (np.repeat(ids, 2, axis=1)[:, ::2], sids, tok, pos, seg),
        "strided table": (ids, sids, tok_strided, pos, seg),
        "fortran tables": (ids, sids, np.asfortranarray(tok), np.asfortranarray(pos), seg),
        "reversed rows": (ids, sids, tok[::-1][::-1], pos, seg[::-1].copy()[::-1]),
    }
    for name, args in cases.items():
        np.testing.assert_allclose(bert_embeddings(*args), want, err_msg=name, **tolerance(np.float64))


def test_transposed_ids(rng):
    ids, sids, tok, pos, seg = make(rng, 7, 4)
    got = bert_embeddings(ids.T, sids.T, tok, pos, seg)
    np.testing.assert_allclose(got, reference(ids.T, sids.T, tok, pos, seg), **tolerance(np.float64))


def test_big_endian_inputs(rng):
    ids, sids, tok, pos, seg = make(rng, 3, 8)
    be = {"ids": ids.astype(">i8"), "sids": sids.astype(">i4")}
    got = bert_embeddings(be["ids"], be["sids"], tok.astype(">f8"), pos.astype(">f4"), seg.astype(">f4"))
    want = reference(ids, sids, tok, pos.astype(np.float32), seg.astype(np.float32))
    np.testing.assert_allclose(got, want, **tolerance(np.float64))


def test_read_only_inputs(rng):
    ids, sids, tok, pos, seg = make(rng, 3, 8)
    for a in (ids, sids, tok, pos, seg):
        a.flags.writeable = False
    got = bert_embeddings(ids, sids, tok, pos, seg, position_ids=np.arange(8))
    np.testing.assert_array_equal(got, reference(ids, sids, tok, pos, seg))


def test_read_only_memmap_table(rng, tmp_path):
    ids, sids, tok, pos, seg = make(rng, 3, 8, tdt=np.float32)
    path = tmp_path / "tok.npy"
    np.save(path, tok)
    mm = np.load(path, mmap_mode="r")
    assert not mm.flags.writeable
    layer = BertEmbeddings(mm, pos, seg)
    np.testing.assert_allclose(
        layer(ids, sids), reference(ids, sids, tok, pos, seg, dtype=np.float32), **tolerance(np.float32)
    )


def test_all_integer_id_dtypes(rng):
    ids, sids, tok, pos, seg = make(rng, 2, 6)
    want = reference(ids, sids, tok, pos, seg)
    for dt in [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]:
        got = bert_embeddings(ids.astype(dt), sids.astype(dt), tok, pos, seg, position_ids=np.arange(6, dtype=dt))
        np.testing.assert_array_equal(got, want, err_msg=str(dt))


def test_float16_tables_are_read_as_they_are(rng):
    ids, sids, tok, pos, seg = make(rng, 2, 6)
    h16 = [x.astype(np.float16) for x in (tok, pos, seg)]
    got = bert_embeddings(ids, sids, *h16, dtype=np.float32)
    want = reference(ids, sids, *[x.astype(np.float32) for x in h16], dtype=np.float32)
    np.testing.assert_allclose(got, want, **tolerance(np.float32))


def test_position_ids_variants(rng):
    ids, sids, tok, pos, seg = make(rng, 3, 6, p=20)
    offset = np.arange(6) + 7
    per_row = rng.integers(0, 20, (3, 6))
    for p_ids in (offset, offset[None, :], per_row, per_row.astype(np.int32)):
        got = bert_embeddings(ids, sids, tok, pos, seg, position_ids=p_ids)
        want = reference(ids, sids, tok, pos, seg, position_ids=p_ids)
        np.testing.assert_allclose(got, want, **tolerance(np.float64))


def test_no_segment_table(rng):
    ids, _, tok, pos, _ = make(rng, 3, 6)
    got = bert_embeddings(ids, None, tok, pos, None)
    np.testing.assert_array_equal(got, tok[ids] + pos[:6])


def test_default_segment_ids_are_zero(rng):
    ids, _, tok, pos, seg = make(rng, 3, 6)
    np.testing.assert_array_equal(
        bert_embeddings(ids, None, tok, pos, seg), bert_embeddings(ids, np.zeros_like(ids), tok, pos, seg)
    )


def test_out_is_filled_and_returned(rng):
    ids, sids, tok, pos, seg = make(rng, 3, 6)
    out = np.full((3, 6, 12), np.nan, np.float32)
    res = bert_embeddings(ids, sids, tok, pos, seg, out=out)
    assert res is out
    np.testing.assert_allclose(out, reference(ids, sids, tok, pos, seg, dtype=np.float32), **tolerance(np.float32))


def test_nan_and_inf_propagate(rng):
    ids, sids, tok, pos, seg = make(rng, 2, 4)
    tok[ids[0, 1]] = np.nan
    pos[2, 3] = np.inf
    got = bert_embeddings(ids, sids, tok, pos, seg)
    want = reference(ids, sids, tok, pos, seg)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isfinite(want)], want[np.isfinite(want)])


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_thread_counts_agree(rng, threads):
    ids, sids, tok, pos, seg = make(rng, 16, 64, p=64, h=32)
    want = bert_embeddings(ids, sids, tok, pos, seg, num_threads=1)
    np.testing.assert_array_equal(bert_embeddings(ids, sids, tok, pos, seg, num_threads=threads), want)


def test_layer_matches_function(rng):
    ids, sids, tok, pos, seg = make(rng, 4, 10, tdt=np.float32, sdt=np.float32)
    layer = BertEmbeddings(tok, pos, seg)
    assert layer.dtype == np.float32
    np.testing.assert_array_equal(layer(ids, sids), bert_embeddings(ids, sids, tok, pos, seg, dtype=np.float32))
    layer64 = BertEmbeddings(tok, pos, seg, dtype=np.float64)
    np.testing.assert_array_equal(layer64(ids, sids), bert_embeddings(ids, sids, tok, pos, seg))


def test_layer_keeps_contiguous_tables_without_copy(rng):
    _, _, tok, pos, seg = make(rng, 1, 1, tdt=np.float32)
    layer = BertEmbeddings(tok, pos, seg)
    assert layer._tables.tok.data is tok
    assert layer._tables.pos.data is pos
    layer2 = BertEmbeddings(np.asfortranarray(tok), pos, seg)
    assert layer2._tables.tok.data.flags.c_contiguous and layer2._tables.tok.data is not tok


def test_layer_properties(rng):
    _, _, tok, pos, seg = make(rng, 1, 1, v=33, p=21, g=3, h=5)
    layer = BertEmbeddings(tok, pos, seg)
    assert (layer.vocab_size, layer.max_positions, layer.type_vocab_size, layer.hidden_size) == (33, 21, 3, 5)
    assert not layer.has_layer_norm
    assert "vocab_size=33" in repr(layer)
    assert BertEmbeddings(tok, pos).type_vocab_size == 0
