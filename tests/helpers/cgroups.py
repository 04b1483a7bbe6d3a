"""A real cgroup v1 CPU group limited to one CPU, for the tests that check the quota is read.

Making one needs root and an unconfined, writable cgroup v1 ``cpu`` hierarchy;
where that is missing, or the machine has one CPU (a 1-CPU quota would change
nothing), the test skips and says why.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bertembed._core import cpus


def cgroup_v1_cpu() -> Path | None:
    """Where the root of the cgroup v1 ``cpu`` hierarchy is mounted, if it is."""
    for fstype, root, point, options in cpus._mounts("/proc/self/mountinfo"):
        if fstype == "cgroup" and "cpu" in options and root == "/":
            return Path(point)
    return None


@contextmanager
def one_cpu_group() -> Iterator[Path]:
    """A new cgroup with a quota of 1 CPU (100 ms per 100 ms period), removed afterwards.

    A process joins it by writing its pid (or ``0``, itself) to ``cgroup.procs``;
    the group can only be removed once its processes have ended.
    """
    point = cgroup_v1_cpu()
    if point is None or not os.access(point, os.W_OK):
        pytest.skip("needs a writable cgroup v1 cpu hierarchy (root, unconfined)")
    if cpus.usable_cpus() < 2:
        pytest.skip("one CPU: a 1-CPU quota changes nothing")
    group = point / f"bertembed-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("100000")
    except OSError as exc:
        if group.is_dir():
            group.rmdir()
        pytest.skip(f"cannot make a cgroup here: {exc}")
    try:
        yield group
    finally:
        group.rmdir()
