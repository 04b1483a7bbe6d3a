"""The server off Linux: ``compare.py --help`` as Windows' Python sees it, ``bertembed serve`` without affinity masks.

The benchmark's ``compare.py`` runs under the Windows-like rules of
``.ci/winlike`` (the POSIX-only attributes of ``os`` and ``signal`` hidden
from its code); ``bertembed serve`` under a Python whose ``os`` has no
``sched_getaffinity`` (as on macOS).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT

SERVICE = ROOT / "benchmarks" / "service"
WINLIKE = ROOT / ".ci" / "winlike"

pytestmark = pytest.mark.skipif(
    not (SERVICE / "compare.py").is_file() or not WINLIKE.is_dir(), reason="benchmarks/ or .ci/ not in this checkout"
)


def _winlike_env(*roots: Path) -> dict[str, str]:
    """The Windows-like rules, for the code under `roots` too (BERTEMBED_WINLIKE_ROOTS)."""
    paths = [str(WINLIKE), os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "BERTEMBED_WINLIKE": "1",
        "BERTEMBED_WINLIKE_ROOTS": os.pathsep.join(map(str, roots)),
        "PYTHONPATH": os.pathsep.join(p for p in paths if p),
    }


def test_compare_help_without_posix_attributes(tmp_path: Path) -> None:
    pytest.importorskip("httpx")
    env = _winlike_env(SERVICE, tmp_path)
    # The rules are in force for code under the given roots: os.sched_getaffinity and os.killpg are gone.
    probe = tmp_path / "probe.py"
    probe.write_text("import os\nprint(hasattr(os, 'sched_getaffinity'), hasattr(os, 'killpg'))\n", encoding="utf-8")
    seen = subprocess.run([sys.executable, str(probe)], env=env, capture_output=True, text=True, timeout=60)
    assert seen.stdout.split() == ["False", "False"], seen.stderr[-3000:]
    res = subprocess.run(
        [sys.executable, str(SERVICE / "compare.py"), "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=SERVICE,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "--workers" in res.stdout and "usable CPUs" in res.stdout


def test_serve_without_affinity_masks_says_what_is_missing(tmp_path: Path) -> None:
    """With no service.json, bertembed serve says what is missing (exit 1) before starting anything."""
    pytest.importorskip("gunicorn", reason='bertembed serve needs gunicorn: pip install "bertembed[serve]"')
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\ndel os.sched_getaffinity\n", encoding="utf-8")
    empty = tmp_path / "export"
    empty.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site)}
    check = subprocess.run(
        [sys.executable, "-c", "import os; print(hasattr(os, 'sched_getaffinity'))"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.stdout.strip() == "False", check.stderr
    res = subprocess.run(
        [sys.executable, "-m", "bertembed", "serve", str(empty), "--port", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1, res.stderr
    assert re.search(r"^bertembed: error: .*service\.json: no such file; build the artifact with", res.stderr), (
        res.stderr
    )


#: Run in benchmarks/service/, where compare.py imports loadtest.py by name as when it runs.
_STOP_WITHOUT_KILLPG = """
import os, subprocess, sys
import compare
del os.killpg
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
try:
    compare.stop(child)
    assert child.returncode is not None
finally:
    if child.poll() is None:
        child.kill()
        child.wait()
"""


def test_stop_without_process_groups() -> None:
    """Where os has no killpg (Windows), stop() terminates the child itself."""
    pytest.importorskip("httpx")
    res = subprocess.run(
        [sys.executable, "-c", _STOP_WITHOUT_KILLPG], capture_output=True, text=True, timeout=120, cwd=SERVICE
    )
    assert res.returncode == 0, res.stderr[-3000:]
