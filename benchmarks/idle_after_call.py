"""Idle OpenMP workers after a call, and the matmul that runs right after one.

Each run is its own process (the wait policy is fixed when the kernel loads):
``BERTEMBED_WAIT_POLICY=passive`` (the default) and ``=active`` (the OpenMP
runtime's own policy). It prints the process's CPU time over a 1 s sleep
after 2-thread calls (the harness's BERT-base layer, ``bert_base_layer``:
B=8, S=128, H=768 float32, no LayerNorm), the median call time with
2 ms pauses between calls, and two encoder-like steps, each after a 0.3 s
pause and then right after a 2-thread call, right after a 1-thread call (the
same data through the caches, no OpenMP worker: what threads add) or right
after nothing (medians): a NumPy (OpenBLAS) 256x768 @ 768x768 matmul,
and, when onnxruntime is installed, an ONNX Runtime session (two threads) of
a feed-forward block (1024x768 @ 768x3072, Gelu, @ 3072x768). Every figure is taken
with the harness's clock (``bertembed._bench.timing``).

    for p in passive active; do BERTEMBED_WAIT_POLICY=$p python benchmarks/idle_after_call.py; done
"""

import argparse
import os
import time

import numpy as np

from bertembed._bench.subject import bert_base_layer
from bertembed._bench.timing import CallLog, time_once


def ort_block(rng: np.random.Generator, h: int):  # type: ignore[no-untyped-def]
    """An ONNX Runtime run of a BERT feed-forward block on (1024, h), or None without onnxruntime."""
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    w1 = numpy_helper.from_array(rng.standard_normal((h, 4 * h), dtype=np.float32) * 0.02, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4 * h, h), dtype=np.float32) * 0.02, "w2")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["u"]),
            helper.make_node("Gelu", ["u"], ["g"], domain="com.microsoft"),
            helper.make_node("MatMul", ["g", "w2"], ["y"]),
        ],
        "ffn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1024, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1024, h])],
        initializer=[w1, w2],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    x = rng.standard_normal((1024, h), dtype=np.float32)
    del onnx
    return lambda: session.run(None, {"x": x})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few calls and a short sleep (a smoke run)")
    args = parser.parse_args()
    calls_n, rounds, sleep = (20, 3, 0.1) if args.quick else (200, 30, 1.0)
    layer, ids = bert_base_layer(8, 128, layer_norm=False, seed=0)
    H = layer.hidden_size
    rng = np.random.default_rng(0)
    for _ in range(20):
        layer(ids, num_threads=2)
    idle = time_once(lambda: time.sleep(sleep)).cpu_s / sleep  # CPU seconds per second of sleep
    call = CallLog(lambda: layer(ids, num_threads=2))
    for _ in range(calls_n):
        call()
        time.sleep(0.002)
    a = rng.standard_normal((256, H), dtype=np.float32)
    b = rng.standard_normal((H, H), dtype=np.float32)
    after, after_one, paused = CallLog(lambda: a @ b), CallLog(lambda: a @ b), CallLog(lambda: a @ b)
    block = ort_block(rng, H)
    if block is not None:
        block()
    ort = (CallLog(block), CallLog(block), CallLog(block)) if block is not None else None
    pause = 0.3 if not args.quick else 0.05
    before = (lambda: layer(ids, num_threads=2), lambda: layer(ids, num_threads=1), lambda: None)
    for _ in range(rounds):
        # After a 2-thread call, after a 1-thread call (the same data through
        # the caches, no OpenMP worker), after nothing; each after a pause, so
        # that a step sees only what ran right before it (not the previous
        # step's runtime still spinning).
        for step in ((after, after_one, paused),) + ((ort,) if ort is not None else ()):
            for run_before, log in zip(before, step, strict=True):
                time.sleep(pause)
                run_before()
                log()

    def median_ms(log: CallLog) -> float:
        return float(np.median([r.seconds for r in log.records]) * 1e3)

    policy = os.environ.get("BERTEMBED_WAIT_POLICY", "passive")
    print(
        f"{policy}: idle {idle * 1e3:.1f} ms CPU per second of sleep; call p50 {median_ms(call):.3f} ms; "
        f"matmul after a 2-thread call {median_ms(after):.2f} ms, after a 1-thread call "
        f"{median_ms(after_one):.2f} ms, after a pause {median_ms(paused):.2f} ms"
        + (
            f"; ONNX Runtime block after a 2-thread call {median_ms(ort[0]):.2f} ms, after a 1-thread call "
            f"{median_ms(ort[1]):.2f} ms, after a pause {median_ms(ort[2]):.2f} ms"
            if ort is not None
            else ""
        )
    )


if __name__ == "__main__":
    main()
