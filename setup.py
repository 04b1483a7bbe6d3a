"""Build the bertembed extension: one Cython module, OpenMP when available.

Environment switches (all optional):

- ``BERTEMBED_OPENMP=0``: build the serial kernel even if OpenMP works.
- ``BERTEMBED_SANITIZE=1``: build with AddressSanitizer and
  UndefinedBehaviorSanitizer (gcc/clang only; for the test suite).
"""

import glob
import os
import sys
import tempfile

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

PROBE = "#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n"


def _openmp_flags(compiler) -> tuple[list[str], list[str]]:
    """Compile and link flags for OpenMP with this compiler, by trying them."""
    if compiler.compiler_type == "msvc":
        return ["/openmp"], []
    if sys.platform == "darwin":
        # Apple clang has no -fopenmp driver flag: it needs libomp (Homebrew
        # or a pinned build) found through CPPFLAGS/LDFLAGS.
        candidates = [(["-Xpreprocessor", "-fopenmp"], ["-lomp"]), (["-fopenmp"], ["-fopenmp"])]
    else:
        candidates = [(["-fopenmp"], ["-fopenmp"])]
    for cflags, lflags in candidates:
        if _compiles(compiler, cflags, lflags):
            return cflags, lflags
    return [], []


def _compiles(compiler, cflags: list[str], lflags: list[str]) -> bool:
    # The probe links like the extension will: with the user's CPPFLAGS and
    # LDFLAGS (e.g. -I/-L of a Homebrew or pinned libomp on macOS).
    cflags = [*os.environ.get("CPPFLAGS", "").split(), *cflags]
    lflags = [*os.environ.get("LDFLAGS", "").split(), *lflags]
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as f:
            f.write(PROBE)
        try:
            objs = compiler.compile([src], output_dir=tmp, extra_postargs=cflags)
            compiler.link_executable(objs, os.path.join(tmp, "probe"), extra_postargs=lflags)
        except Exception:
            return False
    return True


class BuildExt(build_ext):
    def build_extensions(self) -> None:
        msvc = self.compiler.compiler_type == "msvc"
        cflags, lflags = [], []
        if os.environ.get("BERTEMBED_OPENMP", "1") != "0":
            cflags, lflags = _openmp_flags(self.compiler)
        if not cflags:
            print("bertembed: building WITHOUT OpenMP (serial kernel)")
        opt = ["/O2"] if msvc else ["-O3"]
        if os.environ.get("BERTEMBED_SANITIZE") == "1" and not msvc:
            san = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer", "-g"]
            opt = ["-O1", *san]
            lflags = [*lflags, "-fsanitize=address,undefined"]
        for ext in self.extensions:
            ext.extra_compile_args = [*opt, *cflags]
            ext.extra_link_args = list(lflags)
        super().build_extensions()


ext = Extension(
    "bertembed._core._kernel",
    ["src/bertembed/_core/_kernel.pyx"],
    include_dirs=["src/bertembed/_core/csrc", numpy.get_include()],
    # NumPy's C API (array data pointers without building memoryviews), the
    # 1.23 API level: the wheels run with NumPy 1.23 and newer.
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_23_API_VERSION"), ("NPY_TARGET_VERSION", "NPY_1_23_API_VERSION")],
    # Every header: editing any of them rebuilds the extension.
    depends=sorted(glob.glob("src/bertembed/_core/csrc/*.h")),
)

setup(
    ext_modules=cythonize([ext], compiler_directives={"language_level": 3}),
    cmdclass={"build_ext": BuildExt},
)
