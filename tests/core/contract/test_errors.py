"""Bad input: every case raises a clear error, and nothing is lost."""

import numpy as np
import pytest

from bertembed import BertEmbeddings, bert_embeddings


def ids(rng, b=2, s=5, high=50):
    return rng.integers(0, high, (b, s))


# ---------------------------------------------------------------- id ranges


@pytest.mark.parametrize("bad", [50, 51, 2**31, -1, -50, -(2**40)])
def test_token_id_out_of_range(tables, rng, bad):
    t = ids(rng)
    t[1, 3] = bad
    with pytest.raises(
        IndexError,
        match=rf"^token_ids\[1, 3\] = {bad} is out of range for token_embeddings with 50 rows$",
    ):
        bert_embeddings(t, None, *tables)


def test_token_id_out_of_range_1d(tables):
    with pytest.raises(IndexError, match=r"^token_ids\[2\] = -1 is out"):
        bert_embeddings([1, 2, -1, 4], None, *tables)


def test_first_bad_id_is_reported(tables, rng):
    t = ids(rng)
    t[0, 4], t[1, 0] = 99, 77
    with pytest.raises(IndexError, match=r"token_ids\[0, 4\] = 99 "):
        bert_embeddings(t, None, *tables)


@pytest.mark.parametrize("bad", [2, -1, 2**33])
def test_segment_id_out_of_range(tables, rng, bad):
    g = np.zeros((2, 5), np.int64)
    g[0, 1] = bad
    with pytest.raises(
        IndexError,
        match=rf"^segment_ids\[0, 1\] = {bad} is out of range for segment_embeddings with 2 rows$",
    ):
        bert_embeddings(ids(rng), g, *tables)


@pytest.mark.parametrize("bad", [16, -1])
def test_position_id_out_of_range(tables, rng, bad):
    p = np.arange(5)
    p[4] = bad
    with pytest.raises(
        IndexError,
        match=rf"^position_ids\[4\] = {bad} is out of range for position_embeddings with 16 rows$",
    ):
        bert_embeddings(ids(rng), None, *tables, position_ids=p)


def test_uint64_id_reported_unwrapped(tables):
    t = np.array([[1, 2**64 - 1]], dtype=np.uint64)
    with pytest.raises(IndexError, match=r"token_ids\[0, 1\] = 18446744073709551615 is out"):
        bert_embeddings(t, None, *tables)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.uint8, np.uint16, np.uint32, ">i8", ">i4"])
def test_out_of_range_in_other_int_dtypes(tables, dtype):
    t = np.array([[1, 2, 120]], dtype=dtype)
    with pytest.raises(IndexError, match=r"token_ids\[0, 2\] = 120 is out"):
        bert_embeddings(t, None, *tables)


def test_sequence_longer_than_position_table(tables, rng):
    with pytest.raises(ValueError, match=r"sequence length 17 is larger than position_embeddings' 16 rows"):
        bert_embeddings(ids(rng, 1, 17), None, *tables)


def test_long_sequence_with_explicit_positions_is_fine(tables, rng):
    t = ids(rng, 1, 20)
    out = bert_embeddings(t, None, *tables, position_ids=np.arange(20) % 16)
    assert out.shape == (1, 20, 8)


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize(
    ("value", "dtype"),
    [
        (np.array([[True, False]]), "bool"),
        (np.array([[1.0, 2.0]]), "float64"),
        (np.array([[1.0, 2.0]], np.float32), "float32"),
        (np.array([[1 + 0j]]), "complex128"),
        (np.array([[1, 2]], dtype=object), "object"),
        (np.array([["a", "b"]]), "<U1"),
        ([[1.5, 2]], "float64"),
        ([["x"]], "<U1"),
    ],
)
def test_non_integer_ids_are_type_errors(tables, value, dtype):
    with pytest.raises(TypeError, match=rf"^token_ids must be an integer array, got dtype {dtype}$"):
        bert_embeddings(value, None, *tables)


def test_non_integer_segment_and_position_ids(tables):
    with pytest.raises(TypeError, match=r"^segment_ids must be an integer array, got dtype bool"):
        bert_embeddings([[1, 2]], [[True, False]], *tables)
    with pytest.raises(TypeError, match=r"^position_ids must be an integer array, got dtype float64"):
        bert_embeddings([[1, 2]], None, *tables, position_ids=[0.0, 1.0])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.complex128, np.longdouble, object])
def test_non_float_tables_are_type_errors(tables, dtype):
    tok, pos, seg = tables
    bad = np.ones((50, 8), dtype=dtype)
    name = np.dtype(dtype)
    floats = "float32, float64, float16 or bfloat16 array"
    with pytest.raises(TypeError, match=rf"^token_embeddings must be a {floats}, got dtype {name}"):
        bert_embeddings([[1]], None, bad, pos, seg)
    with pytest.raises(TypeError, match=rf"^position_embeddings must be a {floats}"):
        bert_embeddings([[1]], None, tok, bad[:16], seg)
    with pytest.raises(TypeError, match=rf"^segment_embeddings must be a {floats}"):
        bert_embeddings([[1]], None, tok, pos, bad[:2])


