"""``format_table``: the results of a run as plain text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def format_table(results: Sequence[Mapping[str, Any]]) -> str:
    """A plain-text table of medians and ratios, one row per case.

    Parameters
    ----------
    results : sequence of dict
        The output of :func:`run`.

    Returns
    -------
    str
        Cells are ``median (ratio x)``; ``ratio`` is peer median / bertembed
        median, so above 1 means bertembed is faster. Skipped peers show
        their status; ``-`` means the peer does not apply to the case.
    """
    if not results:
        return "(no results)"
    peers: list[str] = []
    for r in results:
        for name in [*r["timings"], *r["skipped"]]:
            if name != "bertembed" and name not in peers:
                peers.append(name)
    header = ["case", "T", "be T", "bertembed", *peers, "goals"]
    rows = []
    for r in results:
        row = [r["name"], str(r["threads"]), str(r.get("bertembed_threads", r["threads"])),
               _fmt_time(r["timings"]["bertembed"]["median_s"])]
        for p in peers:
            if p in r["timings"]:
                row.append(f"{_fmt_time(r['timings'][p]['median_s'])} ({r['ratios'][p]:.2f}x)")
            elif p in r["skipped"]:
                row.append(r["skipped"][p]["status"])
            else:
                row.append("-")
        goals = []
        for p, g in r["goals"].items():
            verdict = "n/a" if g["met"] is None else ("met" if g["met"] else "MISSED")
            goals.append(f"{p}>={g['min_ratio']:.2f}x {verdict}")
        row.append("; ".join(goals) or "-")
        rows.append(row)
    widths = [max(len(x[i]) for x in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
             for line in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    m = results[0]["machine"]
    lines.append("")
    lines.append(
        f"medians of {results[0]['repeats']} interleaved repeats; cell = median "
        "(peer median / bertembed median; >1 means bertembed is faster)"
    )
    lines.append(
        "T: threads every contender may use; be T: what bertembed's automatic choice took under that ceiling"
    )
    lines.append(
        f"machine: {m.get('platform')}, {m.get('cpu_model')}, cpu_count={m.get('cpu_count')}; "
        f"numpy {m.get('numpy')}, torch {m.get('torch')}, onnxruntime {m.get('onnxruntime')}"
    )
    skipped = {(p, s["status"], s["reason"]) for r in results for p, s in r["skipped"].items()}
    for p, status, reason in sorted(skipped):
        lines.append(f"{p}: {status}: {reason}")
    return "\n".join(lines)
