"""Write a shared encoder and check it: ``python -m bertembed.serve.server.shared_build SOURCE OUT_DIR LEVEL``.

The child process of :func:`bertembed.serve.server.memory.shared_encoder`:
it loads ``SOURCE`` (an artifact's ``encoder.onnx``) at the graph
optimisation ``LEVEL`` with the settings that save the optimised graph and
its prepacked weights into ``OUT_DIR``, loads what it wrote as a worker
would, and exits with an error unless both give the same results, bit for
bit, on inputs of every declared kind. Run in a child so that the caller
never holds a copy of the model.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from .memory import SAVE_CONFIG, SHARED_FILE

#: ONNX Runtime's graph optimisation levels by the names the server's settings use.
LEVELS = ("basic", "extended", "all")


def _options(level: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return options


def _feeds(session: Any) -> dict[str, np.ndarray]:
    """Inputs for every declared input: batch 2, length 7 where a dimension is free; ones for ids, noise for floats."""
    feeds = {}
    rng = np.random.default_rng(0)
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else (2 if k == 0 else 7) for k, d in enumerate(arg.shape)]
        feeds[arg.name] = np.ones(shape, np.int64) if "int" in arg.type else rng.standard_normal(shape, np.float32)
    return feeds


def build(source: Path, out: Path, level: str) -> None:
    """Write ``out/encoder.onnx`` (+ its data) from ``source`` and check it; SystemExit if they differ."""
    import onnxruntime as ort

    options = _options(level)
    options.optimized_model_filepath = str(out / SHARED_FILE)
    for key, value in SAVE_CONFIG.items():
        options.add_session_config_entry(key, value)
    reference = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    shared = ort.InferenceSession(str(out / SHARED_FILE), _options(level), providers=["CPUExecutionProvider"])
    feeds = _feeds(reference)
    for a, b in zip(reference.run(None, feeds), shared.run(None, feeds), strict=True):
        if not np.array_equal(a, b):
            raise SystemExit("the shared encoder's results differ from the source's")


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[2] not in LEVELS:
        print(f"usage: python -m {__spec__.name if __spec__ else 'shared_build'} SOURCE OUT_DIR {{basic,extended,all}}")
        return 2
    build(Path(argv[0]), Path(argv[1]), argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
