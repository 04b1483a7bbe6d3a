"""A matrix product whose uint8 x int8 pairs saturate 16 bits, run by ONNX Runtime as
exported (int8 weights) and with :func:`~bertembed.serve.server.int8_host.unsigned_weights`.

``python -m helpers.int8_saturation`` prints one JSON line: whether each result equals the exact
integer product, and what ``int8_products_saturate()`` says of this CPU (a test runs it under
``benchmarks/avx2_host.sh``).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from bertembed._core._kernel import int8_products_saturate
from bertembed.serve.server.int8_host import unsigned_weights

K, N, M = 64, 16, 4


def model(weight: np.ndarray) -> onnx.ModelProto:
    """``y = a @ weight`` as one MatMulInteger, the weight's zero points 0 (per column)."""
    node = helper.make_node("MatMulInteger", ["a", "w", "", "zp"], ["y"])
    graph = helper.make_graph(
        [node],
        "saturating",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [M, K])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [M, N])],
        initializer=[numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.zeros(N, np.int8), "zp")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def run(m: onnx.ModelProto, a: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"a": a})[0])


def main() -> None:
    rng = np.random.default_rng(0)
    weight = rng.choice(np.array([-128, 127], np.int8), size=(K, N))  # 255 x -128 twice: below -32768
    a = np.full((M, K), 255, np.uint8)
    exact = a.astype(np.int64) @ weight.astype(np.int64)
    unsigned = model(weight)
    changed = unsigned_weights(unsigned)
    print(
        json.dumps(
            {
                "saturates": int8_products_saturate(),
                "int8_exact": bool(np.array_equal(run(model(weight), a), exact)),
                "uint8_exact": bool(np.array_equal(run(unsigned, a), exact)),
                "changed": changed,
            }
        )
    )


if __name__ == "__main__":
    main()
