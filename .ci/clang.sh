#!/usr/bin/env bash
# Build bertembed with clang and LLVM's OpenMP runtime (libomp) on x86-64
# Linux, for several clang/libomp versions, and test each build:
#
#   1. no compiler warning from our own sources (src/bertembed/: the C headers
#      and the C that Cython makes of _kernel.pyx), under clang and under GCC;
#   2. the extension links libomp (not libgomp) and reports it at run time;
#   3. the whole test suite (the fork and thread tests included; the heavy
#      comparisons with torch/onnxruntime are not: their peers are not
#      installed here);
#   4. the instruction-set tests once per BERTEMBED_ISA=baseline|avx2|avx512
#      (the ones the CPU runs), and the results of every instruction set bit
#      for bit equal to a GCC build's (.ci/isa_digest.py).
#
#   bash .ci/clang.sh                     # clang 14 and 19 (Debian bookworm)
#   CLANG_VERSIONS="16" bash .ci/clang.sh
#
# Environment: CLANG_VERSIONS (default "14 19"), PYTHON (default python3),
# BERTEMBED_CI_CACHE (default /var/cache/bertembed-ci: the venvs and the
# unpacked libomp packages, kept between runs; removing it starts afresh),
# PYTEST_ARGS (extra pytest arguments for the suite).
#
# Needs Debian's (or Ubuntu's) apt and root (or sudo) to install clang-NN.
# The libomp-NN packages conflict with each other (one libomp-dev per
# system), so they are not installed: apt-get download fetches them and they
# are unpacked into the cache, and each build points at its own copy
# (CPATH, LIBRARY_PATH and an rpath). The checkout is never modified: the
# sources are copied, built and installed into each version's own venv, and
# the tests run from a copy that imports the installed package.
set -euo pipefail

CHECKOUT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VERSIONS="${CLANG_VERSIONS:-14 19}"
CACHE="${BERTEMBED_CI_CACHE:-/var/cache/bertembed-ci}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 HF_HUB_OFFLINE=1
unset PYTHONPATH
WORK="$(mktemp -d "${TMPDIR:-/tmp}/bertembed-clang.XXXXXX")"
trap 'rc=$?; if [[ $rc -eq 0 ]]; then rm -rf "$WORK"; else echo "clang: kept $WORK" >&2; fi' EXIT
mkdir -p "$CACHE"

if [[ "$(uname -m)" != x86_64 ]]; then
    echo "clang: x86-64 only (this is $(uname -m))" >&2
    exit 2
fi
SUDO=""
# As root, apt-get download hands the download to its _apt user, which may
# not write to the cache directory.
SANDBOX=(-o APT::Sandbox::User=root)
[[ "$(id -u)" -eq 0 ]] || { SUDO="sudo"; SANDBOX=(); }

# The sources (no build products) and the tests, copied once.
. "$CHECKOUT/.ci/lib.sh"
ci_copy_package "$CHECKOUT" "$WORK/pkg"
ci_copy_tests "$CHECKOUT" "$WORK/run"

# A venv of its own under the cache, with the test and build requirements.
make_venv() {  # DIR
    ci_venv "$PYTHON" "$1"
    "$1/bin/python" -m pip install -q "${CI_OPTIONAL[@]}"
}

# Build and install into venv DIR with the current CC etc.; fails on a warning
# located in our sources, and prints how many warnings the build had.
build() {  # DIR LABEL
    local log="$WORK/build-$2.log" ours
    (cd "$WORK/pkg" && rm -rf build && "$1/bin/python" -m pip install -v --no-build-isolation \
        --no-deps --no-cache-dir --force-reinstall .) > "$log" 2>&1 || {
        tail -60 "$log"
        echo "clang: the $2 build failed" >&2
        exit 1
    }
    ours="$(grep -E 'src/bertembed/[^: ]*:[0-9]+:[0-9]+: warning:' "$log" || true)"
    # (file:line:col: warning: is the compilers' format; setuptools' own
    # "warning: no files found matching ..." lines are not counted)
    echo "   $2: $(grep -cE ':[0-9]+:[0-9]+: warning:' "$log" || true) compiler warnings in the build," \
        "$(grep -c . <<<"$ours" || true) in our sources"
    if [[ -n "$ours" ]]; then
        grep -E -A3 'src/bertembed/[^: ]*:[0-9]+:[0-9]+: warning:' "$log" | head -60
        echo "clang: the $2 build warns about our sources (above)" >&2
        exit 1
    fi
}

