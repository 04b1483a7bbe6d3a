#!/usr/bin/env bash
# The Windows (MSVC) and macOS builds, as far as Linux can show them:
#
#   W1. the C that Cython makes of _kernel.pyx, compiled syntax-only the way
#       MSVC sees it: clang with --target=x86_64-pc-windows-msvc and
#       -fms-compatibility, MSVC's predefined macros (_MSC_VER, _WIN32, _WIN64,
#       _M_X64) and neither __GNUC__ nor __clang__, OpenMP 2.0 (_OPENMP 200203,
#       .ci/msvc/omp.h); against CPython's Windows configuration (PC/pyconfig.h
#       and Include/ of Debian's python3.11 source package), NumPy's headers
#       from its win_amd64 wheel, and a Windows C runtime's headers (Wine's
#       msvcrt, from Debian's libwine-dev, with the few MSVC declarations it
#       lacks in .ci/msvc/crt/). The warnings asked for are clang's
#       counterparts of what MSVC's default /W3 reports (C4244/C4267: 64-bit
#       to 32-bit integers, floating-point narrowing; C4018: signed/unsigned
#       comparison; C4013: undeclared functions). Fails on any error, and on
#       any warning located in bertembed's headers or in the code Cython made
#       from _kernel.pyx (warnings in Cython's own support code are counted,
#       not failed);
#   W2. the OpenMP pragmas of that C and of the headers are OpenMP 2.0
#       (.ci/msvc/omp2_audit.py: clang itself parses OpenMP 5);
#   W3. bertembed's headers alone (.ci/csrc-all.c) with -Wall -Wextra and the
#       same conversion warnings: in MSVC's shape, and in clang-cl's (the same
#       target with __clang__ kept: the GCC/clang code paths on Windows);
#   M1. the same headers for macOS, arm64-apple-macos11 and
#       x86_64-apple-macos10.13, with -fopenmp against libomp's omp.h (Debian's
#       libomp-19-dev) and the C library declared as macOS declares it
#       (.ci/macos/libc/: there is no Apple SDK here);
#   R.  the MSVC-shaped kernel run: a GCC build with BE_MSVC_SHAPE=1 (what MSVC
#       compiles: no vector extensions, no AVX-512 body, _mm_prefetch) and
#       -ffp-contract=off (MSVC never fuses a * b + c), its results bit for bit
#       equal to a plain GCC build's for each instruction set it has
#       (.ci/isa_digest.py), the CPU-choice rules (.ci/msvc/cpu_choice.c: XCR0,
#       macOS's AVX-512 sysctls) and the kernel-path tests.
#
#   bash .ci/msvc-shaped.sh
#
# Environment: BERTEMBED_CI_CACHE (default /var/cache/bertembed-ci; the
# downloads and venvs live in its msvc-shaped/ folder), MSVC_SHAPED_REFERENCE
# (the python of a plain GCC build to compare with; default: one built in the
# cache), PYTHON (default python3). Needs Debian's (or Ubuntu's) apt and root
# (or sudo) to install clang-19 when it is missing; everything else is
# downloaded into the cache (apt-get download, apt-get source with a private
# configuration, pip download) and never installed.
set -euo pipefail

CHECKOUT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
CACHE="${BERTEMBED_CI_CACHE:-/var/cache/bertembed-ci}/msvc-shaped"
CLANG_V=19
PY_SRC=python3.11 # the CPython source package of the Debian release (bookworm)
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 HF_HUB_OFFLINE=1
unset PYTHONPATH
WORK="$(mktemp -d "${TMPDIR:-/tmp}/bertembed-msvc.XXXXXX")"
trap 'rc=$?; if [[ $rc -eq 0 ]]; then rm -rf "$WORK"; else echo "msvc-shaped: kept $WORK" >&2; fi' EXIT
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
t0=$SECONDS
took() { echo "   ($1: $((SECONDS - t0)) s)"; t0=$SECONDS; }

if [[ "$(uname -m)" != x86_64 ]]; then
    echo "msvc-shaped: x86-64 only (this is $(uname -m))" >&2
    exit 2
fi
SUDO=""
SANDBOX=(-o APT::Sandbox::User=root)
[[ "$(id -u)" -eq 0 ]] || { SUDO="sudo"; SANDBOX=(); }
. "$CHECKOUT/.ci/lib.sh"

# ---------------------------------------------------------------- toolchain
CLANG="clang-$CLANG_V"
if ! command -v "$CLANG" >/dev/null; then
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        --no-install-recommends "$CLANG" >/dev/null
fi
RESOURCE="$("$CLANG" -print-resource-dir)/include"

