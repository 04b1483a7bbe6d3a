"""The wait policy (idle workers sleep), the BERTEMBED_* knobs and the result cache."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bertembed
from bertembed._core import cpus, knobs, pool, runtime


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **env}
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "BERTEMBED_WAIT_POLICY"):
        if name not in env:
            full.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300, env=full
    )
    assert proc.returncode == 0, proc.stderr
    return proc


_IDLE = """
import os, time, resource, numpy as np, bertembed
rng = np.random.default_rng(0)
layer = bertembed.BertEmbeddings(rng.standard_normal((1000, 768), dtype=np.float32),
                                 rng.standard_normal((128, 768), dtype=np.float32))
ids = rng.integers(0, 1000, (8, 128))
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
idle = []
for _ in range(3):
    for _ in range(10):
        layer(ids, num_threads=2)
    c0 = cpu()
    time.sleep(1.0)
    idle.append(cpu() - c0)
print(min(idle), os.environ.get("OMP_WAIT_POLICY"))
"""


@pytest.mark.skipif(runtime.openmp_runtime() != "libgomp", reason="the wait policy is set for libgomp")
@pytest.mark.skipif(cpus.cpu_budget().ceiling < 2, reason="one CPU: no worker thread to idle")
def test_idle_workers_do_not_spin_after_a_call():
    """Over a second's sleep after 2-thread calls the process uses under 2% of a core
    (the least of three seconds, against the machine's noise); the environment is restored."""
    idle, env = _run(_IDLE).stdout.split()
    assert float(idle) < 0.02
    assert env == "None"


def test_the_user_wait_policy_is_kept():
    out = _run("import os, bertembed; print(os.environ['OMP_WAIT_POLICY'])", OMP_WAIT_POLICY="active").stdout
    assert out.strip() == "active"


@pytest.mark.parametrize(
    ("name", "value", "accepted"),
    [
        ("BERTEMBED_ISA", "AVX2", "baseline, avx2, avx512, neon"),
        ("BERTEMBED_ISA", "off", "baseline, avx2, avx512, neon"),
        ("BERTEMBED_RESULT_CACHE_MB", "abc", "a non-negative integer"),
        ("BERTEMBED_WAIT_POLICY", "spin", "passive, active"),
    ],
)
def test_a_bad_knob_is_a_warning_naming_it(name, value, accepted):
    proc = _run("import bertembed", **{name: value})
    assert f"{name}={value!r} is not accepted ({accepted})" in proc.stderr
    assert proc.stderr.count("is not accepted") == 1


def test_every_knob_is_declared_once():
    assert len({k.name for k in knobs.KNOBS}) == len(knobs.KNOBS)
    assert all(k.name.startswith("BERTEMBED_") for k in knobs.KNOBS)


def test_show_config_shows_the_budget_policy_cache_and_isa():
    cfg = runtime.config()
    for key in ("usable_cpus", "cpu_quota", "thread_ceiling", "wait_policy", "result_cache", "row_kernel_isa"):
        assert key in cfg
    assert cfg["result_cache"].startswith(f"{pool.pool.cap >> 20} MiB, holding ")


def test_the_result_cache_is_bounded_and_settable():
    old = pool.pool.cap
    try:
        assert _run("from bertembed._core import pool; print(pool.pool.cap >> 20)").stdout.strip() == "64"
        rng = np.random.default_rng(0)
        layer = bertembed.BertEmbeddings(rng.standard_normal((100, 256)), rng.standard_normal((512, 256)))
        bertembed.set_result_cache(4)
        for b in (1, 2, 3, 4, 5, 6):
            layer(rng.integers(0, 100, (b, 512)))  # 1-6 MiB float64 results, each freed at once
        assert pool.pool.free_bytes <= 4 << 20
        bertembed.set_result_cache(0)
        assert pool.pool.free_bytes == 0
        with pytest.raises(ValueError, match="non-negative int of MiB"):
            bertembed.set_result_cache(-1)
        with pytest.raises(TypeError, match="non-negative int of MiB"):
            bertembed.set_result_cache("64")
    finally:
        pool.pool.resize(old)