UPDATED=0
apt_update() {  # once per run, and only when something is to be installed
    if [[ $UPDATED -eq 0 ]]; then
        $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
        UPDATED=1
    fi
}

run_in() {  # DIR ARGS... : run in the test copy with venv DIR's python
    local py="$1/bin/python"
    shift
    (cd "$WORK/run" && "$py" "$@")
}

# The ISA-dependent tests (row kernels, dtype conversions, LayerNorm).
ISA_TESTS=(tests/core/kernel/test_kernel_paths.py tests/core/tables/test_table_dtypes.py
    tests/core/contract/test_layernorm.py tests/core/contract/test_reference.py)

# The GCC reference build, for the warning count and the bit-for-bit comparison.
echo "== clang: GCC reference build"
make_venv "$CACHE/gcc/venv"
CC=gcc LDSHARED="gcc -shared" build "$CACHE/gcc/venv" "gcc"
run_in "$CACHE/gcc/venv" .ci/isa_digest.py write "$WORK/digest-gcc.json"

for v in $VERSIONS; do
    echo "== clang $v + libomp $v"
    dir="$CACHE/clang-$v"
    if ! command -v "clang-$v" >/dev/null || [[ ! -e "$dir/libomp/.done" ]]; then
        apt_update
    fi
    if ! command -v "clang-$v" >/dev/null; then
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
            --no-install-recommends "clang-$v" >/dev/null
    fi
    if [[ ! -e "$dir/libomp/.done" ]]; then
        rm -rf "$dir/debs" "$dir/libomp"
        mkdir -p "$dir/debs" "$dir/libomp"
        (cd "$dir/debs" && apt-get "${SANDBOX[@]}" download -qq "libomp5-$v" "libomp-$v-dev")
        for deb in "$dir"/debs/*.deb; do
            dpkg-deb -x "$deb" "$dir/libomp"
        done
        touch "$dir/libomp/.done"
    fi
    libdir="$dir/libomp/usr/lib/llvm-$v/lib"
    omp_h="$(find "$dir/libomp" -name omp.h -path "*llvm-$v*" | head -1)"
    [[ -e "$libdir/libomp.so" && -n "$omp_h" ]] || { echo "clang: libomp $v not unpacked" >&2; exit 1; }
    make_venv "$dir/venv"
    CC="clang-$v" LDSHARED="clang-$v -shared" CPATH="$(dirname "$omp_h")" LIBRARY_PATH="$libdir" \
        LDFLAGS="-Wl,-rpath,$libdir" build "$dir/venv" "clang-$v"

    where="$(run_in "$dir/venv" -c 'import bertembed; print(bertembed.__file__)')"
    case "$where" in
        "$dir/venv/"*) ;;
        *) echo "clang: imported bertembed from $where, not the venv" >&2; exit 1 ;;
    esac
    so="$(ls "$(dirname "$where")"/_core/_kernel*.so)"
    links="$(ldd "$so")"
    if ! grep -q "libomp.so.5 => $libdir" <<<"$links" || grep -q libgomp <<<"$links"; then
        echo "$links"
        echo "clang: the clang-$v build does not link libomp $v" >&2
        exit 1
    fi
    run_in "$dir/venv" -c 'import bertembed
from bertembed._core import _kernel
from bertembed._core.runtime import openmp_runtime
info = _kernel.build_info()
print("   ", info["compiler"], "| OpenMP", info["openmp_version"], "|", openmp_runtime(), "| isa", info["isa"])
assert info["compiler"].startswith("clang") and openmp_runtime() == "libomp"'

    echo "-- clang $v: the test suite"
    # shellcheck disable=SC2086
    run_in "$dir/venv" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-}

    for isa in baseline avx2 avx512; do
        echo "-- clang $v: BERTEMBED_ISA=$isa"
        BERTEMBED_ISA="$isa" run_in "$dir/venv" -m pytest -q -p no:cacheprovider "${ISA_TESTS[@]}"
    done
    run_in "$dir/venv" .ci/isa_digest.py write "$WORK/digest-clang-$v.json"
    run_in "$dir/venv" .ci/isa_digest.py compare "$WORK/digest-gcc.json" "$WORK/digest-clang-$v.json"
done
echo "== clang: all passed ($VERSIONS)"