# Debian packages unpacked into the cache (not installed): Wine's Windows C
# runtime and SDK headers, libomp's omp.h.
unpack() {  # NAME PACKAGE...
    local dir="$CACHE/$1" deb
    shift
    if [[ ! -e "$dir/.done" ]]; then
        rm -rf "$dir"
        mkdir -p "$dir/debs"
        (cd "$dir/debs" && apt-get "${SANDBOX[@]}" download -qq "$@")
        for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$dir/root"; done
        rm -rf "$dir/debs"
        touch "$dir/.done"
    fi
}
unpack wine libwine-dev
unpack libomp "libomp-$CLANG_V-dev"
WINE_INC="$(find "$CACHE/wine/root" -type d -path '*/wine/msvcrt' | head -1)"
WINE_INC="${WINE_INC%/msvcrt}"
OMP_H="$(find "$CACHE/libomp/root" -name omp.h | head -1)"
[[ -d "$WINE_INC/windows" && -n "$OMP_H" ]] || { echo "msvc-shaped: Wine or libomp headers not unpacked" >&2; exit 1; }

# CPython's Windows configuration: PC/pyconfig.h and Include/ of Debian's
# source package, fetched by apt through a private configuration that knows
# only the release's source packages (apt checks them against the signed index).
PYINC="$CACHE/python-windows/include"
if [[ ! -e "$PYINC/.done" ]]; then
    apt_dir="$CACHE/python-windows/apt"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/parts"
    codename="$(. /etc/os-release && echo "$VERSION_CODENAME")"
    cat >"$apt_dir/src.sources" <<EOF
