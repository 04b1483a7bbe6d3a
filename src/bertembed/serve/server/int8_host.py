"""An int8 encoder's weights for the CPU it runs on.

ONNX Runtime multiplies the int8 encoder's uint8 activations by its int8
weights. On x86-64 CPUs without an int8 dot-product instruction (AVX512-VNNI,
AVX-VNNI or AMX-INT8: AVX2-only hosts, and AVX-512 ones before Cascade
Lake), its kernels use ``VPMADDUBSW``, which adds two products into 16 bits
and saturates: all-MiniLM-L6-v2's int8 encoder, exported at cosine 0.995 to
the model on such a CPU's neighbour with VNNI, reached only 0.980 on an AVX2
one. There the worker stores each weight as uint8 with 128 added, and its
zero point with it (``w + 128`` against ``zp + 128``: the same products, to
the bit, through the uint8 x uint8 kernels, which do not saturate) before
the session is made. Elsewhere the encoder is loaded as exported.

Examples
--------
>>> import numpy as np, onnx
>>> from onnx import helper, numpy_helper
>>> w = numpy_helper.from_array(np.array([[-128, 127]], np.int8), "w")
>>> zp = numpy_helper.from_array(np.array([0, 0], np.int8), "zp")
>>> node = helper.make_node("MatMulInteger", ["a", "w", "", "zp"], ["y"])
>>> graph = helper.make_graph([node], "g", [], [], initializer=[w, zp])
>>> model = helper.make_model(graph)
>>> unsigned_weights(model)
1
>>> [numpy_helper.to_array(init).tolist() for init in model.graph.initializer]
[[[0, 255]], [128, 128]]
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

#: Integer operators with a constant int8 weight: (weight input, weight zero-point input).
WEIGHT_INPUTS = {"MatMulInteger": (1, 3), "QAttention": (1, 7)}


def unsigned_weights(model: onnx.ModelProto) -> int:
    """Store the int8 weights of ``model``'s integer operators as uint8 + 128, their zero points
    with them (in place): the number of weights changed."""
    inits = {init.name: init for init in model.graph.initializer}
    shifted: set[str] = set()
    weights = 0
    for node in model.graph.node:
        slots = WEIGHT_INPUTS.get(node.op_type)
        if slots is None or len(node.input) <= slots[0]:
            continue
        w_name = node.input[slots[0]]
        weight = inits.get(w_name)
        zp_name = node.input[slots[1]] if len(node.input) > slots[1] else ""
        zero_point = inits.get(zp_name) if zp_name else None
        if weight is None or (zp_name and zero_point is None):
            continue  # a weight or zero point computed at run time: the node stays as it is
        if w_name not in shifted:
            if weight.data_type != TensorProto.INT8:
                continue
            weight.CopyFrom(numpy_helper.from_array(_shifted(weight), w_name))
            shifted.add(w_name)
            weights += 1
        if zero_point is None:  # none given: 0, now 128
            zp_name = f"{w_name}_zero_point_uint8"
            if zp_name not in inits:
                inits[zp_name] = numpy_helper.from_array(np.array(128, np.uint8), zp_name)
                model.graph.initializer.append(inits[zp_name])
            while len(node.input) <= slots[1]:
                node.input.append("")
            node.input[slots[1]] = zp_name
        elif zp_name not in shifted:
            zero_point.CopyFrom(numpy_helper.from_array(_shifted(zero_point), zp_name))
            shifted.add(zp_name)
    return weights


def for_this_cpu(path: str) -> str | bytes:
    """The encoder file as a session on this CPU should load it: ``path``, or, where int8 products
    saturate (``_kernel.int8_products_saturate``) and it has int8 weights, the model with
    :func:`unsigned_weights` applied, serialised."""
    from ..._core._kernel import int8_products_saturate

    if not int8_products_saturate():
        return path
    model = onnx.load(path)
    return model.SerializeToString() if unsigned_weights(model) else path


def _shifted(tensor: onnx.TensorProto) -> np.ndarray:
    """int8 values + 128, as uint8."""
    return (numpy_helper.to_array(tensor).astype(np.int16) + 128).astype(np.uint8)
