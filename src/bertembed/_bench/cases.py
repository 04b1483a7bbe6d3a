"""The default cases and the performance goals the harness measures (docs: the performance page)."""

from __future__ import annotations

from dataclasses import dataclass

from .data import BERTEMBED, BERTEMBED_T, Case


def make_case(
    dtype: str,
    layer_norm: bool,
    batch: int,
    seq: int,
    out: bool = False,
    table_dtype: str | None = None,
) -> Case:
    """A BERT-base-shaped case named ``f32-ln-B8-S128``, ``f64-sum-out-B32-S512``, ...

    Parameters
    ----------
    dtype : {"float64", "float32"}
    layer_norm : bool
    batch, seq : int
    out : bool, default False
    table_dtype : str, optional
        ``"bfloat16"`` gives ``f32-ln-bf16-B32-S512``.

    Returns
    -------
    Case

    Examples
    --------
    >>> make_case("float32", True, 32, 512, table_dtype="bfloat16").name
    'f32-ln-bf16-B32-S512'
    """
    short = {"float32": "f32", "float64": "f64"}
    kind = "ln" if layer_norm else "sum"
    tables = {None: "", "bfloat16": "-bf16", "float16": "-f16"}[table_dtype]
    name = f"{short[dtype]}-{kind}{tables}{'-out' if out else ''}-B{batch}-S{seq}"
    return Case(name, dtype, layer_norm, batch, seq, out, table_dtype=table_dtype)


#: The goal rows first, then a float32 + LayerNorm batch sweep at
#: S=128 (together with the goal rows: B = 1, 2, 4, 8, 16, 32) for plots.
DEFAULT_CASES: list[Case] = [
    make_case("float64", False, 32, 512),
    make_case("float64", False, 32, 512, out=True),
    make_case("float32", True, 32, 512),
    make_case("float32", True, 8, 128),
    make_case("float32", True, 1, 128),
    make_case("float32", True, 32, 512, table_dtype="bfloat16"),
    *(make_case("float32", True, b, 128) for b in (2, 4, 16, 32)),
]


@dataclass(frozen=True)
class Goal:
    """A performance goal: a ratio of two measured times against a bound.

    ``ratio = time(numerator) / time(denominator)``, where each side is the
    fastest of the named contenders in the named case (each contender at its
    best measured thread count). The goal is met when ``ratio >= bound``
    (``at_least``) or ``ratio <= bound`` (otherwise). The goal's result is
    attached to the result of ``case``.
    """

    key: str
    text: str
    case: str
    numerator: tuple[str, ...]
    denominator: tuple[str, ...]
    bound: float
    at_least: bool = True
    numerator_case: str | None = None

    @property
    def op(self) -> str:
        """``>=`` or ``<=``."""
        return ">=" if self.at_least else "<="


_PEERS_LN = ("onnxruntime", "torch")

#: The performance goals (the docs' performance page) that timing can measure (the
#: memory rows are :data:`PEAK_MEMORY_GOAL` and benchmarks/run.py). The
#: bertembed side is always bertembed at its automatic thread choice.
GOALS: list[Goal] = [
    Goal("numpy-5x", "float64 sum, B=32 S=512: numpy expression / bertembed",
         "f64-sum-B32-S512", ("numpy",), (BERTEMBED,), 5.0),
    Goal("copyto-1.3x", "float64 sum into out=, B=32 S=512: bertembed / np.copyto",
         "f64-sum-out-B32-S512", (BERTEMBED,), ("copyto",), 1.3, at_least=False),
    *(
        Goal(f"best-peer-2x-{name}", f"float32 + LayerNorm, {shape}: best of ONNX Runtime, "
             "torch / bertembed", name, _PEERS_LN, (BERTEMBED,), 2.0)
        for name, shape in (("f32-ln-B32-S512", "B=32 S=512"), ("f32-ln-B8-S128", "B=8 S=128"),
                            ("f32-ln-B1-S128", "B=1 S=128"))
    ),
    *(
        Goal(f"auto-threads-{name}", f"float32 + LayerNorm, {shape}: bertembed's automatic threads / "
             "the better of 1 and T threads", name, (BERTEMBED,), (BERTEMBED_T,), 1.10, at_least=False)
        for name, shape in (("f32-ln-B32-S512", "B=32 S=512"), ("f32-ln-B8-S128", "B=8 S=128"),
                            ("f32-ln-B1-S128", "B=1 S=128"))
    ),
    Goal("take-1.5x", "float32 + LayerNorm, B=1 S=128: bertembed / np.take of the token rows "
         "(one thread)", "f32-ln-B1-S128", (BERTEMBED,), ("take",), 1.5, at_least=False),
    Goal("bf16-1.2x", "float32 + LayerNorm, B=32 S=512: float32 tables / bfloat16 tables "
         "(bertembed)", "f32-ln-bf16-B32-S512", (BERTEMBED,), (BERTEMBED,), 1.2,
         numerator_case="f32-ln-B32-S512"),
]

#: Goal for :func:`bertembed._bench.memory.peak_memory`: peak extra bytes of a
#: call / result bytes.
PEAK_MEMORY_GOAL = 1.1
