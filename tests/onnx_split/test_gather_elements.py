"""The splitter's ``GatherElements`` (:func:`bertembed._onnx.contrib.gather_elements`), run by onnx's
reference evaluator as the splitter runs it: ONNX's examples, negative axes and indices, an axis
longer than ``np.choose`` takes, and out-of-range indices refused (onnx only; ONNX Runtime, when
installed, is the oracle for random cases).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.extras import needs

onnx = needs("onnx", "onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from bertembed._onnx import contrib  # noqa: E402
from bertembed._onnx.contrib import gather_elements  # noqa: E402


def _model(rank: int, axis: int, data_type: int = TensorProto.FLOAT, index_type: int = TensorProto.INT64):
    node = helper.make_node("GatherElements", ["data", "indices"], ["y"], axis=axis)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("data", data_type, [None] * rank),
            helper.make_tensor_value_info("indices", index_type, [None] * rank),
        ],
        [helper.make_tensor_value_info("y", data_type, [None] * rank)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """`GatherElements` through the reference evaluator with the splitter's ops (contrib.OPS)."""
    ev = ReferenceEvaluator(_model(data.ndim, axis), new_ops=contrib.OPS)
    outputs = ev.run(None, {"data": data, "indices": indices})
    assert isinstance(outputs, list)
    return np.asarray(outputs[0])


def _loops(data: np.ndarray, indices: np.ndarray, axis: int) -> np.ndarray:
    """The definition, element by element: out[i][j][k] = data[i][indices[i][j][k]][k] for axis 1."""
    axis %= data.ndim
    out = np.empty(indices.shape, data.dtype)
    for where in np.ndindex(*indices.shape):
        k = int(indices[where])
        k = k + data.shape[axis] if k < 0 else k
        assert 0 <= k < data.shape[axis]
        out[where] = data[(*where[:axis], k, *where[axis + 1 :])]
    return out


# ONNX's examples (Operators.md, GatherElements; onnx/backend/test/case/node/gatherelements.py).
SPEC_CASES = [
    ([[1, 2], [3, 4]], [[0, 0], [1, 0]], 1, [[1, 1], [4, 3]]),
    ([[1, 2, 3], [4, 5, 6], [7, 8, 9]], [[1, 2, 0], [2, 0, 0]], 0, [[4, 8, 3], [7, 2, 3]]),
    ([[1, 2, 3], [4, 5, 6], [7, 8, 9]], [[-1, -2, 0], [-2, 0, 0]], 0, [[7, 5, 3], [4, 2, 3]]),
]


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize(("data", "indices", "axis", "want"), SPEC_CASES)
def test_onnx_examples(data, indices, axis, want, index_dtype):
    got = _run(np.array(data, np.float32), np.array(indices, index_dtype), axis)
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    assert got.dtype == np.float32


def test_reference_evaluator_uses_it(monkeypatch):
    """The splitter's evaluator runs this implementation, not onnx's (nothing reaches np.choose)."""

    def refuse(*args, **kwargs):
        raise AssertionError("np.choose called")

    monkeypatch.setattr(np, "choose", refuse)
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = _run(data, np.array([[2, 0], [1, 1]], np.int64), 1)
    np.testing.assert_array_equal(got, [[2, 0], [4, 4]])


def test_transformers_token_type_buffer():
    """The graph of ``torch.gather(buffer.expand(b, -1), 1, position_ids)``: a 514-wide axis (onnx's
    own implementation fails here: np.choose takes at most 63 arrays)."""
    buffer = np.broadcast_to(np.arange(514, dtype=np.int64) % 3, (2, 514)).copy()
    positions = np.array([[0, 1, 2, 3, 4, 513], [513, 512, 100, 2, 1, 0]], np.int64)
    got = _run(buffer, positions, 1)
    np.testing.assert_array_equal(got, positions % 3)
    assert got.dtype == np.int64


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -2, -3])
def test_random_against_the_definition(axis):
    rng = np.random.default_rng(axis + 10)
    data = rng.standard_normal((3, 70, 4)).astype(np.float32)
    shape = [2, 3, 4]  # every other axis at most the data's (ONNX Runtime's and torch.gather's rule)
    size = data.shape[axis]
    shape[axis] = 90
    indices = rng.integers(-size, size, size=shape)
    want = _loops(data, indices, axis)
    np.testing.assert_array_equal(gather_elements(data, indices, axis), want)
    np.testing.assert_array_equal(_run(data, indices, axis), want)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_random_against_onnxruntime(axis):
    ort = needs("onnxruntime", "peers")
    rng = np.random.default_rng(axis + 20)
    data = rng.standard_normal((5, 80)).astype(np.float32)
    size = data.shape[axis]
    shape = [4, 60]
    shape[axis] = 7
    indices = rng.integers(-size, size, size=shape)
    session = ort.InferenceSession(_model(2, axis).SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, {"data": data, "indices": indices})[0]
    np.testing.assert_array_equal(_run(data, indices, axis), want)


def test_empty_indices():
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = _run(data, np.zeros((2, 0), np.int64), 1)
    assert got.shape == (2, 0) and got.dtype == np.float32


@pytest.mark.parametrize("bad", [3, 100, -4, -100, np.iinfo(np.int64).max, np.iinfo(np.int64).min])
def test_out_of_range_index_refused(bad):
    """An index outside [-s, s-1] is an error, never wrapped (np.choose's mode="wrap") nor read past the array."""
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    indices = np.array([[0, 1], [2, bad]], np.int64)
    with pytest.raises(IndexError, match=r"GatherElements: index -?\d+ out of range \[-3, 2\]"):
        gather_elements(data, indices, 1)
    with pytest.raises(IndexError, match="out of range"):
        _run(data, indices, 1)


def test_index_into_an_empty_axis_refused():
    with pytest.raises(IndexError, match=r"out of range \[0, -1\]"):
        gather_elements(np.zeros((2, 0), np.float32), np.zeros((2, 1), np.int64), 1)


@pytest.mark.parametrize(
    ("data_shape", "index_shape", "axis", "error", "pattern"),
    [
        ((2, 3), (2, 3, 1), 1, ValueError, "rank 3 for data of rank 2"),
        ((2, 3), (3, 2), 1, ValueError, "dimension 0 larger"),
        ((2, 3), (2, 2), 2, ValueError, r"axis 2 outside \[-2, 1\]"),
        ((2, 3), (2, 2), -3, ValueError, r"axis -3 outside \[-2, 1\]"),
        ((), (), 0, ValueError, "scalar"),
    ],
)
def test_bad_shapes_refused(data_shape, index_shape, axis, error, pattern):
    with pytest.raises(error, match=pattern):
        gather_elements(np.zeros(data_shape, np.float32), np.zeros(index_shape, np.int64), axis)


def test_float_indices_refused():
    with pytest.raises(TypeError, match="not integers"):
        gather_elements(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32), 1)
