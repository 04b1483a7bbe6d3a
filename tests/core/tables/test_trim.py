"""``BertEmbeddings.trimmed``: only the kept token rows and an id map; calls take the original ids.

For ids that are all kept the trimmed layer gives bit for bit what the full
layer gives (every rule, term combination and table dtype, through the fast
call and the full one); a trimmed-away id is an IndexError naming the array,
the position and the id, or reads the unknown id's row; no id, however
hostile, reads outside a table; the map is checked when a layer is built.
"""

from __future__ import annotations

import doctest
import pickle

import numpy as np
import pytest
from helpers.extras import needs
from helpers.reference import twin

import bertembed._layer
from bertembed import BertEmbeddings, PositionRule
from bertembed._core import trim as core_trim
from bertembed._core.tables import take_rows

V, P, H = 300, 24, 20
TABLE_DTYPES = [None, "float64", "float16", "bfloat16", "int8"]


def _tables(seed=0, v=V):
    rng = np.random.default_rng(seed)
    return {
        "tok": rng.standard_normal((v, H)).astype(np.float32),
        "pos": rng.standard_normal((P, H)).astype(np.float32),
        "seg": rng.standard_normal((3, H)).astype(np.float32),
        "task": rng.standard_normal((4, H)).astype(np.float32),
        "w": (1 + 0.1 * rng.standard_normal(H)).astype(np.float32),
        "b": (0.1 * rng.standard_normal(H)).astype(np.float32),
    }


#: Layer shapes: (name, constructor keywords from the tables).
LAYOUTS = {
    "bert": lambda t: dict(segment_embeddings=t["seg"], ln_weight=t["w"], ln_bias=t["b"]),
    "roberta": lambda t: dict(
        segment_embeddings=t["seg"][:1], ln_weight=t["w"], ln_bias=t["b"], position_rule="padding", padding_idx=1
    ),
    "sum-no-ln": lambda t: dict(segment_embeddings=t["seg"]),
    "no-positions": lambda t: dict(position_embeddings=None, ln_weight=t["w"]),
    "offset-positions": lambda t: dict(ln_weight=t["w"], ln_bias=t["b"], position_rule=PositionRule(offset=2)),
    "ernie-task": lambda t: dict(
        segment_embeddings=t["seg"], task_embeddings=t["task"], ln_weight=t["w"], ln_bias=t["b"]
    ),
    "deberta-masked": lambda t: dict(segment_embeddings=t["seg"], ln_weight=t["w"], zero_masked_rows=True),
}


def _layer(layout="bert", table_dtype=None, seed=0, dtype=None):
    t = _tables(seed)
    kw = {"position_embeddings": t["pos"], **LAYOUTS[layout](t)}
    pos = kw.pop("position_embeddings")
    return BertEmbeddings(t["tok"], pos, table_dtype=table_dtype, dtype=dtype, **kw)


def _kept(rng, n=60):
    return np.unique(np.concatenate([[1], rng.choice(np.arange(2, V), n, replace=False)]))


def _ids_from(rng, kept, shape):
    return rng.choice(kept, shape)


# ------------------------------------------------------------------------------ exactness


@pytest.mark.parametrize("table_dtype", TABLE_DTYPES, ids=lambda d: d or "float32")
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_kept_ids_give_bit_for_bit_the_untrimmed_result(layout, table_dtype):
    if table_dtype == "bfloat16":
        needs("ml_dtypes", "bfloat16")
    rng = np.random.default_rng(1)
    full = _layer(layout, table_dtype)
    kept = _kept(rng)
    small = full.trimmed(kept)
    assert small.is_trimmed and not full.is_trimmed
    assert small.vocab_size == V and small.kept_rows == len(kept) == len(small.kept_ids)
    assert small.table_dtype == full.table_dtype
    ids = _ids_from(rng, kept, (4, 11))
    if layout == "roberta":
        ids[0, -3:] = 1  # pads: positions still come from the original pad id
        ids[2, :2] = 1
    segs = rng.integers(0, full.type_vocab_size, ids.shape) if full.type_vocab_size > 1 else None
    for dt in (np.int64, np.int32):  # the fast call
        np.testing.assert_array_equal(small(ids.astype(dt), segs), full(ids.astype(dt), segs))
    np.testing.assert_array_equal(small(ids.tolist()), full(ids.tolist()))  # the full path
    np.testing.assert_array_equal(small(ids[0]), full(ids[0]))  # 1-D
    kw = {}
    if full.max_positions and layout != "offset-positions":
        kw["position_ids"] = rng.integers(0, min(P, 11), ids.shape)
    if layout == "ernie-task":
        kw["task_type_ids"] = rng.integers(0, 4, ids.shape)
    mask = np.ones(ids.shape, np.int64)
    mask[1, -4:] = 0
    out_a = np.full((*ids.shape, H), np.nan, full.dtype)
    out_b = out_a.copy()
    small(ids, segs, attention_mask=mask, out=out_a, num_threads=2, **kw)
    full(ids, segs, attention_mask=mask, out=out_b, num_threads=2, **kw)
    np.testing.assert_array_equal(out_a, out_b)
    if full.max_positions:
        np.testing.assert_array_equal(small.position_ids(ids), full.position_ids(ids))


