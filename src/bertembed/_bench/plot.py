"""The one plotter of the results' JSON: time per call and each peer's ratio against batch size.

``bertembed bench --plot`` and the documentation's performance figure
(``docs/_ext/bench_figure.py``) both draw with :func:`draw`. One row of two
panels per series (a scenario and everything that defines a case but the
batch size): on the left the median time per call of every contender,
log-log; on the right each peer's time over bertembed's (above 1: bertembed
is faster). Only series over several batch sizes are drawn, unless there are
none. matplotlib is imported when a figure is drawn.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .report import COLUMNS
from .schema import SUBJECT, BenchDataError, BenchRun, CaseResult, as_run, label

#: What ``--plot`` without matplotlib says.
NEEDS_MATPLOTLIB = "drawing needs matplotlib, which is not installed (pip install matplotlib, or 'bertembed[plot]')"
#: Each scenario's heading in a row's title.
HEADINGS = {"isolated": "isolated processes", "shared-process": "shared process"}


def require_matplotlib() -> None:
    """ImportError (:data:`NEEDS_MATPLOTLIB`) unless matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ImportError(NEEDS_MATPLOTLIB) from None


def series_name(result: CaseResult) -> str:
    """What a result's series is: everything that defines its case but the batch size.

    Examples
    --------
    >>> from types import SimpleNamespace as R
    >>> series_name(R(dtype="float32", table_dtype=None, layer_norm=True, out=False, seq=128, H=768, threads=2))
    'float32 + LayerNorm, S=128, H=768, 2 threads'
    """
    parts = [result.dtype]
    if result.table_dtype:
        parts.append(f"{result.table_dtype} tables")
    parts[-1] += " + LayerNorm" if result.layer_norm else " sum"
    if result.out:
        parts.append("into out=")
    parts.append(f"S={result.seq}")
    if result.H is not None:
        parts.append(f"H={result.H}")
    parts.append(f"{result.threads} threads")
    return ", ".join(parts)


def series(run: BenchRun) -> list[tuple[str, str, list[CaseResult]]]:
    """The series :func:`draw` draws: ``(scenario, series name, cases sorted by batch)``.

    Series over several batch sizes if the run has any, else every series;
    cases without timings are left out.
    """
    groups: dict[tuple[str, str], list[CaseResult]] = {}
    for result in run.cases:
        if result.timings:
            groups.setdefault((result.scenario, series_name(result)), []).append(result)
    sweeps = {k: v for k, v in groups.items() if len({r.batch for r in v}) > 1}
    chosen = sweeps or groups
    return [(scenario, name, sorted(rows, key=lambda r: r.batch)) for (scenario, name), rows in chosen.items()]


def _contenders(cases: list[CaseResult]) -> list[str]:
    """Every contender of `cases`, in the harness's table order."""
    order = tuple(COLUMNS)
    names = {n for c in cases for n in c.times}
    return sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n))


def draw(
    results: BenchRun | Sequence[Mapping[str, Any]], path: str | os.PathLike[str], *, title: str | None = None
) -> None:
    """Draw every series of `results` into the image `path` (its format follows the suffix).

    Parameters
    ----------
    results : BenchRun, or sequence of dict
        A run read by :func:`bertembed._bench.schema.load`, or records as the
        runner returns them (checked here).
    path : path
        Where to write the image; written to a temporary name first, then
        moved into place.
    title : str, optional
        The figure's title.

    Raises
    ------
    BenchDataError
        Malformed records, or no timings to draw.
    ImportError
        matplotlib is not installed.
    """
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullLocator

    run = as_run(results)
    rows = series(run)
    if not rows:
        raise BenchDataError(f"{run.source}: no timings to draw")
    fig, axes = plt.subplots(len(rows), 2, figsize=(11.0, 4.3 * len(rows)), squeeze=False)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    peers = [n for n in _contenders([c for _, _, cases in rows for c in cases]) if not n.startswith(SUBJECT)]
    colors = {n: palette[i % len(palette)] for i, n in enumerate(peers)}
    for (time_ax, ratio_ax), (scenario, name, cases) in zip(axes, rows, strict=True):
        batches = sorted({c.batch for c in cases})
        for contender in _contenders(cases):
            points = [(c.batch, c.times[contender]) for c in cases if contender in c.times]
            style: dict[str, Any] = {"marker": "o", "label": label(contender)}
            if contender == SUBJECT:
                style.update(linewidth=2.5, zorder=3, color="black")
            elif contender.startswith(SUBJECT):
                style.update(linestyle="--", color="black")
            else:
                style.update(color=colors[contender])
            time_ax.plot([b for b, _ in points], [1e3 * t for _, t in points], **style)
            if not contender.startswith(SUBJECT):
                ratios = [(c.batch, c.ratio(contender)) for c in cases if contender in c.times and SUBJECT in c.times]
                xs, ys = [b for b, _ in ratios], [r for _, r in ratios]
                ratio_ax.plot(xs, ys, marker="o", label=label(contender), color=colors[contender])
        ratio_ax.axhline(1.0, color="black", linewidth=1)
        heading = HEADINGS.get(scenario, scenario)
        time_ax.set_title(f"{heading}: time per call", fontsize="medium")
        time_ax.set_ylabel("median ms per call (lower is better)")
        time_ax.set_yscale("log")
        ratio_ax.set_title(f"{heading}: peer time / bertembed time", fontsize="medium")
        ratio_ax.set_ylabel("ratio (above 1: bertembed is faster)")
        ratio_ax.set_yscale("log", base=2)
        ratio_ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ratio_ax.yaxis.set_minor_locator(NullLocator())
        for ax in (time_ax, ratio_ax):
            ax.set_xscale("log", base=2)
            ax.set_xticks(batches, [str(b) for b in batches])
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xlabel(f"batch size B ({name})")
            ax.grid(True, which="both", alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.stem}.partial-{os.getpid()}{target.suffix}")
    try:
        fig.savefig(tmp, dpi=100)
        os.replace(tmp, target)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
