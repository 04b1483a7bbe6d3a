"""``bertembed bench --plot``: time per call against batch size, drawn with matplotlib."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._bench.schema import BenchRun, CaseResult, as_run, label
from .._version import __version__
from .common import CLIError


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CLIError(
            "--plot needs matplotlib, which is not installed (pip install matplotlib, or pip install 'bertembed[plot]')"
        ) from None


def _result_group(result: CaseResult) -> str:
    """The series a result belongs to: everything that defines a case but the batch size."""
    parts = [result.dtype]
    if result.table_dtype:
        parts.append(f"{result.table_dtype} tables")
    parts.append("+ LayerNorm" if result.layer_norm else "sum")
    if result.out:
        parts.append("into out=")
    parts.append(f"S={result.seq}")
    if result.H is not None:
        parts.append(f"H={result.H}")
    parts.append(f"{result.threads} threads")
    return ", ".join(parts)


def plot_results(results: BenchRun | Sequence[Mapping[str, Any]], path: Path) -> None:
    """Draw time per call against batch size, log-log, one line per contender.

    Cases that differ in anything but the batch size (dtype, LayerNorm,
    sequence length, ...) go into separate panels; only series with several
    batch sizes are drawn, unless there are none.

    Parameters
    ----------
    results : sequence of dict, or BenchRun
        Rows as returned by ``bertembed._bench.runner.run`` (read through
        :mod:`bertembed._bench.schema`).
    path : pathlib.Path
        Where to write the image (the format follows the suffix, e.g. ``.png``).
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    run = as_run(results)
    groups: dict[str, list[CaseResult]] = {}
    for result in run.cases:
        if result.timings:
            groups.setdefault(_result_group(result), []).append(result)
    if not groups:
        raise CLIError("--plot: the benchmark results have no timings to draw")
    # Series over several batch sizes are what the plot is for; single cases
    # (the other goal rows) are drawn only when there is no such series.
    sweeps = {k: v for k, v in groups.items() if len({r.batch for r in v}) > 1}
    groups = sweeps or groups
    ncols = min(len(groups), 2)
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.0 * ncols, 4.2 * nrows), squeeze=False)
    for ax, (title, rows) in zip(axes.flat, groups.items(), strict=False):
        series: dict[str, list[tuple[int, float]]] = {}
        for row in rows:
            for name, seconds in row.times.items():
                series.setdefault(name, []).append((row.batch, seconds))
        batches = sorted({b for points in series.values() for b, _ in points})
        for name in sorted(series, key=lambda n: (n != "bertembed", n)):
            points = sorted(series[name])
            xs = [b for b, _ in points]
            ys = [1e3 * t for _, t in points]
            style = {"linewidth": 2.5, "zorder": 3} if name == "bertembed" else {}
            ax.plot(xs, ys, marker="o", label=label(name), **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("batch size B")
        ax.set_ylabel("median time per call (ms)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    scenario = {"isolated": "each contender in its own process", "shared-process": "all contenders in one process"}.get(
        run.cases[0].scenario, ""
    )
    title = f"bertembed {__version__}: time per call (lower is better)"
    fig.suptitle(f"{title}\n{scenario}" if scenario else title)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.partial-{os.getpid()}{path.suffix}")
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if tmp.exists():
            tmp.unlink()