def test_float64_results_and_a_plain_reference():
    rng = np.random.default_rng(2)
    t = _tables()
    full = BertEmbeddings(t["tok"], t["pos"], t["seg"], dtype=np.float64)
    kept = _kept(rng)
    small = full.trimmed(kept)
    ids = _ids_from(rng, kept, (3, 9))
    segs = rng.integers(0, 3, ids.shape)
    np.testing.assert_array_equal(small(ids, segs), full(ids, segs))
    want = twin(ids, t["tok"], pos=t["pos"], seg=t["seg"], segment_ids=segs)
    np.testing.assert_allclose(small(ids, segs), want, rtol=1e-12, atol=1e-12)


def test_the_token_table_holds_only_the_kept_rows_in_id_order():
    t = _tables()
    full = BertEmbeddings(t["tok"], t["pos"])
    small = full.trimmed([9, 3, 250, 3])
    np.testing.assert_array_equal(small._tables.tok.data, t["tok"][[3, 9, 250]])
    assert small._tables.pos.data is full._tables.pos.data  # shared, untouched
    assert small.nbytes == 3 * H * 4 + P * H * 4 + V * 4  # rows, positions, the int32 map


def test_int8_rows_keep_their_scales():
    full = _layer("bert", "int8")
    small = full.trimmed([4, 8, 15])
    np.testing.assert_array_equal(small._tables.tok.data, full._tables.tok.data[[4, 8, 15]])
    np.testing.assert_array_equal(small._tables.tok.scale, full._tables.tok.scale[[4, 8, 15]])


# ------------------------------------------------------------------------------ unknown rules


def test_a_trimmed_away_id_is_an_index_error_naming_array_position_and_id():
    small = _layer().trimmed([2, 3, 4])
    out = np.full((2, 3, H), 7.0, np.float32)
    for ids in (np.array([[2, 3, 4], [4, 17, 2]]), np.array([[2, 3, 4], [4, 17, 2]], np.int32)):
        with pytest.raises(IndexError, match=r"^token_ids\[1, 1\] = 17 is not among the 3 token rows kept"):
            small(ids, out=out)
        with pytest.raises(IndexError, match=r"token_ids\[1, 1\] = 17 is not among"):
            small(ids)  # the fast call
    np.testing.assert_array_equal(out, 7.0)  # nothing written
    with pytest.raises(IndexError, match=r"^input_ids\[0, 1\] = 5 is not among"):
        small(input_ids=[[2, 5]])
    with pytest.raises(IndexError, match=r"^token_ids\[1\] = 0 is not among"):
        small([2, 0])  # 0 was not kept (no config, no padding id)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("where", [(0, 0), (200, 7), (511, 19)], ids=["first", "middle", "last"])
def test_the_fast_call_finds_a_trimmed_away_id_in_its_own_pass(threads, where):
    # Big enough for threads; the id is found while the rows are computed
    # (the kernel never reads a row for it), then named by the full checks.
    rng = np.random.default_rng(1)
    kept = np.arange(0, V, 3)
    small = _layer().trimmed(kept)
    ids = rng.choice(kept, (512, P - 4))
    np.testing.assert_array_equal(small(ids, num_threads=threads), _layer()(ids))
    ids[where] = 1  # not kept
    with pytest.raises(IndexError, match=rf"^token_ids\[{where[0]}, {where[1]}\] = 1 is not among the 100 token rows"):
        small(ids, num_threads=threads)


