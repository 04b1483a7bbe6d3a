"""``bertembed bench --plot``: time per call against batch size, drawn with matplotlib."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._version import __version__
from .common import CLIError


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CLIError(
            "--plot needs matplotlib, which is not installed "
            "(pip install matplotlib, or pip install 'bertembed[plot]')"
        ) from None


def _result_times(result: Mapping[str, Any]) -> dict[str, float]:
    """``{contender: median seconds per call}`` of one result row of the harness."""
    timings = result.get("timings")
    if not isinstance(timings, Mapping):
        return {}
    times = {}
    for name, stats in timings.items():
        value = stats.get("median_s") if isinstance(stats, Mapping) else stats
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            times[str(name)] = float(value)
    return times


def _result_group(result: Mapping[str, Any]) -> str:
    """The series a result belongs to: everything that defines a case but the batch size."""
    parts = [str(result.get("dtype", ""))]
    if result.get("table_dtype"):
        parts.append(f"{result['table_dtype']} tables")
    parts.append("+ LayerNorm" if result.get("layer_norm") else "sum")
    if result.get("out"):
        parts.append("into out=")
    if "seq" in result:
        parts.append(f"S={result['seq']}")
    if "H" in result:
        parts.append(f"H={result['H']}")
    if "threads" in result:
        parts.append(f"{result['threads']} threads")
    return ", ".join(p for p in parts if p)


def _result_batch(result: Mapping[str, Any]) -> int | None:
    batch = result.get("batch")
    return int(batch) if isinstance(batch, int) and not isinstance(batch, bool) else None


def plot_results(results: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Draw time per call against batch size, log-log, one line per contender.

    Cases that differ in anything but the batch size (dtype, LayerNorm,
    sequence length, ...) go into separate panels; only series with several
    batch sizes are drawn, unless there are none.

    Parameters
    ----------
    results : sequence of dict
        Rows as returned by ``bertembed._bench.runner.run``.
    path : pathlib.Path
        Where to write the image (the format follows the suffix, e.g. ``.png``).
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    groups: dict[str, list[Mapping[str, Any]]] = {}
    for result in results:
        if _result_batch(result) is not None and _result_times(result):
            groups.setdefault(_result_group(result), []).append(result)
    if not groups:
        raise CLIError("--plot: the benchmark results have no batch sizes or timings to draw")
    # Series over several batch sizes are what the plot is for; single cases
    # (the other goal rows) are drawn only when there is no such series.
    sweeps = {k: v for k, v in groups.items() if len({_result_batch(r) for r in v}) > 1}
    groups = sweeps or groups
    ncols = min(len(groups), 2)
    nrows = math.ceil(len(groups) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(6.0 * ncols, 4.2 * nrows), squeeze=False
    )
    for ax, (title, rows) in zip(axes.flat, groups.items(), strict=False):
        series: dict[str, list[tuple[int, float]]] = {}
        for row in rows:
            batch = _result_batch(row) or 0
            for name, seconds in _result_times(row).items():
                series.setdefault(name, []).append((batch, seconds))
        batches = sorted({b for points in series.values() for b, _ in points})
        for name in sorted(series, key=lambda n: (n != "bertembed", n)):
            points = sorted(series[name])
            xs = [b for b, _ in points]
            ys = [1e3 * t for _, t in points]
            style = {"linewidth": 2.5, "zorder": 3} if name == "bertembed" else {}
            ax.plot(xs, ys, marker="o", label=name, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(batches, [str(b) for b in batches])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("batch size B")
        ax.set_ylabel("median time per call (ms)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    for ax in list(axes.flat)[len(groups):]:
        ax.set_visible(False)
    scenario = {"isolated": "each contender in its own process",
                "shared-process": "all contenders in one process"}.get(str(results[0].get("scenario")), "")
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
