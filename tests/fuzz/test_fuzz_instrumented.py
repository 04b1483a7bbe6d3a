"""The fuzz targets import bertembed inside atheris's instrumenting block (else libFuzzer fuzzes blind).

Run as programs (``tests/`` on their ``PYTHONPATH``, as every caller runs them) with a
stand-in ``atheris`` module that records what was already imported when its
``instrument_imports`` block began and what the block imported; its
``Setup``/``Fuzz`` do nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.fuzzing import gcc_asan_preloaded
from helpers.paths import env_with_helpers

HERE = Path(__file__).resolve().parent

_FAKE = """
import contextlib, json, runpy, sys, types
seen = {}
@contextlib.contextmanager
def instrument_imports(include=()):
    seen["before"] = sorted(m for m in sys.modules if m.split(".")[0] == "bertembed")
    yield
    seen["inside"] = sorted(m for m in sys.modules if m.split(".")[0] == "bertembed" and m not in seen["before"])
fake = types.ModuleType("atheris")
fake.instrument_imports = instrument_imports
fake.Setup = lambda *a, **k: None
fake.Fuzz = lambda: print("SEEN" + json.dumps(seen))
sys.modules["atheris"] = fake
sys.argv = [sys.argv[1], *sys.argv[2:]]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.skipif(
    gcc_asan_preloaded(), reason="under GCC's ASan runtime the targets fuzz with hypothesis, not atheris"
)
@pytest.mark.parametrize(
    "script, args",
    [("fuzz_checkpoints.py", ["zip"]), ("fuzz_checkpoints.py", ["config"]), ("fuzz_embed.py", [])],
    ids=["checkpoints-zip", "checkpoints-config", "embed"],
)
def test_bertembed_is_first_imported_inside_the_instrumenting_block(tmp_path, script, args):
    proc = subprocess.run(
        [sys.executable, "-c", _FAKE, str(HERE / script), *args, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env_with_helpers(),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.split("SEEN", 1)[1].splitlines()[0])
    assert seen["before"] == []
    assert "bertembed._checkpoints.readers.torch_zip" in seen["inside"] or script == "fuzz_embed.py"
    assert "bertembed._layer" in seen["inside"]


def test_a_helper_that_imported_bertembed_first_is_refused():
    import types

    from helpers.fuzzing import instrumented_bertembed

    import bertembed  # noqa: F401  (this process has it)

    with pytest.raises(RuntimeError, match="bertembed was imported before atheris could instrument it"):
        with instrumented_bertembed(types.SimpleNamespace()):
            pass
