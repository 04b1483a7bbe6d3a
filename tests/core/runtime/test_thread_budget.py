"""The thread budget: the ceiling (affinity mask, CPU quota), the process-wide
setting, the layer's default, and what a forked child inherits or re-reads."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers.cgroups import one_cpu_group
from helpers.reference import reference

import bertembed
from bertembed._core import cpus

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
needs_openmp = pytest.mark.skipif(not bertembed.openmp_enabled(), reason="built without OpenMP")


@pytest.fixture(autouse=True)
def _automatic():
    yield
    bertembed.set_num_threads(None)


def _run(code: str, *, prefix: str = "") -> str:
    proc = subprocess.run(
        [sys.executable, "-c", prefix + textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# A child counts its OS threads after a call big enough for every thread it may use.
_CALL = """
import os, numpy as np, bertembed
rng = np.random.default_rng(0)
layer = bertembed.BertEmbeddings(rng.standard_normal((1000, 256), dtype=np.float32),
                                 rng.standard_normal((512, 256), dtype=np.float32))
ids = rng.integers(0, 1000, (64, 512))
def tasks(**kw):
    for _ in range(3):
        layer(ids, **kw)
    return len(os.listdir("/proc/self/task"))
"""


def test_set_and_get_num_threads():
    assert bertembed.get_num_threads() is None
    bertembed.set_num_threads(2)
    assert bertembed.get_num_threads() == 2
    bertembed.set_num_threads(0)
    assert bertembed.get_num_threads() is None
    bertembed.set_num_threads(np.int64(1))
    assert bertembed.get_num_threads() == 1


@pytest.mark.parametrize(("value", "error"), [(-1, ValueError), ("2", TypeError), (True, TypeError), (1.5, TypeError)])
def test_bad_settings_are_refused(value, error):
    with pytest.raises(error, match="num_threads must be a positive int or None"):
        bertembed.set_num_threads(value)
    with pytest.raises(error, match="num_threads must be a positive int or None"):
        bertembed.BertEmbeddings(np.eye(4), np.zeros((4, 4)), num_threads=value)


def test_every_rule_gives_the_same_rows():
    rng = np.random.default_rng(1)
    tok, pos = rng.standard_normal((50, 16)), rng.standard_normal((32, 16))
    ids = rng.integers(0, 50, (8, 32))
    want = reference(ids, None, tok, pos, None)
    for layer_threads in (None, 1, 64):
        layer = bertembed.BertEmbeddings(tok, pos, num_threads=layer_threads)
        for setting in (None, 1, 3):
            bertembed.set_num_threads(setting)
            for call in (None, 1, 64):
                np.testing.assert_allclose(layer(ids, num_threads=call), want, rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(layer(ids, out=np.empty_like(want), num_threads=call), want, rtol=1e-12)


def test_max_threads_is_within_the_budget():
    assert 1 <= bertembed.max_threads() <= cpus.cpu_budget().ceiling


@needs_openmp
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity masks here")
def test_explicit_counts_are_clipped_to_the_affinity_mask():
    """On one CPU, num_threads=8 (call, layer or process) starts no OpenMP worker."""
    one = sorted(os.sched_getaffinity(0))[:1]
    out = _run(
        _CALL
        + textwrap.dedent(
            """
        before = tasks(num_threads=1)
        print(bertembed.max_threads(), before, tasks(num_threads=8))
        bertembed.set_num_threads(8)
        print(tasks())
        bertembed.set_num_threads(None)
        layer = bertembed.BertEmbeddings(layer._tables.tok.data, layer._tables.pos.data, num_threads=8)
        print(tasks())
        """
        ),
        prefix=f"import os; os.sched_setaffinity(0, {set(one)})\n",
    )
    first, *rest = out.split("\n")
    top, before, clipped = map(int, first.split())
    assert top == 1
    assert clipped == before
    assert [int(x) for x in rest if x] == [before, before]


@needs_fork
@needs_openmp
@pytest.mark.skipif(cpus.cpu_budget().ceiling < 2, reason="one CPU: a setting of 1 changes nothing")
def test_the_setting_holds_in_a_forked_child_and_can_be_made_there():
    """Set before the fork: the child inherits it; set in the child (a post_fork hook): it holds there."""
    out = _run(
        _CALL
        + textwrap.dedent(
            """
        import sys
        bertembed.set_num_threads(1)
        tasks()
        for in_child in (None, 1):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                if in_child is not None:
                    bertembed.set_num_threads(None)
                    before = tasks()
                    bertembed.set_num_threads(in_child)
                os.write(w, f"{bertembed.get_num_threads()} {tasks()} {tasks(num_threads=2)}\\n".encode())
                os._exit(0)
            os.waitpid(pid, 0)
            sys.stdout.write(os.read(r, 100).decode())
        """
        )
    )
    inherited, made = (line.split() for line in out.splitlines())
    # setting 1: one thread in the child (its pool released at the fork); an explicit 2 adds a worker
    assert inherited[:2] == ["1", "1"] and int(inherited[2]) == 2
    assert made[0] == "1" and int(made[1]) <= 2


@needs_fork
def test_a_real_quota_reaches_max_threads_and_show_config_in_a_forked_child():
    """Imported outside the quota (ceiling: all CPUs), then moved into a 1-CPU group and forked:
    the child re-reads the budget."""
    with one_cpu_group() as group:
        out = _run(
            f"""
            import os, sys, bertembed
            from bertembed._core import runtime
            outside = bertembed.max_threads()
            open({str(group / "cgroup.procs")!r}, "w").write("0")
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                cfg = runtime.config()
                os.write(w, f"{{bertembed.max_threads()}}|{{cfg['thread_ceiling']}}|{{cfg['cpu_quota']}}".encode())
                os._exit(0)
            os.waitpid(pid, 0)
            print(outside, os.read(r, 1000).decode(), sep="|")
            """
        )
        outside, inside, ceiling, quota = out.strip().split("|")
        assert int(outside) >= 2
        assert int(inside) == 1
        assert ceiling == f"1 ({group / 'cpu.cfs_quota_us'})"
        assert quota.startswith("1 CPUs (100000/100000 us")