def test_table_that_is_not_numeric(tables):
    _, pos, seg = tables
    with pytest.raises(TypeError, match=r"^token_embeddings must be a 2-D float array"):
        bert_embeddings([[1]], None, [["a", "b"]], pos, seg)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, "float128", "complex64", "U3"])
def test_bad_result_dtype(tables, dtype):
    with pytest.raises(TypeError, match=r"^dtype must be float32, float64, float16 or bfloat16"):
        bert_embeddings([[1]], None, *tables, dtype=dtype)


# ---------------------------------------------------------------- shapes


def test_hidden_sizes_differ(tables):
    tok, pos, seg = tables
    with pytest.raises(
        ValueError,
        match=r"hidden sizes differ: token_embeddings has shape \(50, 8\), position_embeddings has shape \(16, 7\)",
    ):
        bert_embeddings([[1]], None, tok, pos[:, :7], seg)
    with pytest.raises(ValueError, match=r"segment_embeddings has shape \(2, 9\)"):
        bert_embeddings([[1]], None, tok, pos, np.zeros((2, 9)))


@pytest.mark.parametrize("shape", [(50,), (50, 8, 1), ()])
def test_tables_must_be_2d(tables, shape):
    _, pos, seg = tables
    with pytest.raises(ValueError, match=r"^token_embeddings must be 2-D \(rows, hidden\), got shape"):
        bert_embeddings([[1]], None, np.zeros(shape), pos, seg)


def test_zero_hidden_size(tables):
    with pytest.raises(ValueError, match=r"token_embeddings has hidden size 0"):
        bert_embeddings([[1]], None, np.zeros((5, 0)), np.zeros((5, 0)), None)


def test_segment_shape_mismatch(tables, rng):
    with pytest.raises(ValueError, match=r"segment_ids has shape \(2, 4\), token_ids has shape \(2, 5\)"):
        bert_embeddings(ids(rng), np.zeros((2, 4), int), *tables)


@pytest.mark.parametrize("shape", [(3,), (2, 4), (3, 5), (1, 1, 5)])
def test_position_ids_shape(tables, rng, shape):
    with pytest.raises(ValueError, match=r"position_ids has shape .*, expected \(S,\), \(1, S\) or \(B, S\)"):
        bert_embeddings(ids(rng), None, *tables, position_ids=np.zeros(shape, int))


@pytest.mark.parametrize("shape", [(), (1, 2, 3)])
def test_token_ids_rank(tables, shape):
    with pytest.raises(ValueError, match=r"token_ids must be 1-D \(S,\) or 2-D \(B, S\)"):
        bert_embeddings(np.zeros(shape, int), None, *tables)


def test_segment_ids_without_segment_table(tables, rng):
    tok, pos, _ = tables
    with pytest.raises(ValueError, match=r"segment_ids was given but there is no segment_embeddings table"):
        bert_embeddings(ids(rng), np.zeros((2, 5), int), tok, pos, None)


def test_default_segment_with_empty_segment_table(tables, rng):
    tok, pos, _ = tables
    with pytest.raises(IndexError, match=r"segment_ids \(default 0\) is out of range"):
        bert_embeddings(ids(rng), None, tok, pos, np.zeros((0, 8)))


# ---------------------------------------------------------------- out=


def test_out_wrong_shape(tables, rng):
    with pytest.raises(ValueError, match=r"^out has shape \(2, 5, 7\), expected \(2, 5, 8\)$"):
        bert_embeddings(ids(rng), None, *tables, out=np.empty((2, 5, 7)))


def test_out_wrong_dtype(tables, rng):
    with pytest.raises(TypeError, match=r"^out has dtype float32, expected float64$"):
        bert_embeddings(ids(rng), None, *tables, out=np.empty((2, 5, 8), np.float32), dtype=np.float64)
    with pytest.raises(TypeError, match=r"^out has dtype int64, expected float64$"):
        bert_embeddings(ids(rng), None, *tables, out=np.empty((2, 5, 8), np.int64))


def test_out_not_an_array(tables, rng):
    with pytest.raises(TypeError, match=r"^out must be a numpy.ndarray, got list"):
        bert_embeddings(ids(rng), None, *tables, out=[])


def test_out_read_only(tables, rng):
    out = np.zeros((2, 5, 8))
    out.flags.writeable = False
    with pytest.raises(ValueError, match=r"^out is read-only$"):
        bert_embeddings(ids(rng), None, *tables, out=out)


def test_out_non_contiguous(tables, rng):
    out = np.zeros((2, 5, 16))[:, :, ::2]
    with pytest.raises(ValueError, match=r"^out must be C-contiguous$"):
        bert_embeddings(ids(rng), None, *tables, out=out)
    fortran = np.zeros((2, 5, 8), order="F")
    with pytest.raises(ValueError, match=r"^out must be C-contiguous$"):
        bert_embeddings(ids(rng), None, *tables, out=fortran)