def test_unknown_id_reads_that_row():
    rng = np.random.default_rng(3)
    full = _layer("roberta")
    kept = _kept(rng, 30)
    small = full.trimmed(kept, unknown=int(kept[5]))
    assert small.unknown == int(kept[5]) and small.kept_rows == len(kept)
    ids = rng.integers(0, V, (3, 12))
    ids[1, -2:] = 1
    swapped = np.where(np.isin(ids, small.kept_ids), ids, kept[5])
    np.testing.assert_array_equal(small(ids), full(swapped))
    np.testing.assert_array_equal(small(ids.tolist()), full(swapped.tolist()))


def test_the_unknown_id_is_kept_even_if_not_asked_for():
    small = _layer().trimmed([2, 3], unknown=9)
    assert small.kept_ids.tolist() == [2, 3, 9]
    np.testing.assert_array_equal(small([[250]]), _layer()([[9]]))


@pytest.mark.parametrize(
    "unknown, error, match",
    [
        (-1, IndexError, "unknown = -1 is out of range for a vocabulary of 300 ids"),
        (300, IndexError, "unknown = 300 is out of range"),
        ("unk", ValueError, "unknown must be 'error' or a kept token id"),
        (1.5, TypeError, "unknown must be 'error' or a kept token id"),
        (True, TypeError, "unknown must be"),
    ],
)
def test_bad_unknown(unknown, error, match):
    with pytest.raises(error, match=match):
        _layer().trimmed([2], unknown=unknown)


@pytest.mark.parametrize(
    "keep, error, match",
    [
        ([2, 300], IndexError, r"keep_ids\[1\] = 300 is out of range for a vocabulary of 300 ids"),
        ([-1], IndexError, r"keep_ids\[0\] = -1 is out of range"),
        ([1.0, 2.0], TypeError, "keep_ids must be integer token ids, got dtype float64"),
        (["a"], TypeError, "keep_ids must be integer token ids"),
    ],
)
def test_bad_keep_ids(keep, error, match):
    with pytest.raises(error, match=match):
        _layer().trimmed(keep)


def test_keep_ids_as_a_set_a_2d_array_or_nothing():
    layer = _layer("roberta")
    assert layer.trimmed({7, 5}).kept_ids.tolist() == [1, 5, 7]  # 1: the padding id
    assert layer.trimmed(np.array([[7, 5], [5, 9]])).kept_ids.tolist() == [1, 5, 7, 9]
    assert layer.trimmed([]).kept_ids.tolist() == [1]


# ------------------------------------------------------------------------------ hostile ids


HOSTILE = [-1, -(2**31), 300, 2**31 - 1, 2**40, 2**63 - 1]


@pytest.mark.parametrize("unknown", ["error", 2])
@pytest.mark.parametrize("bad", HOSTILE)
def test_hostile_ids_never_read_outside_a_table(bad, unknown):
    small = _layer("roberta").trimmed([2, 3, 4], unknown=unknown)
    ids = np.array([[2, 3, bad]], np.int64)
    with pytest.raises(IndexError, match=rf"token_ids\[0, 2\] = {bad} is out of range for token_embeddings with 300"):
        small(ids)
    if -(2**31) <= bad < 2**31:
        with pytest.raises(IndexError, match=rf"= {bad} is out of range"):
            small(ids.astype(np.int32))
    with pytest.raises(IndexError, match=rf"= {bad} is out of range"):
        small(ids.tolist())


def test_uint64_ids_are_checked_unwrapped():
    small = _layer().trimmed([2, 3])
    with pytest.raises(IndexError, match=rf"= {2**64 - 1} is out of range"):
        small(np.array([[2, 2**64 - 1]], np.uint64))
    np.testing.assert_array_equal(small(np.array([[2, 3]], np.uint16)), _layer()([[2, 3]]))


def test_every_id_of_the_vocabulary_either_works_or_is_refused():
    """An exhaustive sweep: each original id, kept or not, under both rules."""
    full = _layer()
    kept = np.arange(0, V, 7)
    for unknown in ("error", 7):
        small = full.trimmed(kept, unknown=unknown)
        for i in range(V):
            if i in kept:
                np.testing.assert_array_equal(small([[i]]), full([[i]]))
            elif unknown == "error":
                with pytest.raises(IndexError, match=f"= {i} is not among"):
                    small([[i]])
            else:
                np.testing.assert_array_equal(small([[i]]), full([[7]]))


