"""The kernel's id checks: each kind of bad id leaves ``out`` untouched, names
the first bad id in flat order with the caller's own value, and several
bad inputs are reported in one order (token ids, trimmed-away ids,
positions, segments, task types), whichever way the call comes in."""

from __future__ import annotations

import numpy as np
import pytest

from bertembed import BertEmbeddings, PositionRule

V, P, H = 30, 12, 4
B, S = 3, 5


def _layer(rng, *, rule=None, seg_rows=2, task_rows=3, trimmed=False) -> BertEmbeddings:
    table = lambda rows: rng.standard_normal((rows, H))  # noqa: E731
    layer = BertEmbeddings(
        table(V),
        table(P),
        table(seg_rows),
        task_embeddings=table(task_rows),
        position_rule=rule or PositionRule(),
    )
    return layer.trimmed(np.arange(0, V, 2)) if trimmed else layer  # odd ids are trimmed away


def _ids(rng, high=V, dtype=np.int64) -> np.ndarray:
    return (2 * rng.integers(0, high // 2, (B, S))).astype(dtype)  # even: kept by a trimmed layer


def _out(layer: BertEmbeddings) -> np.ndarray:
    return np.full((B, S, H), 7.0, layer.dtype)


#: (what is bad, the layer's options, the call's keyword arguments given the ids, the error, its message)
CASES = {
    "token": (
        {},
        lambda ids: {"token_ids": _put(ids, (1, 2), V)},
        IndexError,
        rf"^token_ids\[1, 2\] = {V} is out of range for token_embeddings with {V} rows$",
    ),
    "dropped": (
        {"trimmed": True},
        lambda ids: {"token_ids": _put(ids, (1, 2), 3)},
        IndexError,
        r"^token_ids\[1, 2\] = 3 is not among the 15 token rows kept by this trimmed layer \(vocabulary 30\)$",
    ),
    "position": (
        {},
        lambda ids: {"token_ids": ids, "position_ids": _put(np.zeros_like(ids), (1, 2), P)},
        IndexError,
        rf"^position_ids\[1, 2\] = {P} is out of range for position_embeddings with {P} rows$",
    ),
    "padding": (
        {"rule": PositionRule("padding", padding_idx=P - 4)},
        lambda ids: {"token_ids": np.where(ids == P - 4, 0, ids)},
        ValueError,
        rf"^token_ids\[0\] has {S} tokens that are not padding \({P - 4}\)",
    ),
    "absolute": (
        {"rule": PositionRule("absolute", offset=P - S + 1)},
        lambda ids: {"token_ids": ids},
        ValueError,
        rf"^sequence length {S} with positions from {P - S + 1} needs {P + 1} rows; position_embeddings has {P}$",
    ),
    "segment": (
        {},
        lambda ids: {"token_ids": ids, "segment_ids": _put(np.zeros_like(ids), (1, 2), 2)},
        IndexError,
        r"^segment_ids\[1, 2\] = 2 is out of range for segment_embeddings with 2 rows$",
    ),
    "segment default": (
        {"seg_rows": 0},
        lambda ids: {"token_ids": ids},
        IndexError,
        r"^segment_ids \(default 0\) is out of range for segment_embeddings with 0 rows$",
    ),
    "task": (
        {},
        lambda ids: {"token_ids": ids, "task_type_ids": _put(np.zeros_like(ids), (1, 2), -1)},
        IndexError,
        r"^task_type_ids\[1, 2\] = -1 is out of range for task_embeddings with 3 rows$",
    ),
    "task default": (
        {"task_rows": 0},
        lambda ids: {"token_ids": ids},
        IndexError,
        r"^task_type_ids \(default 0\) is out of range for task_embeddings with 0 rows$",
    ),
}


def _put(arr: np.ndarray, where: tuple[int, int], value: int) -> np.ndarray:
    """`arr` with `value` at `where`, and a second bad value later in flat order."""
    arr = arr.copy()
    arr[where] = value
    arr[-1, -1] = value
    return arr


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("case", CASES)
def test_each_failure_leaves_out_untouched(rng, case, dtype):
    options, make, error, message = CASES[case]
    layer = _layer(rng, **options)
    kw = {k: v.astype(dtype) for k, v in make(_ids(rng)).items()}
    out = _out(layer)
    with pytest.raises(error, match=message):
        layer(**kw, out=out)
    assert (out == 7.0).all(), f"{case}: out was written"
    with pytest.raises(error, match=message):  # without out: the kernel's own result
        layer(**kw)


@pytest.mark.parametrize("case", ["token", "segment"])
def test_the_common_call_reports_the_same(rng, case):
    """Plain int64 ids and segment ids (the layer's common call) are checked by the same code."""
    options, make, error, message = CASES[case]
    layer = _layer(rng, **options)
    kw = make(_ids(rng))
    with pytest.raises(error, match=message):
        layer(kw["token_ids"], kw.get("segment_ids"))
    named = message.replace("^token_ids", "^input_ids").replace("^segment_ids", "^token_type_ids")
    with pytest.raises(error, match=named):
        layer(input_ids=kw["token_ids"], token_type_ids=kw.get("segment_ids"))


def test_the_callers_value_is_printed(rng):
    layer = _layer(rng)
    ids = _ids(rng).astype(np.uint64)
    ids[2, 1] = 2**64 - 1
    with pytest.raises(IndexError, match=rf"^token_ids\[2, 1\] = {2**64 - 1} is out of range"):
        layer(ids, out=_out(layer))
    seg = np.zeros((B, S), np.uint64)
    seg[0, 3] = 2**63
    with pytest.raises(IndexError, match=rf"^segment_ids\[0, 3\] = {2**63} is out of range"):
        layer(_ids(rng), seg)


def test_several_bad_inputs_are_reported_in_order(rng):
    layer = _layer(rng, trimmed=True)
    ids = _put(_ids(rng), (2, 0), 3)  # trimmed away
    pos = _put(np.zeros_like(ids), (0, 1), P)
    seg = _put(np.zeros_like(ids), (0, 0), 2)
    task = _put(np.zeros_like(ids), (0, 0), 3)
    kw = {"position_ids": pos, "segment_ids": seg, "task_type_ids": task}
    with pytest.raises(IndexError, match=r"^token_ids\[0, 0\] = 30 is out of range"):
        layer(_put(ids, (0, 0), V), **kw)
    with pytest.raises(IndexError, match=r"^token_ids\[2, 0\] = 3 is not among"):
        layer(ids, **kw)
    with pytest.raises(IndexError, match=r"^position_ids\[0, 1\] = 12 is out of range"):
        layer(ids // 2 * 2, **kw)
    with pytest.raises(IndexError, match=r"^segment_ids\[0, 0\] = 2 is out of range"):
        layer(ids // 2 * 2, **{**kw, "position_ids": None})
    with pytest.raises(IndexError, match=r"^task_type_ids\[0, 0\] = 3 is out of range"):
        layer(ids // 2 * 2, task_type_ids=task)


def test_a_trimmed_layer_reports_dropped_ids_after_a_later_check_fails(rng):
    """The common call finds trimmed-away ids in its pass over the rows; when a later
    check fails first, the trimmed-away id is still the one reported."""
    layer = _layer(rng, trimmed=True)
    ids = _put(_ids(rng), (1, 4), 5)
    with pytest.raises(IndexError, match=r"^token_ids\[1, 4\] = 5 is not among"):
        layer(ids, _put(np.zeros_like(ids), (0, 0), 2))