def test_out_overlapping_an_input(tables, rng):
    tok, pos, seg = tables
    big = np.zeros((50 + 80, 8))
    big[:50] = tok
    with pytest.raises(ValueError, match=r"^out overlaps an input array"):
        # out aliases the first ten rows of the token table
        bert_embeddings(ids(rng), None, big[:50], pos, seg, out=big[:10].reshape(2, 5, 8))
    # out aliasing the position table
    with pytest.raises(ValueError, match=r"^out overlaps an input array"):
        bert_embeddings(ids(rng), None, tok, pos, seg, out=pos[:10].reshape(2, 5, 8))


def test_out_overlapping_ids(tables):
    buf = np.zeros(16, np.float64)
    token_ids = buf.view(np.int64)[:2].reshape(1, 2)
    with pytest.raises(ValueError, match=r"^out overlaps an input array"):
        bert_embeddings(token_ids, None, *tables, out=buf.reshape(1, 2, 8))


# ---------------------------------------------------------------- other arguments


@pytest.mark.parametrize("n", [0, -1, -8])
def test_num_threads_must_be_positive(tables, rng, n):
    with pytest.raises(ValueError, match=rf"^num_threads must be a positive int or None, got {n}$"):
        bert_embeddings(ids(rng), None, *tables, num_threads=n)


@pytest.mark.parametrize("n", [1.5, "2", True])
def test_num_threads_must_be_an_int(tables, rng, n):
    with pytest.raises(TypeError, match=r"^num_threads must be a positive int or None"):
        bert_embeddings(ids(rng), None, *tables, num_threads=n)


# ---------------------------------------------------------------- nothing is lost


BAD_CALLS = [
    ("token id", dict(token_ids=[[1, 50]]), IndexError),
    ("negative", dict(token_ids=[[1, -1]]), IndexError),
    ("segment id", dict(segment_ids=[[0, 2]]), IndexError),
    ("position id", dict(position_ids=[0, 16]), IndexError),
    ("seg shape", dict(segment_ids=[[0, 1, 0]]), ValueError),
    ("float ids", dict(token_ids=[[1.0, 2.0]]), TypeError),
    ("threads", dict(num_threads=0), ValueError),
    ("ln half", dict(ln_bias=np.ones(8)), ValueError),
    ("eps", dict(ln_weight=np.ones(8), ln_bias=np.zeros(8), ln_eps=-1.0), ValueError),
]


@pytest.mark.parametrize(("label", "change", "exc"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_error_leaves_out_and_inputs_untouched(tables, label, change, exc):
    tok, pos, seg = tables
    args = dict(
        token_ids=np.array([[1, 2]]),
        segment_ids=np.array([[0, 1]]),
        token_embeddings=tok,
        position_embeddings=pos,
        segment_embeddings=seg,
    )
    args.update(change)
    arrays = {k: np.array(v, copy=True) for k, v in args.items()}
    out = np.full((1, 2, 8), 7.5)
    with pytest.raises(exc):
        bert_embeddings(**args, out=out)
    assert (out == 7.5).all()
    for key, before in arrays.items():
        np.testing.assert_array_equal(np.asarray(args[key]), before, err_msg=key)


def test_layer_rejects_bad_ids_and_keeps_out(tables):
    layer = BertEmbeddings(*tables)
    out = np.full((1, 3, 8), -2.0)
    with pytest.raises(IndexError, match=r"token_ids\[0, 2\] = 50 is out of range for token_embeddings with 50 rows"):
        layer([[0, 1, 50]], out=out)
    assert (out == -2.0).all()
    with pytest.raises(IndexError, match=r"segment_ids\[0, 0\] = -1 is out"):
        layer([[0, 1, 5]], [[-1, 0, 0]], out=out)
    assert (out == -2.0).all()


@pytest.mark.parametrize("id_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("which", ["segment", "task"])
def test_layer_with_an_empty_default_table_refuses_plain_ids(id_dtype, which):
    # The layer's fast path (C-contiguous int32/int64 ids, nothing else given)
    # must not read the missing row 0 of a 0-row segment or task table:
    # the sanitizer's fuzzing found it reading past such a table.
    rng = np.random.default_rng(3)
    tok, pos = rng.standard_normal((6, 4)), rng.standard_normal((5, 4))
    empty = np.zeros((0, 4))
    if which == "segment":
        layer = BertEmbeddings(tok, pos, empty)
    else:
        layer = BertEmbeddings(tok, pos, rng.standard_normal((2, 4)), task_embeddings=empty)
    name = "segment_ids" if which == "segment" else "task_type_ids"
    table = "segment_embeddings" if which == "segment" else "task_embeddings"
    ids = np.array([[1, 2, 3]], dtype=id_dtype)
    with pytest.raises(IndexError, match=rf"^{name} \(default 0\) is out of range for {table} with 0 rows$"):
        layer(ids)
    with pytest.raises(IndexError, match=rf"^{name} \(default 0\) is out of range for {table} with 0 rows$"):
        layer(ids[0])
