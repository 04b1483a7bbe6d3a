"""The harness's case families and the performance goals it measures (docs: the performance page).

Two families: ``default`` (:data:`DEFAULT_CASES`, bertembed against its
peers) and ``tables`` (:data:`TABLE_CASES`, float32, bfloat16 and int8
token tables of a BERT-base and of a 250k-row vocabulary side by side, for
each row kernel, ``BERTEMBED_ISA``, this machine runs).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._core import knobs
from .data import BERTEMBED, BERTEMBED_T, Case

#: BERT-base's vocabulary (token rows).
BERT_BASE_VOCAB = 30522
#: XLM-R's vocabulary: the multilingual models whose token table is most of the model.
BIG_VOCAB = 250_002
#: The shapes of the ``tables`` family, (B, S).
TABLE_SHAPES = ((32, 512), (8, 128))
#: The token-table dtypes the ``tables`` family compares (None: float32, as given).
TABLE_KINDS = (None, "bfloat16", "int8")
#: The row kernels (``BERTEMBED_ISA``) the ``tables`` family is measured with,
#: each the machine runs and the build holds (:func:`runnable_isas`).
TABLE_ISAS = knobs.ISA.accepted


def runnable_isas() -> list[str]:
    """The row kernels this build holds, narrowest first, up to the one this
    process runs (the widest the CPU runs, unless ``BERTEMBED_ISA`` caps it)."""
    from .._core import _kernel

    info = _kernel.build_info()
    built = list(info["isas"])  # type: ignore[call-overload]
    chosen = str(info["isa"])
    return built[: built.index(chosen) + 1] if chosen in built else built


def make_case(
    dtype: str,
    layer_norm: bool,
    batch: int,
    seq: int,
    out: bool = False,
    table_dtype: str | None = None,
    vocab: int = BERT_BASE_VOCAB,
    id_sets: int = 1,
    isa: str | None = None,
) -> Case:
    """A BERT-base-shaped case named ``f32-ln-B8-S128``, ``f64-sum-out-B32-S512``, ...

    Parameters
    ----------
    dtype : {"float64", "float32"}
    layer_norm : bool
    batch, seq : int
    out : bool, default False
    table_dtype : str, optional
        ``"bfloat16"`` gives ``f32-ln-bf16-B32-S512``, ``"int8"``
        ``f32-ln-i8-B32-S512``.
    vocab : int, default 30522
        Token rows; another than BERT-base's is named in thousands
        (``f32-ln-V250k-i8-B8-S128``).
    id_sets : int, default 1
        Calls cycle through this many sets of random ids (see
        :class:`~bertembed._bench.data.Case`). Such a case always names its
        token rows (``f32-ln-V30k-B8-S128``), so that it never shares a name
        with a case that calls with the same ids every time.
    isa : str, optional
        The row kernel its processes run (``BERTEMBED_ISA``), named last
        (``f32-ln-V250k-i8-B8-S128-avx2``).

    Returns
    -------
    Case

    Examples
    --------
    >>> make_case("float32", True, 32, 512, table_dtype="bfloat16").name
    'f32-ln-bf16-B32-S512'
    >>> make_case("float32", True, 8, 128, table_dtype="int8", vocab=250_002).name
    'f32-ln-V250k-i8-B8-S128'
    >>> make_case("float32", True, 8, 128, id_sets=256).name
    'f32-ln-V30k-B8-S128'
    >>> make_case("float32", True, 8, 128, table_dtype="int8", vocab=250_002, isa="avx2").name
    'f32-ln-V250k-i8-B8-S128-avx2'
    """
    short = {"float32": "f32", "float64": "f64"}
    kind = "ln" if layer_norm else "sum"
    rows = "" if vocab == BERT_BASE_VOCAB and id_sets == 1 else f"-V{vocab // 1000}k"
    tables = {None: "", "bfloat16": "-bf16", "float16": "-f16", "int8": "-i8"}[table_dtype]
    name = f"{short[dtype]}-{kind}{rows}{tables}{'-out' if out else ''}-B{batch}-S{seq}{'-' + isa if isa else ''}"
    return Case(name, dtype, layer_norm, batch, seq, out, V=vocab, table_dtype=table_dtype, id_sets=id_sets, isa=isa)


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

#: Token rows read by the calls of one cycle through a ``tables`` case's id
#: sets (768 MiB of float32 rows): rows read by one call are not read again
#: before the cache has long forgotten them.
TABLE_ROWS_PER_CYCLE = 2**18


def table_case(batch: int, seq: int, kind: str | None, vocab: int, out: bool = False, isa: str | None = None) -> Case:
    """A case of the ``tables`` family: float32 + LayerNorm, ``kind`` token tables, fresh ids at each call.

    Examples
    --------
    >>> c = table_case(8, 128, "int8", BIG_VOCAB, isa="avx2")
    >>> c.name, c.isa, c.id_sets * c.batch * c.seq >= TABLE_ROWS_PER_CYCLE
    ('f32-ln-V250k-i8-B8-S128-avx2', 'avx2', True)
    """
    sets = -(-TABLE_ROWS_PER_CYCLE // (batch * seq))
    return make_case("float32", True, batch, seq, out, table_dtype=kind, vocab=vocab, id_sets=sets, isa=isa)


#: The ``tables`` family: float32 + LayerNorm with float32, bfloat16 and int8
#: tables, uniformly random ids (fresh ones at each call: the calls cycle
#: through :data:`TABLE_ROWS_PER_CYCLE` rows' worth of id sets), for the
#: BERT-base table (89 MiB in float32) and a 250,002-row one (732 MiB), at
#: each of :data:`TABLE_SHAPES`, with each row kernel of :data:`TABLE_ISAS`
#: (:func:`family` keeps those the machine runs). Whether a table fits the
#: last-level cache then decides, not whether one batch's rows do.
TABLE_CASES: list[Case] = [
    table_case(b, s, kind, vocab, isa=isa)
    for isa in TABLE_ISAS
    for vocab in (BERT_BASE_VOCAB, BIG_VOCAB)
    for b, s in TABLE_SHAPES
    for kind in TABLE_KINDS
]

#: Case families by name (``bertembed bench --family``).
FAMILIES = ("default", "tables")


def family(name: str) -> list[Case]:
    """The cases of the family `name` (one of :data:`FAMILIES`).

    Examples
    --------
    >>> [c.name for c in family("tables")][:3]
    ['f32-ln-V30k-B32-S512-baseline', 'f32-ln-V30k-bf16-B32-S512-baseline', 'f32-ln-V30k-i8-B32-S512-baseline']
    """
    if name == "default":
        return list(DEFAULT_CASES)
    if name == "tables":
        isas = runnable_isas()
        return [c for c in TABLE_CASES if c.isa is None or c.isa in isas]
    raise ValueError(f"unknown case family {name!r}; known: {', '.join(FAMILIES)}")


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

#: The ``tables`` family's goals, for every row kernel: float32-table time /
#: narrow-table time at least this, by token rows. A 250k-row table is read
#: from memory (the narrower, the fewer bytes); a BERT-base table must never
#: be slower narrow than float32.
TABLE_GOALS: dict[int, tuple[tuple[str, float], ...]] = {
    BIG_VOCAB: (("bfloat16", 1.2), ("int8", 1.3)),
    BERT_BASE_VOCAB: (("bfloat16", 1.0), ("int8", 1.0)),
}

#: The performance goals (the docs' performance page) that timing can measure (the
#: memory rows are :data:`PEAK_MEMORY_GOAL` and benchmarks/run.py). The
#: bertembed side is always bertembed at its automatic thread choice.
GOALS: list[Goal] = [
    Goal(
        "numpy-5x",
        "float64 sum, B=32 S=512: numpy expression / bertembed",
        "f64-sum-B32-S512",
        ("numpy",),
        (BERTEMBED,),
        5.0,
    ),
    Goal(
        "copyto-1.3x",
        "float64 sum into out=, B=32 S=512: bertembed / np.copyto",
        "f64-sum-out-B32-S512",
        (BERTEMBED,),
        ("copyto",),
        1.3,
        at_least=False,
    ),
    *(
        Goal(
            f"best-peer-2x-{name}",
            f"float32 + LayerNorm, {shape}: best of ONNX Runtime, torch / bertembed",
            name,
            _PEERS_LN,
            (BERTEMBED,),
            2.0,
        )
        for name, shape in (
            ("f32-ln-B32-S512", "B=32 S=512"),
            ("f32-ln-B8-S128", "B=8 S=128"),
            ("f32-ln-B1-S128", "B=1 S=128"),
        )
    ),
    *(
        Goal(
            f"auto-threads-{name}",
            f"float32 + LayerNorm, {shape}: bertembed's automatic threads / the better of 1 and T threads",
            name,
            (BERTEMBED,),
            (BERTEMBED_T,),
            1.10,
            at_least=False,
        )
        for name, shape in (
            ("f32-ln-B32-S512", "B=32 S=512"),
            ("f32-ln-B8-S128", "B=8 S=128"),
            ("f32-ln-B1-S128", "B=1 S=128"),
        )
    ),
    Goal(
        "take-1.5x",
        "float32 + LayerNorm, B=1 S=128: bertembed / np.take of the token rows (one thread)",
        "f32-ln-B1-S128",
        (BERTEMBED,),
        ("take",),
        1.5,
        at_least=False,
    ),
    Goal(
        "bf16-1.2x",
        "float32 + LayerNorm, B=32 S=512: float32 tables / bfloat16 tables (bertembed)",
        "f32-ln-bf16-B32-S512",
        (BERTEMBED,),
        (BERTEMBED,),
        1.2,
        numerator_case="f32-ln-B32-S512",
    ),
    *(
        Goal(
            f"{kind}-{bound:g}x-V{vocab // 1000}k-B{b}-S{s}-{isa}",
            f"float32 + LayerNorm, {vocab // 1000}k x 768 tables, B={b} S={s}, {isa} kernel: "
            f"float32 tables / {kind} tables (bertembed)",
            table_case(b, s, kind, vocab, isa=isa).name,
            (BERTEMBED,),
            (BERTEMBED,),
            bound,
            numerator_case=table_case(b, s, None, vocab, isa=isa).name,
        )
        for isa in TABLE_ISAS
        for vocab, bounds in TABLE_GOALS.items()
        for b, s in TABLE_SHAPES
        for kind, bound in bounds
    ),
]

#: Goal for ``benchmarks/shared/memory.py``'s ``peak_memory``: peak extra bytes of a
#: call / result bytes.
PEAK_MEMORY_GOAL = 1.1