@pytest.mark.parametrize(
    "entries, unknown, match",
    [
        ({5: 3}, None, "sends id 5 to row 3, outside the 3 rows kept"),
        ({5: -2}, None, "sends id 5 to row -2"),
        ({5: 2**31 - 1}, None, "outside the 3 rows kept"),
        ({0: -1}, 2, "no entry may be -1"),
        ({10: 1, 20: 0}, None, "does not send the kept ids to rows 0..2 in order"),
    ],
)
def test_a_bad_map_is_refused_when_the_layer_is_built(entries, unknown, match):
    m = np.full(V, -1 if unknown is None else 0, np.int32)
    m[[10, 20, 30]] = [0, 1, 2]
    if unknown is not None:
        m[:] = 2
        m[[10, 20]] = [0, 1]
        unknown = 30
    for i, row in entries.items():
        m[i] = row
    full = _layer()
    tables = full._tables._replace(
        tok=take_rows(full._tables.tok, np.array([10, 20, 30])), token_map=core_trim.TokenMap(m, 3, unknown)
    )
    layer = BertEmbeddings.__new__(BertEmbeddings)
    with pytest.raises(ValueError, match=match):
        layer._init(tables, None, PositionRule(), False)


# ------------------------------------------------------------------------------ what is always kept


def test_the_padding_id_is_always_kept():
    small = _layer("roberta").trimmed([5])
    assert small.kept_ids.tolist() == [1, 5]
    assert small.special_token_ids == (1,)


def test_trimming_a_trimmed_layer():
    rng = np.random.default_rng(4)
    full = _layer("bert", "int8")
    once = full.trimmed(np.arange(10, 200))
    twice = once.trimmed([12, 150, 199], unknown=12)
    assert twice.kept_ids.tolist() == [12, 150, 199] and twice.vocab_size == V
    ids = rng.choice([12, 150, 199], (2, 5))
    np.testing.assert_array_equal(twice(ids), full(ids))
    with pytest.raises(ValueError, match="id 5 is not kept by this trimmed layer"):
        once.trimmed([5, 12])
    lenient = full.trimmed([10, 11], unknown=10)
    with pytest.raises(ValueError, match="id 12 is not kept"):
        lenient.trimmed([12])  # 12 reads row 10, but was not kept


def test_properties_of_an_untrimmed_layer():
    layer = _layer()
    assert not layer.is_trimmed and layer.kept_rows == layer.vocab_size == V
    assert layer.unknown == "error" and layer.kept_ids.tolist() == list(range(V))
    assert "kept_rows" not in repr(layer)
    small = layer.trimmed([3], unknown=3)
    assert repr(small).endswith("kept_rows=1, unknown=3)")


# ------------------------------------------------------------------------------ pickling


def test_a_trimmed_layer_pickles_with_its_map():
    rng = np.random.default_rng(5)
    small = _layer("roberta", "int8").trimmed(np.arange(1, 300, 3), unknown=4)
    again = pickle.loads(pickle.dumps(small))
    assert again.is_trimmed and again.unknown == 4 and again.kept_rows == small.kept_rows
    ids = rng.integers(0, V, (2, 7))
    np.testing.assert_array_equal(again(ids), small(ids))


def test_docstring_example_of_trimmed():
    finder = doctest.DocTestFinder()
    tests = [t for t in finder.find(bertembed._layer) if t.name.endswith("BertEmbeddings.trimmed")]
    assert tests and tests[0].examples
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for t in tests:
        runner.run(t)
    assert runner.failures == 0


@pytest.mark.parametrize("unknown", ["error", 5])
def test_the_fast_call_applies_the_map_itself(unknown):
    """The layer's common call (plain int32/int64 ids) is computed by the kernel's
    bound plan, not by the checking path: it must read the map too."""
    rng = np.random.default_rng(6)
    full = _layer("roberta", "int8")
    kept = _kept(rng)
    small = full.trimmed(kept, unknown=unknown)
    ids = _ids_from(rng, kept, (3, 13))
    for dt in (np.int32, np.int64):
        got = small._plan.run(ids.astype(dt), None, 0)
        assert got is not None
        np.testing.assert_array_equal(got, full(ids))
    dropped = ids.copy()
    dropped[2, 3] = next(i for i in range(V) if i not in set(kept.tolist()))
    if unknown == "error":
        with pytest.raises(IndexError, match=r"token_ids\[2, 3\] = \d+ is not among"):  # the kernel's check
            small._plan.run(dropped, None, 0)
    else:
        got = small._plan.run(dropped, None, 0)
        np.testing.assert_array_equal(got, full(np.where(dropped == dropped[2, 3], 5, dropped)))
    with pytest.raises(IndexError, match="out of range"):
        small._plan.run(np.array([[V]]), None, 0)
