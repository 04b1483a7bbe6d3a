"""The default cases and the DESIGN.md goals they are measured against."""

from __future__ import annotations

from .data import Case


def make_case(dtype: str, layer_norm: bool, batch: int, seq: int, out: bool = False) -> Case:
    """A BERT-base-shaped case named ``f32-ln-B8-S128``, ``f64-sum-out-B32-S512``, ...

    Parameters
    ----------
    dtype : {"float64", "float32"}
    layer_norm : bool
    batch, seq : int
    out : bool, default False

    Returns
    -------
    Case
    """
    short = {"float32": "f32", "float64": "f64"}[dtype]
    kind = "ln" if layer_norm else "sum"
    name = f"{short}-{kind}{'-out' if out else ''}-B{batch}-S{seq}"
    return Case(name, dtype, layer_norm, batch, seq, out)


#: The DESIGN.md goal rows first, then a float32 + LayerNorm batch sweep at
#: S=128 (together with the goal rows: B = 1, 2, 4, 8, 16, 32) for plots.
DEFAULT_CASES: list[Case] = [
    make_case("float64", False, 32, 512),
    make_case("float64", False, 32, 512, out=True),
    make_case("float32", True, 32, 512),
    make_case("float32", True, 8, 128),
    make_case("float32", True, 1, 128),
    *(make_case("float32", True, b, 128) for b in (2, 4, 16, 32)),
]

#: DESIGN.md goals: case name -> {peer: lowest acceptable peer/bertembed ratio}.
#: "<= 1.3x the time of np.copyto" is a copyto/bertembed ratio of 1/1.3.
GOALS: dict[str, dict[str, float]] = {
    "f64-sum-B32-S512": {"numpy": 5.0},
    "f64-sum-out-B32-S512": {"copyto": 1 / 1.3},
    "f32-ln-B32-S512": {"onnxruntime": 1.5},
    "f32-ln-B8-S128": {"onnxruntime": 1.5},
    "f32-ln-B1-S128": {"onnxruntime": 1.5, "torch": 3.0},
}

#: Goal for :func:`peak_memory`: peak extra bytes of a call / result bytes.
PEAK_MEMORY_GOAL = 1.1
