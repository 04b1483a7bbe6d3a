"""The kernel's two ways in agree, bit for bit, and with the plain twin.

A layer's common call takes the fast path (``Plan.run``: ids in the kernel's
form as given); every other call takes the normalised path (``embed_ids``:
the shim converts, then ``Plan.embed``). Both are checked by the kernel and
build their job with the same function, so for the same inputs they must
give the same bits: for
every table dtype, result dtype, position rule and combination of terms
(segment table with and without ids, task table, LayerNorm with and without
bias), int32 and int64 ids, one thread and two. Both must also give what the
plain NumPy twin (``helpers.reference.twin``, float64) gives, at the result
dtype's tolerance, as bottleneck's functions are tested against their slow
twins. The fast path's refusals (inputs not in the kernel's form: it
returns None and the shim normalises them) and its errors (the kernel's
checks, the same as the other path's) are tested here too.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers.extras import needs
from helpers.reference import result_tolerance, tolerance, twin, values64

from bertembed import BertEmbeddings, PositionRule
from bertembed._core import embed

V, P, H = 50, 12, 19  # H odd: vector bodies and scalar tails both run
B, S = 3, 9
PAD = 1

TABLE_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8"]
RESULT_DTYPES = ["float32", "float64", "float16", "bfloat16"]
RULES = {
    "absolute": PositionRule(),
    "offset": PositionRule("absolute", offset=2),
    "padding": PositionRule("padding", padding_idx=PAD),
    "none": PositionRule("none"),
}
#: (segment: no table / a table, no ids / a table and ids, task table, LayerNorm)
TERMS = list(itertools.product(("none", "default", "ids"), (False, True), ("none", "bias", "no bias")))


def _result_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        return np.dtype(needs("ml_dtypes", "bfloat16").bfloat16)
    return np.dtype(name)


def _layer(rng, table_dtype, rdt, rule, seg, task, ln) -> BertEmbeddings:
    """A layer whose float32 tables are stored as `table_dtype` (converted by the layer)."""
    table = lambda rows: rng.standard_normal((rows, H)).astype(np.float32)  # noqa: E731
    kw = {}
    if ln != "none":
        kw["ln_weight"] = rng.uniform(0.5, 2.0, H)
        kw["ln_bias"] = rng.standard_normal(H) if ln == "bias" else None
    return BertEmbeddings(
        table(V),
        None if rule.kind == "none" else table(P),
        None if seg == "none" else table(2),
        task_embeddings=table(3) if task else None,
        position_rule=rule,
        table_dtype=table_dtype,
        dtype=rdt,
        **kw,
    )


def _positions(ids: np.ndarray, rule: PositionRule) -> np.ndarray:
    """The rule's positions, in plain NumPy."""
    if rule.kind == "padding":
        real = ids != rule.padding_idx
        return np.where(real, rule.padding_idx + np.cumsum(real, axis=1), rule.padding_idx)
    return np.broadcast_to(np.arange(rule.offset, rule.offset + ids.shape[1]), ids.shape)


def _twin(layer: BertEmbeddings, ids, sids=None, task_ids=None) -> np.ndarray:
    t = layer._tables
    return twin(
        ids,
        t.tok.data,
        tok_scale=t.tok.scale,
        pos=None if t.pos is None else t.pos.data,
        position_ids=None if t.pos is None else _positions(ids, layer.position_rule),
        seg=None if t.seg is None else t.seg.data,
        segment_ids=sids,
        task=None if t.task is None else t.task.data,
        task_type_ids=task_ids,
        ln_weight=None if t.ln is None else t.ln.weight64,
        ln_bias=None if t.ln is None else t.ln.bias64,
        ln_eps=t.eps,
    )


def _checked(layer: BertEmbeddings, ids, sids=None, *, plan=True, **kw) -> np.ndarray:
    """The checked path, with the layer's plan or (like bert_embeddings) one bound for the call."""
    return embed.embed_ids(
        layer._tables,
        ids,
        sids,
        kw.pop("position_ids", None),
        kw.pop("out", None),
        layer.dtype,
        kw.pop("num_threads", None),
        rule=layer.position_rule,
        plan=layer._plan if plan else None,
        **kw,
    )


