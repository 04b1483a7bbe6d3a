"""The CPU budget: affinity mask and CFS quota (cgroup v1 and v2), from sample files and a real cgroup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cgroups import one_cpu_group

from bertembed._core import cpus


def _proc(tmp_path: Path, cgroup: str, mounts: list[str]) -> Path:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text(cgroup)
    (proc / "mountinfo").write_text("".join(f"{i} 1 0:{i} {m}\n" for i, m in enumerate(mounts, 30)))
    return proc


def _write(directory: Path, **files: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name.replace("_", ".", 1)).write_text(text + "\n")


def test_v2_quota_of_the_process_cgroup(tmp_path):
    root = tmp_path / "cg2"
    _write(root / "app" / "worker", cpu_max="150000 100000")
    proc = _proc(tmp_path, "0::/app/worker\n", [f"/ {root} rw,nosuid - cgroup2 cgroup2 rw"])
    quota = cpus.cpu_quota(proc)
    assert quota is not None
    assert (quota.quota, quota.period, quota.cpus) == (150000, 100000, 1.5)
    assert quota.source == str(root / "app" / "worker" / "cpu.max")


def test_v2_the_tightest_ancestor_holds_and_max_is_no_limit(tmp_path):
    root = tmp_path / "cg2"
    _write(root / "app", cpu_max="50000 100000")
    _write(root / "app" / "worker", cpu_max="max 100000")
    proc = _proc(tmp_path, "0::/app/worker\n", [f"/ {root} rw - cgroup2 cgroup2 rw"])
    quota = cpus.cpu_quota(proc)
    assert quota is not None and quota.cpus == 0.5 and quota.source.endswith("app/cpu.max")
    _write(root / "app", cpu_max="max 100000")
    assert cpus.cpu_quota(proc) is None


def test_v1_quota_and_the_unlimited_minus_one(tmp_path):
    cpu = tmp_path / "cpu,cpuacct"
    _write(cpu / "docker" / "abc", cpu_cfs_quota_us="100000", cpu_cfs_period_us="100000")
    mounts = [
        f"/ {tmp_path / 'memory'} rw - cgroup cgroup rw,memory",
        f"/ {cpu} rw - cgroup cgroup rw,cpu,cpuacct",
    ]
    proc = _proc(tmp_path, "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n", mounts)
    quota = cpus.cpu_quota(proc)
    assert quota is not None and quota.cpus == 1.0
    assert quota.source == str(cpu / "docker" / "abc" / "cpu.cfs_quota_us")
    _write(cpu / "docker" / "abc", cpu_cfs_quota_us="-1")
    assert cpus.cpu_quota(proc) is None


def test_v1_inside_a_container_whose_mount_root_is_its_cgroup(tmp_path):
    """The container sees the host's cgroup path, mounted as its /sys/fs/cgroup/cpu root."""
    cpu = tmp_path / "cpu"
    _write(cpu, cpu_cfs_quota_us="250000", cpu_cfs_period_us="100000")
    proc = _proc(tmp_path, "3:cpu:/kubepods/pod1/c1\n", [f"/kubepods/pod1/c1 {cpu} ro - cgroup cgroup rw,cpu"])
    quota = cpus.cpu_quota(proc)
    assert quota is not None and quota.cpus == 2.5


@pytest.mark.parametrize("text", ["", "garbage", "100000", "abc 100000", "0 100000", "100000 0"])
def test_malformed_or_zero_limits_are_no_limit(tmp_path, text):
    root = tmp_path / "cg2"
    _write(root, cpu_max=text)
    proc = _proc(tmp_path, "0::/\n", [f"/ {root} rw - cgroup2 cgroup2 rw"])
    assert cpus.cpu_quota(proc) is None


def test_no_cgroup_files_no_quota(tmp_path):
    assert cpus.cpu_quota(tmp_path / "absent") is None
    proc = _proc(tmp_path, "0::/\n", ["/ /sys rw - sysfs sysfs rw"])
    assert cpus.cpu_quota(proc) is None


def test_budget_is_the_affinity_capped_by_the_quota(tmp_path, monkeypatch):
    root = tmp_path / "cg2"
    _write(root, cpu_max="150000 100000")
    proc = _proc(tmp_path, "0::/\n", [f"/ {root} rw - cgroup2 cgroup2 rw"])
    monkeypatch.setattr(cpus, "usable_cpus", lambda: 8)
    budget = cpus.cpu_budget(proc)
    assert (budget.usable, budget.ceiling, budget.source) == (8, 2, str(root / "cpu.max"))
    monkeypatch.setattr(cpus, "usable_cpus", lambda: 1)
    budget = cpus.cpu_budget(proc)
    assert (budget.usable, budget.ceiling) == (1, 1) and budget.quota is not None
    assert budget.source in ("affinity mask", "cpu count")


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no affinity masks here")
def test_usable_cpus_follows_the_affinity_mask():
    mask = os.sched_getaffinity(0)
    if len(mask) < 2:
        pytest.skip("one CPU: no smaller mask to try")
    code = "from bertembed._core.cpus import usable_cpus; print(usable_cpus())"
    one = sorted(mask)[:1]
    proc = subprocess.run(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {one}); {code}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(proc.stdout) == 1


def test_a_real_cgroup_quota_sets_the_ceiling():
    """A child process in a cgroup limited to 1 CPU (cgroup v1, as root) sees a ceiling of 1."""
    with one_cpu_group() as group:
        code = (
            f"open({str(group / 'cgroup.procs')!r}, 'w').write('0');"
            "from bertembed._core.cpus import cpu_budget; b = cpu_budget(); print(b.ceiling, b.source)"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        ceiling, source = proc.stdout.split()
        assert int(ceiling) == 1
        assert source == str(group / "cpu.cfs_quota_us")