Types: deb-src
URIs: $(bash "$CHECKOUT/.ci/debian-mirror.sh")
Suites: $codename
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/src.sources" -o "Dir::Etc::SourceParts=$apt_dir/parts"
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" "${SANDBOX[@]}")
    apt-get "${apt_opts[@]}" -qq update
    rm -rf "$CACHE/python-windows/src" "$PYINC"
    mkdir -p "$CACHE/python-windows/src" "$PYINC"
    (cd "$CACHE/python-windows/src" && apt-get "${apt_opts[@]}" -qq source --download-only "$PY_SRC" >/dev/null \
        && tar -xzf ./*.orig.tar.gz --strip-components=1 --wildcards '*/Include' '*/PC/pyconfig.h')
    cp -r "$CACHE/python-windows/src/Include/." "$PYINC/"
    cp "$CACHE/python-windows/src/PC/pyconfig.h" "$PYINC/"
    rm -rf "$CACHE/python-windows/src" "$apt_dir"
    touch "$PYINC/.done"
fi

# The build venv (Cython and NumPy, as the wheel builds use), and NumPy's
# Windows headers from the win_amd64 wheel of the same NumPy version.
VENV="$CACHE/venv"
ci_venv "$PYTHON" "$VENV"
"$VENV/bin/python" -m pip install -q "${CI_OPTIONAL[@]}"
np_version="$("$VENV/bin/python" -c 'import numpy; print(numpy.__version__)')"
py_tag="$("$VENV/bin/python" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')"
NPINC="$CACHE/numpy-win-$np_version/include"
if [[ ! -e "$NPINC/.done" ]]; then
    rm -rf "$CACHE"/numpy-win-*
    mkdir -p "$CACHE/numpy-win-$np_version/whl"
    "$VENV/bin/python" -m pip download -q --no-deps --only-binary=:all: --platform win_amd64 \
        --python-version "$py_tag" "numpy==$np_version" -d "$CACHE/numpy-win-$np_version/whl"
    (cd "$CACHE/numpy-win-$np_version" && "$VENV/bin/python" -m zipfile -e whl/*.whl unpacked)
    mkdir -p "$NPINC"
    cp -r "$CACHE/numpy-win-$np_version/unpacked/numpy/_core/include/." "$NPINC/"
    rm -rf "$CACHE/numpy-win-$np_version/whl" "$CACHE/numpy-win-$np_version/unpacked"
    touch "$NPINC/.done"
fi
took "toolchain and headers"

# ---------------------------------------------------------------- W1-W3
CSRC="$CHECKOUT/src/bertembed/_core/csrc"
# The generated C, from a copy of the sources: the same directives as setup.py.
ci_copy_package "$CHECKOUT" "$WORK/pkg"
(cd "$WORK/pkg/src" && "$VENV/bin/cython" -3 -I bertembed/_core/csrc bertembed/_core/_kernel.pyx -o "$WORK/_kernel.c")

# MSVC's predefined macros, and none of clang's own (the target triple
# already gives _MSC_VER, _WIN32, _WIN64, _M_X64, _M_AMD64). __x86_64__ stays:
# clang's intrinsic headers and Wine's need it (the check of W3's grep below
# makes sure our code never tests it without _M_X64 or a GNU/clang test).
NOT_CLANG=(-U__clang__ -U__clang_major__ -U__clang_minor__ -U__clang_patchlevel__ -U__clang_version__
    -U__llvm__ -U__VERSION__ -U__GCC_ASM_FLAG_OUTPUTS__)
WINDOWS=(--target=x86_64-pc-windows-msvc -fms-compatibility -fms-compatibility-version=19.40 -fms-extensions
    -fopenmp -nostdinc -isystem "$RESOURCE" -isystem "$CHECKOUT/.ci/msvc/crt" -isystem "$WINE_INC/msvcrt"
    -isystem "$WINE_INC/windows" -isystem "$PYINC" -isystem "$NPINC" -I "$CSRC"
    -DNPY_NO_DEPRECATED_API=NPY_1_23_API_VERSION -DNPY_TARGET_VERSION=NPY_1_23_API_VERSION -ferror-limit=0)
# MSVC's /openmp: OpenMP 2.0 and its omp.h.
MSVC=("${WINDOWS[@]}" -I "$CHECKOUT/.ci/msvc" -U_OPENMP -D_OPENMP=200203 "${NOT_CLANG[@]}")
W3_WARNINGS=(-Wshorten-64-to-32 -Wsign-compare -Wfloat-conversion -Wimplicit-float-conversion
    -Werror=implicit-function-declaration)

echo "-- W1. MSVC-shaped compile of the generated C ($CLANG, OpenMP 2.0, Windows headers)"
"$CLANG" "${MSVC[@]}" "${W3_WARNINGS[@]}" -dM -E "$WORK/_kernel.c" >"$WORK/macros.txt"
for m in _MSC_VER _WIN32 _WIN64 _M_X64; do
    grep -q "^#define $m " "$WORK/macros.txt" || { echo "msvc-shaped: $m is not defined" >&2; exit 1; }
done
for m in __GNUC__ __clang__; do
    if grep -q "^#define $m " "$WORK/macros.txt"; then echo "msvc-shaped: $m is defined" >&2; exit 1; fi
done
grep -q '^#define _OPENMP 200203$' "$WORK/macros.txt" || { echo "msvc-shaped: _OPENMP is not 200203" >&2; exit 1; }
rc=0
"$CLANG" -fsyntax-only "${MSVC[@]}" "${W3_WARNINGS[@]}" "$WORK/_kernel.c" >"$WORK/w1.log" 2>&1 || rc=$?
# Each diagnostic, attributed: our headers, the code Cython made from our
# .pyx (the nearest "/* "..._kernel.pyx":N" marker above it, in the
# module-code section), or someone else's.
"$VENV/bin/python" - "$WORK/w1.log" "$WORK/_kernel.c" "$CSRC" "$rc" <<'EOF'
import re, sys
log, c_file, csrc, rc = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
lines = open(c_file, encoding="utf-8").read().splitlines()
marker, section = [None] * (len(lines) + 2), [None] * (len(lines) + 2)
cur, sec = None, None
for n, line in enumerate(lines, 1):
    m = re.match(r'/\* "(.+)":(\d+)$', line)
    if m:
        cur = (m.group(1), int(m.group(2)))
    s = re.match(r"/\* #### Code section: (\w+) ### \*/", line)
    if s:
        sec = s.group(1)
    marker[n], section[n] = cur, sec
ours, theirs, errors = [], [], []
for d in open(log, encoding="utf-8", errors="replace"):
    m = re.match(r"(.+?):(\d+):\d+: (error|warning): (.*)", d.rstrip())
    if not m:
        continue
    path, n, kind, text = m.group(1), int(m.group(2)), m.group(3), m.group(4)
    where = None
    if path.startswith(csrc):
        where = path[len(csrc) + 1 :] + f":{n}"
    elif path == c_file and section[n] == "module_code" and marker[n] and marker[n][0].endswith("_kernel.pyx"):
        where = f"_kernel.pyx:{marker[n][1]} (C line {n})"
    if kind == "error":
        errors.append(f"{where or path + ':' + str(n)}: {text}")
    elif where:
        ours.append(f"{where}: {text}")
    else:
        theirs.append(f"{path}:{n}: {text}")
print(f"   {len(errors)} errors; warnings: {len(ours)} in bertembed's code, {len(theirs)} elsewhere (Cython's support code, system headers)")
for x in errors + ours:
    print(f"   {x}")
sys.exit(1 if errors or ours or rc else 0)
EOF

echo "-- W2. OpenMP 2.0: the pragmas of the generated C and of the headers"
"$VENV/bin/python" "$CHECKOUT/.ci/msvc/omp2_audit.py" "$WORK/_kernel.c" "$CSRC"/*.h | sed 's/^/   /'
# MSVC defines neither __x86_64__ nor __GNUC__: a test of __x86_64__ must come
# with _M_X64 or with a GNU/clang test, or MSVC silently skips the branch.
bad="$(grep -nE '^\s*#\s*(el)?if.*__x86_64__' "$CSRC"/*.h | grep -vE '_M_X64|__GNUC__|__clang__' || true)"
if [[ -n "$bad" ]]; then
    echo "$bad"
    echo "msvc-shaped: __x86_64__ tested without _M_X64 (MSVC) or a GNU/clang test (above)" >&2
    exit 1
fi

HEADERS_WARNINGS=(-Wall -Wextra -Wno-unused-function "${W3_WARNINGS[@]}" -Werror)
echo "-- W3. the headers alone, MSVC's shape and clang-cl's, -Wall -Wextra"
"$CLANG" -fsyntax-only "${MSVC[@]}" "${HEADERS_WARNINGS[@]}" -DBE_DRIVER_PYTHON "$CHECKOUT/.ci/csrc-all.c"
echo "   MSVC: clean"
"$CLANG" -fsyntax-only "${WINDOWS[@]}" -isystem "$(dirname "$OMP_H")" "${HEADERS_WARNINGS[@]}" \
    -DBE_DRIVER_PYTHON "$CHECKOUT/.ci/csrc-all.c"
echo "   clang-cl (libomp's omp.h): clean"

echo "-- M1. macOS: the headers for arm64 and x86-64, libomp's omp.h"
for target in arm64-apple-macos11 x86_64-apple-macos10.13; do
    "$CLANG" --target="$target" -fsyntax-only -ffreestanding -fopenmp -nostdinc -isystem "$RESOURCE" \
        -isystem "$CHECKOUT/.ci/macos/libc" -isystem "$(dirname "$OMP_H")" -I "$CSRC" \
        "${HEADERS_WARNINGS[@]}" "$CHECKOUT/.ci/csrc-all.c"
    macros="$("$CLANG" --target="$target" -ffreestanding -fopenmp -nostdinc -isystem "$RESOURCE" \
        -isystem "$CHECKOUT/.ci/macos/libc" -isystem "$(dirname "$OMP_H")" -I "$CSRC" \
        -dM -E "$CHECKOUT/.ci/csrc-all.c")"
    grep -q '^#define __APPLE__ ' <<<"$macros" || { echo "msvc-shaped: __APPLE__ is not defined for $target" >&2; exit 1; }
    echo "   $target: clean"
done
took "W1-W3, M1"

# ---------------------------------------------------------------- R
echo "-- R. the MSVC-shaped kernel: GCC, BE_MSVC_SHAPE=1 -ffp-contract=off"
gcc -O2 -Wall -Wextra -Werror -I "$CSRC" "$CHECKOUT/.ci/msvc/cpu_choice.c" -o "$WORK/cpu_choice"
"$WORK/cpu_choice" | sed 's/^/   /'

build() {  # VENV CFLAGS LABEL
    (cd "$WORK/pkg" && rm -rf build && CFLAGS="$2" "$1/bin/python" -m pip install -q --no-build-isolation \
        --no-deps --no-cache-dir --force-reinstall .) >"$WORK/build-$3.log" 2>&1 || {
        tail -40 "$WORK/build-$3.log"
        echo "msvc-shaped: the $3 build failed" >&2
        exit 1
    }
}
ci_copy_tests "$CHECKOUT" "$WORK/run"
build "$VENV" "-DBE_MSVC_SHAPE=1 -ffp-contract=off" msvc-shaped
(cd "$WORK/run" && "$VENV/bin/python" .ci/isa_digest.py write "$WORK/digest-msvc.json") | sed 's/^/   /'
REF="${MSVC_SHAPED_REFERENCE:-}"
if [[ -z "$REF" ]]; then
    ci_venv "$PYTHON" "$CACHE/gcc-venv"
    "$CACHE/gcc-venv/bin/python" -m pip install -q "${CI_OPTIONAL[@]}"
    build "$CACHE/gcc-venv" "" gcc
    REF="$CACHE/gcc-venv/bin/python"
fi
(cd "$WORK/run" && "$REF" .ci/isa_digest.py write "$WORK/digest-gcc.json") | sed 's/^/   /'
(cd "$WORK/run" && "$VENV/bin/python" .ci/isa_digest.py compare --common "$WORK/digest-gcc.json" \
    "$WORK/digest-msvc.json") | sed 's/^/   /'
# The kernel-path tests: each instruction set against the reference, and the
# one chosen is the best this CPU runs of those the build holds.
echo "   tests/core/kernel/test_kernel_paths.py"
(cd "$WORK/run" && "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/core/kernel/test_kernel_paths.py) \
    >"$WORK/paths.log" 2>&1 || { tail -40 "$WORK/paths.log"; exit 1; }
tail -1 "$WORK/paths.log"
took R
echo "== msvc-shaped: all passed"
