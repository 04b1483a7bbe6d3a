"""The terms a layer can sum beyond BERT's three: no position table, a task
table (ERNIE), rows zeroed by the attention mask (DeBERTa), and the position
rules (absolute with an offset, RoBERTa's padding rule)."""

import numpy as np
import pytest
from helpers.reference import tolerance, twin

from bertembed import BertEmbeddings, PositionRule, bert_embeddings


def _tables(rng, h=12, v=30, p=20):
    return rng.standard_normal((v, h)), rng.standard_normal((p, h)), rng.standard_normal((3, h))


def roberta_positions(ids, padding_idx):
    """RoBERTa's rule written the obvious way (transformers' formula)."""
    mask = (np.asarray(ids) != padding_idx).astype(np.int64)
    return np.cumsum(mask, axis=1) * mask + padding_idx


@pytest.mark.parametrize("ln", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_no_position_table(rng, ln, dtype):
    tok, _, seg = (x.astype(dtype) for x in _tables(rng))
    ids, sids = rng.integers(0, 30, (3, 9)), rng.integers(0, 3, (3, 9))
    kw = dict(ln_weight=rng.uniform(0.5, 2, 12)) if ln else {}
    want = twin(ids, tok, seg=seg, segment_ids=sids, **kw)
    np.testing.assert_allclose(bert_embeddings(ids, sids, tok, None, seg, dtype=dtype, **kw), want, **tolerance(dtype))
    layer = BertEmbeddings(tok, None, seg, **kw)
    assert layer.position_rule.kind == "none" and layer.max_positions == 0
    np.testing.assert_allclose(layer(ids, sids), want, **tolerance(dtype))
    # any sequence length works without a position table
    long_ids = rng.integers(0, 30, (1, 500))
    np.testing.assert_allclose(layer(long_ids), twin(long_ids, tok, seg=seg, **kw), **tolerance(dtype))
    with pytest.raises(ValueError, match=r"^position_ids was given but there is no position_embeddings table$"):
        layer(ids, position_ids=np.arange(9))
    with pytest.raises(ValueError, match=r"^this layer has no position table"):
        layer.position_ids(ids)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_task_table(rng, dtype):
    tok, pos, seg = (x.astype(dtype) for x in _tables(rng))
    task = rng.standard_normal((4, 12)).astype(dtype)
    w, b = rng.uniform(0.5, 2, 12), rng.standard_normal(12)
    layer = BertEmbeddings(tok, pos, seg, task_embeddings=task, ln_weight=w, ln_bias=b)
    ids, sids, kids = rng.integers(0, 30, (2, 7)), rng.integers(0, 3, (2, 7)), rng.integers(0, 4, (2, 7))
    common = dict(pos=pos, seg=seg, segment_ids=sids, task=task, ln_weight=w, ln_bias=b)
    # task type 0 when none is given (ERNIE's default)
    np.testing.assert_allclose(layer(ids, sids), twin(ids, tok, **common), **tolerance(dtype))
    np.testing.assert_allclose(
        layer(ids, sids, task_type_ids=kids), twin(ids, tok, task_type_ids=kids, **common), **tolerance(dtype)
    )
    bad = kids.copy()
    bad[1, 2] = 4
    with pytest.raises(IndexError, match=r"^task_type_ids\[1, 2\] = 4 is out of range for task_embeddings with 4 "):
        layer(ids, sids, task_type_ids=bad)
    with pytest.raises(ValueError, match=r"^task_type_ids has shape \(7,\), token_ids has shape \(2, 7\)$"):
        layer(ids, sids, task_type_ids=kids[0])
    with pytest.raises(ValueError, match=r"^task_type_ids was given but there is no task_embeddings table$"):
        BertEmbeddings(tok, pos, seg)(ids, task_type_ids=kids)


def test_zero_masked_rows(rng):
    tok, pos, seg = _tables(rng)
    ids = rng.integers(0, 30, (3, 8))
    mask = np.ones((3, 8), bool)
    mask[0, 5:] = False
    mask[2, :2] = False
    w = rng.uniform(0.5, 2, 12)
    layer = BertEmbeddings(tok, pos, seg, ln_weight=w, zero_masked_rows=True)
    got = layer(ids, attention_mask=mask.astype(np.int64))
    np.testing.assert_allclose(got, twin(ids, tok, pos=pos, seg=seg, ln_weight=w, keep=mask), **tolerance(np.float64))
    assert not got[0, 5:].any() and got[0, :5].all()
    # without a mask, nothing is zeroed; layers that do not zero rows ignore a valid mask
    np.testing.assert_allclose(layer(ids), twin(ids, tok, pos=pos, seg=seg, ln_weight=w), **tolerance(np.float64))
    plain = BertEmbeddings(tok, pos, seg, ln_weight=w)
    np.testing.assert_array_equal(plain(ids, attention_mask=mask), plain(ids))
    with pytest.raises(ValueError, match=r"^attention_mask has shape \(3, 7\), token_ids has shape \(3, 8\)$"):
        plain(ids, attention_mask=mask[:, :7])
    with pytest.raises(TypeError, match=r"^attention_mask must be an integer or bool array, got dtype float64$"):
        layer(ids, attention_mask=mask.astype(float))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("id_dtype", [np.int32, np.int64, np.uint16])
def test_padding_rule_right_and_left_padding(rng, dtype, id_dtype):
    tok, pos, seg = (x.astype(dtype) for x in _tables(rng))
    pad = 1
    ids = rng.integers(2, 30, (4, 10))
    ids[0, 6:] = pad  # right padding
    ids[1, :3] = pad  # left padding
    ids[2, :] = pad  # all padding
    ids = ids.astype(id_dtype)
    layer = BertEmbeddings(tok, pos, seg, position_rule="padding", padding_idx=pad)
    assert layer.position_rule == PositionRule("padding", padding_idx=pad)
    want_pos = roberta_positions(ids, pad)
    np.testing.assert_array_equal(layer.position_ids(ids), want_pos)
    np.testing.assert_array_equal(layer.position_ids(ids[0]), want_pos[0])  # 1-D ids
    want = twin(ids, tok, pos=pos, position_ids=want_pos, seg=seg)
    for threads in (1, 2):
        np.testing.assert_allclose(layer(ids, num_threads=threads), want, **tolerance(dtype))
    # a real token gets the same row whether the batch is padded left or right
    right, left = np.array([[5, 6, 7, pad, pad]]), np.array([[pad, pad, 5, 6, 7]])
    np.testing.assert_array_equal(layer(right)[0, :3], layer(left)[0, 2:])
    # explicit position_ids win over the rule
    explicit = rng.integers(0, 20, (4, 10))
    np.testing.assert_allclose(
        layer(ids, position_ids=explicit), twin(ids, tok, pos=pos, position_ids=explicit, seg=seg), **tolerance(dtype)
    )


def test_padding_rule_limits(rng):
    tok, pos, seg = _tables(rng, p=8)
    layer = BertEmbeddings(tok, pos, seg, position_rule="padding", padding_idx=1)
    ok = np.full((2, 30), 1)
    ok[1, :6] = 9  # 6 real tokens: positions 2..7, the last row
    layer(ok)
    bad = ok.copy()
    bad[1, 10] = 9  # a 7th real token would read row 8
    with pytest.raises(
        ValueError,
        match=r"^token_ids\[1\] has 7 tokens that are not padding \(1\): their positions "
        r"run to 8, but position_embeddings has 8 rows \(at most 6 tokens",
    ):
        layer(bad)
    with pytest.raises(ValueError, match=r"^padding_idx 8 is not a row of position_embeddings with 8 rows$"):
        BertEmbeddings(tok, pos, seg, position_rule="padding", padding_idx=8)([[0]])


def test_absolute_rule_with_offset(rng):
    tok, pos, seg = _tables(rng)
    layer = BertEmbeddings(tok, pos, seg, position_rule=PositionRule("absolute", offset=2))
    ids = rng.integers(0, 30, (2, 6))
    np.testing.assert_array_equal(layer.position_ids(ids), np.broadcast_to(np.arange(2, 8), (2, 6)))
    np.testing.assert_allclose(
        layer(ids), twin(ids, tok, pos=pos, position_ids=np.arange(2, 8), seg=seg), **tolerance(np.float64)
    )
    layer(rng.integers(0, 30, (1, 18)))
    with pytest.raises(
        ValueError,
        match=r"^sequence length 19 with positions from 2 needs 21 rows; "
        r"position_embeddings has 20$",
    ):
        layer(rng.integers(0, 30, (1, 19)))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(position_rule="relative"), ValueError, r"^position rule must be one of absolute, padding, none"),
        (dict(position_rule="padding"), ValueError, r"^the 'padding' position rule needs a non-negative int"),
        (dict(position_rule="padding", padding_idx=-1), ValueError, r"needs a non-negative int padding_idx"),
        (dict(position_rule="absolute", padding_idx=1), ValueError, r"^padding_idx only applies to the 'padding'"),
        (dict(position_rule="none"), ValueError, r"^the position rule 'none' is for layers without"),
        (dict(position_rule=3), TypeError, r"^position_rule must be a PositionRule or a str, got int$"),
        (
            dict(position_rule=PositionRule("padding", padding_idx=1), padding_idx=2),
            ValueError,
            r"^padding_idx is given twice",
        ),
    ],
)
def test_position_rule_errors(rng, kwargs, error, message):
    tok, pos, seg = _tables(rng)
    with pytest.raises(error, match=message):
        BertEmbeddings(tok, pos, seg, **kwargs)


def test_rule_needs_a_position_table(rng):
    tok, _, seg = _tables(rng)
    with pytest.raises(ValueError, match=r"^the position rule 'padding' needs position_embeddings$"):
        BertEmbeddings(tok, None, seg, position_rule="padding", padding_idx=1)


def test_layers_with_every_term_pickle(rng):
    import pickle

    tok, pos, seg = _tables(rng)
    task = rng.standard_normal((2, 12))
    layer = BertEmbeddings(
        tok,
        pos,
        seg,
        task_embeddings=task,
        ln_weight=np.ones(12),
        position_rule="padding",
        padding_idx=1,
        zero_masked_rows=True,
        table_dtype="int8",
    )
    again = pickle.loads(pickle.dumps(layer))
    assert again.position_rule == layer.position_rule and again.zero_masked_rows
    ids = rng.integers(0, 30, (2, 9))
    mask = ids != 1
    np.testing.assert_array_equal(again(ids, attention_mask=mask), layer(ids, attention_mask=mask))