def _same_bits(a: np.ndarray, b: np.ndarray, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, what
    assert a.tobytes() == b.tobytes(), f"{what}: the paths differ"


@pytest.mark.parametrize("rule", RULES, ids=str)
@pytest.mark.parametrize("rdt", RESULT_DTYPES)
@pytest.mark.parametrize("table_dtype", TABLE_DTYPES)
def test_fast_and_checked_paths_agree(rng, table_dtype, rdt, rule):
    rdt, rule = _result_dtype(rdt), RULES[rule]
    for seg, task, ln in TERMS:
        what = f"segment {seg}, task {task}, LayerNorm {ln}"
        layer = _layer(rng, table_dtype, rdt, rule, seg, task, ln)
        ids = rng.integers(0, V, (B, S))
        ids[0, 6:] = PAD  # right padding
        ids[1, :2] = PAD  # left padding
        sids = rng.integers(0, 2, (B, S)) if seg == "ids" else None
        want = _twin(layer, ids, sids)
        for idt in (np.int32, np.int64):
            i, s = ids.astype(idt), None if sids is None else sids.astype(idt)
            checked = _checked(layer, i, s)
            assert checked.dtype == rdt
            np.testing.assert_allclose(checked.astype(np.float64), want, **result_tolerance(rdt), err_msg=what)
            for threads in (1, 2) if idt is np.int64 else (1,):
                fast = layer._plan.run(i, s, threads)
                assert fast is not None, f"{what}: the fast path declined"
                _same_bits(fast, checked, f"{what}, {np.dtype(idt)}, {threads} threads")
            _same_bits(layer(i, s), checked, f"{what}: layer(ids)")
            _same_bits(_checked(layer, i, s, plan=False), checked, f"{what}: a plan bound for the call")
            _same_bits(layer._plan.run(i[0], None if s is None else s[0], 0), checked[0], f"{what}: 1-D ids")
        # What only the checked path takes: explicit positions, task ids, an out buffer.
        if rule.kind != "none":
            explicit = _checked(layer, ids, sids, position_ids=_positions(ids, rule))
            _same_bits(explicit, checked, f"{what}: explicit position_ids")
        if task:
            _same_bits(_checked(layer, ids, sids, task_type_ids=np.zeros_like(ids)), checked, f"{what}: task 0")
            task_ids = rng.integers(0, 3, (B, S))
            np.testing.assert_allclose(
                _checked(layer, ids, sids, task_type_ids=task_ids).astype(np.float64),
                _twin(layer, ids, sids, task_ids),
                **result_tolerance(rdt),
                err_msg=what,
            )
        out = np.empty_like(checked)
        assert layer(ids, sids, out=out) is out
        _same_bits(out, checked, f"{what}: out=")


@pytest.mark.parametrize("rdt", [np.float32, np.float64])
def test_masked_rows_are_zeros_on_the_checked_path(rng, rdt):
    """DeBERTa's zeroed rows (the mask reaches only the checked path)."""
    tok, pos = rng.standard_normal((V, H)), rng.standard_normal((P, H))
    layer = BertEmbeddings(tok, pos, zero_masked_rows=True, dtype=rdt)
    ids, mask = rng.integers(0, V, (B, S)), rng.integers(0, 2, (B, S))
    got = layer(ids, attention_mask=mask)
    want = twin(ids, values64(tok), pos=pos, keep=mask)
    np.testing.assert_allclose(got, want, **tolerance(rdt))
    assert not got[mask == 0].any()


# ------------------------------------------------------------------ what the fast path declines


def _small_layer(rng, **kw):
    tok, pos, seg = rng.standard_normal((50, 16)), rng.standard_normal((20, 16)), rng.standard_normal((2, 16))
    return BertEmbeddings(tok, pos, seg, **kw)


@pytest.mark.parametrize(
    "ids, sids",
    [
        (np.array([[1, 2]], np.int16), None),  # other dtypes are converted there
        (np.array([[1, 2]]), np.array([[0, 1]], np.int32)),  # mixed dtypes
        (np.array([[1, 2, 3]]), np.array([[0, 1]])),  # shapes differ
        ([[1, 2]], None),  # not an array
        (np.array([[1, 2]]).byteswap().view(">i8"), None),  # byte order
        (np.asfortranarray(np.ones((2, 3), np.int64)), None),  # not C-contiguous
        (np.zeros((1, 2, 2), np.int64), None),  # 3-D
    ],
)
def test_fast_path_declines_what_it_does_not_check(rng, ids, sids):
    assert _small_layer(rng)._plan.run(ids, sids, 0) is None


@pytest.mark.parametrize(
    "ids, sids, error",
    [
        (np.array([[1, 50]]), None, IndexError),  # out of range: the kernel's check raises
        (np.array([[1, -1]]), None, IndexError),
        (np.array([[1, 2]]), np.array([[0, 2]]), IndexError),
        (np.zeros((1, 21), np.int64), None, ValueError),  # longer than the position table
    ],
)
def test_fast_path_raises_what_the_checked_path_raises(rng, ids, sids, error):
    layer = _small_layer(rng)
    with pytest.raises(error) as fast:
        layer._plan.run(ids, sids, 0)
    with pytest.raises(error) as checked:
        _checked(layer, ids, sids)
    assert str(fast.value) == str(checked.value)


def test_fast_path_computes_an_empty_call(rng):
    _same_bits(_small_layer(rng)._plan.run(np.zeros((0, 3), np.int64), None, 0), np.zeros((0, 3, 16)), "empty")


def test_fast_path_declines_segment_ids_without_a_table(rng):
    tok, pos = rng.standard_normal((50, 16)), rng.standard_normal((20, 16))
    layer = BertEmbeddings(tok, pos)
    assert layer._plan.run(np.array([[1, 2]]), np.array([[0, 0]]), 0) is None
    with pytest.raises(ValueError, match="segment_ids was given but there is no segment_embeddings table"):
        layer(np.array([[1, 2]]), np.array([[0, 0]]))


def test_fast_path_declines_a_default_row_that_is_not_there(rng):
    tok, pos = rng.standard_normal((50, 16)), rng.standard_normal((20, 16))
    layer = BertEmbeddings(tok, pos, np.zeros((0, 16)))
    with pytest.raises(IndexError):
        layer._plan.run(np.array([[1, 2]]), None, 0)
    with pytest.raises(IndexError, match=r"segment_ids \(default 0\) is out of range for segment_embeddings"):
        layer(np.array([[1, 2]]))


def test_fast_path_padding_rule_declines_too_many_tokens(rng):
    layer = _small_layer(rng, position_rule="padding", padding_idx=1)
    ids = np.full((1, 30), 7)
    with pytest.raises(ValueError):
        layer._plan.run(ids, None, 0)
    with pytest.raises(ValueError, match=r"token_ids\[0\] has 30 tokens that are not padding"):
        layer(ids)
