"""How many CPUs this process may use: its affinity mask and its container's CPU quota.

A container limited to 1.5 CPUs by a CFS quota still sees every core of the
host in its affinity mask and ``os.cpu_count()``; a thread pool sized from
those runs into the quota and is throttled for the rest of each period. The
quota is read from the process's own cgroup, as Linux exposes it:

- cgroup v2: ``cpu.max`` (``"max 100000"`` or ``"<quota> <period>"``) in the
  process's cgroup and every ancestor up to the mount root (the smallest
  limit along the path holds);
- cgroup v1: ``cpu.cfs_quota_us`` (``-1``: none) and ``cpu.cfs_period_us`` in
  the process's ``cpu`` hierarchy, likewise up to the mount root.

The cgroup of the process comes from ``/proc/self/cgroup``, the mount points
and their roots from ``/proc/self/mountinfo`` (inside a container the
cgroup path may be the host's, beneath a mount whose root is that path).
Elsewhere (macOS, Windows, a Linux without cgroups mounted) there is no quota.

Examples
--------
>>> from bertembed._core.cpus import cpu_budget
>>> budget = cpu_budget()
>>> budget.usable >= 1 and budget.ceiling >= 1
True
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

# (Paths are strings and os.path here, not pathlib: this module runs at
# import, and pathlib would add milliseconds to every worker's start.)


@dataclass(frozen=True)
class Quota:
    """A CFS bandwidth limit: `quota` microseconds of CPU time per `period`."""

    quota: int
    period: int
    source: str  # the file it was read from

    @property
    def cpus(self) -> float:
        """The limit in CPUs (1.5: one and a half cores' worth of time)."""
        return self.quota / self.period


@dataclass(frozen=True)
class CpuBudget:
    """What this process may use: ``ceiling`` threads, and why."""

    usable: int  # CPUs in the affinity mask (all CPUs where there is no mask)
    quota: Quota | None
    ceiling: int  # min(usable, ceil(quota)), at least 1
    source: str  # "affinity mask", "cpu count" or the quota's file


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask where the platform has one."""
    getaffinity = getattr(os, "sched_getaffinity", None)
    if getaffinity is not None:
        try:
            return max(1, len(getaffinity(0)))
        except OSError:
            pass
    count = getattr(os, "process_cpu_count", os.cpu_count)()
    return max(1, count or 1)


def _lines(path: str) -> list[str] | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().splitlines()
    except OSError:
        return None


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """``(fstype, root, mount point, super options)`` of every cgroup mount."""
    found: list[tuple[str, str, str, set[str]]] = []
    lines = _lines(mountinfo)
    if lines is None:
        return found
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, point = (_unescape(f) for f in fields[3:5])
        found.append((tail[0], root, point, set(tail[2].split(","))))
    return found


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _groups(cgroup: str) -> dict[str, str]:
    """``{controller: path}`` from ``/proc/self/cgroup`` ("" for the v2 hierarchy)."""
    groups: dict[str, str] = {}
    lines = _lines(cgroup)
    if lines is None:
        return groups
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for name in controllers.split(",") if controllers else [""]:
            groups[name] = path
    return groups


def _directories(point: str, root: str, path: str) -> list[str]:
    """The process's cgroup directory under a mount, then each parent up to the mount point."""
    rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    point = os.path.normpath(point)
    here = os.path.normpath(os.path.join(point, "" if rel == "." else rel))
    inside = point.rstrip("/") + "/"
    dirs = [here]
    while here != point and here.startswith(inside):
        here = os.path.dirname(here)
        dirs.append(here)
    return dirs


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_limit(directory: str) -> Quota | None:
    text = _read(os.path.join(directory, "cpu.max"))
    if text is None:
        return None
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return Quota(quota, period, os.path.join(directory, "cpu.max")) if quota > 0 and period > 0 else None


def _v1_limit(directory: str) -> Quota | None:
    quota_file = os.path.join(directory, "cpu.cfs_quota_us")
    quota_text, period_text = _read(quota_file), _read(os.path.join(directory, "cpu.cfs_period_us"))
    if quota_text is None or period_text is None:
        return None
    try:
        quota, period = int(quota_text), int(period_text)
    except ValueError:
        return None
    return Quota(quota, period, quota_file) if quota > 0 and period > 0 else None


def cpu_quota(proc: str | os.PathLike[str] = "/proc/self") -> Quota | None:
    """The tightest CFS quota on this process's cgroup or its ancestors, or None.

    `proc` is where ``cgroup`` and ``mountinfo`` are read (``/proc/self``; the
    tests point it at sample files).
    """
    proc = os.fspath(proc)
    groups = _groups(os.path.join(proc, "cgroup"))
    limits: list[Quota] = []
    for fstype, root, point, options in _mounts(os.path.join(proc, "mountinfo")):
        if fstype == "cgroup2" and "" in groups:
            read, path = _v2_limit, groups[""]
        elif fstype == "cgroup" and "cpu" in options and "cpu" in groups:
            read, path = _v1_limit, groups["cpu"]
        else:
            continue
        for directory in _directories(point, root, path):
            limit = read(directory)
            if limit is not None:
                limits.append(limit)
    return min(limits, key=lambda q: q.cpus) if limits else None


def cpu_budget(proc: str | os.PathLike[str] = "/proc/self") -> CpuBudget:
    """The most threads worth running here: the affinity mask, capped by the CPU quota.

    A quota of 1.5 CPUs allows 2 threads (``ceil``): two threads fit in it as
    long as they are not both busy all the time, and rounding down would
    leave half a CPU unused.
    """
    usable = usable_cpus()
    quota = cpu_quota(proc) if os.path.isdir(proc) else None
    ceiling, source = usable, "affinity mask" if hasattr(os, "sched_getaffinity") else "cpu count"
    if quota is not None and math.ceil(quota.cpus) < usable:
        ceiling, source = max(1, math.ceil(quota.cpus)), quota.source
    return CpuBudget(usable, quota, ceiling, source)
