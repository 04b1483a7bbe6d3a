"""Smoke check of an installed bertembed, run before the test suite.

    python .ci/wheel_smoke.py            # any install (from source or a wheel)
    python .ci/wheel_smoke.py --wheel    # a repaired binary wheel
    python .ci/wheel_smoke.py --expect-serial   # built with BERTEMBED_OPENMP=0

Checks, printing each one:

- ``bertembed`` is imported from an installed location (site-packages), not
  from a source checkout;
- it was built with OpenMP (every supported platform has it: a serial build
  here means the OpenMP probe in setup.py failed silently), or, with
  ``--expect-serial``, that it was not;
- a call with ``num_threads=2`` runs a real parallel region and matches NumPy;
- on a free-threaded CPython, importing bertembed leaves the GIL disabled;
- with ``--wheel``: the OpenMP runtime is vendored inside the wheel and is the
  copy that is loaded (libgomp in ``bertembed.libs`` on Linux, libomp in
  ``bertembed/.dylibs`` on macOS, vcomp140 in ``bertembed.libs`` on Windows).

Exits non-zero on the first failed check.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path


def fail(message: str) -> None:
    print(f"FAIL: {message}")
    sys.exit(1)


def ok(message: str) -> None:
    print(f"ok: {message}")


def vendored_runtime(package_dir: Path) -> list[Path]:
    site = package_dir.parent
    if sys.platform.startswith("linux"):
        return sorted((site / "bertembed.libs").glob("libgomp*.so*"))
    if sys.platform == "darwin":
        return sorted((package_dir / ".dylibs").glob("libomp*.dylib"))
    if sys.platform == "win32":
        return sorted((site / "bertembed.libs").glob("vcomp140*.dll"))
    return []


def main(argv: list[str]) -> None:
    wheel = "--wheel" in argv
    expect_serial = "--expect-serial" in argv
    import numpy as np

    import bertembed

    package_dir = Path(bertembed.__file__).resolve().parent
    print(f"bertembed {bertembed.__version__} from {package_dir}")
    bertembed.show_config()

    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    platlib = Path(sysconfig.get_paths()["platlib"]).resolve()
    if package_dir.parent not in (purelib, platlib):
        fail(f"bertembed imported from {package_dir}, not from {platlib}")
    if (package_dir.parent.parent / "setup.py").exists():
        fail(f"bertembed imported from a source tree: {package_dir}")
    ok("imported from the environment's site-packages")

    if expect_serial:
        if bertembed.openmp_enabled() or bertembed.max_threads() != 1:
            fail("BERTEMBED_OPENMP=0 was set, but this build uses OpenMP")
        ok("serial build (BERTEMBED_OPENMP=0): no OpenMP, max_threads() = 1")
    elif not bertembed.openmp_enabled():
        fail("this build of bertembed has no OpenMP (serial kernel)")
    else:
        ok(f"built with OpenMP, max_threads() = {bertembed.max_threads()}")

    rng = np.random.default_rng(0)
    tok, pos, seg = (rng.standard_normal((n, 16)) for n in (1000, 64, 2))
    ids, sids = rng.integers(0, 1000, (8, 64)), rng.integers(0, 2, (8, 64))
    got = bertembed.bert_embeddings(ids, sids, tok, pos, seg, num_threads=2)
    want = tok[ids] + pos[np.arange(64)] + seg[sids]
    if not np.allclose(got, want, rtol=1e-12, atol=1e-12):
        fail("num_threads=2 result differs from NumPy")
    ok("call with num_threads=2 equals the NumPy expression")

    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        if sys._is_gil_enabled():
            fail("free-threaded CPython, but importing bertembed re-enabled the GIL")
        ok("free-threaded CPython: the GIL is still disabled after import")
    else:
        ok("CPython with a GIL (free-threading check not applicable)")

    if wheel:
        libs = vendored_runtime(package_dir)
        if not libs:
            fail(f"no vendored OpenMP runtime found next to {package_dir}")
        ok(f"vendored OpenMP runtime: {', '.join(p.name for p in libs)}")
        maps = Path("/proc/self/maps")
        if maps.exists():
            loaded = {line.split()[-1] for line in maps.read_text().splitlines() if "libgomp" in line}
            vendored = {str(p.resolve()) for p in libs}
            if not loaded or not loaded <= vendored:
                fail(f"loaded libgomp {sorted(loaded)} is not the vendored {sorted(vendored)}")
            ok("the loaded libgomp is the vendored copy")
    print("wheel smoke check passed" if wheel else "smoke check passed")


if __name__ == "__main__":
    main(sys.argv[1:])
