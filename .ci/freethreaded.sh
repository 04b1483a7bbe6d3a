#!/usr/bin/env bash
# Build and test bertembed on free-threaded CPython (PEP 703, `--disable-gil`).
#
#   bash .ci/freethreaded.sh                              # everything
#   BERTEMBED_STRESS_SECONDS=10 bash .ci/freethreaded.sh  # a shorter stress run
#
# 1. The interpreter: CPython 3.13 built with --disable-gil from Debian's
#    python3.13 source package (its upstream tarball; Debian 13 "trixie"; it is
#    fetched with apt through a private apt configuration, so the machine's
#    apt sources and package lists are left alone). The build is cached
#    under FT_CACHE (default /var/cache/bertembed-ci), keyed by the source
#    package's version: reruns reuse it. No profile-guided optimisation, no
#    LTO, no test-suite modules: the build takes minutes, not an hour.
# 2. A venv with NumPy (free-threaded wheels from PyPI), the test
#    dependencies and the build tools; bertembed built from a copy of the
#    checkout (the checkout is never modified) and installed into it.
# 3. Checks: the interpreter is a free-threaded build; importing bertembed
#    (and NumPy) leaves the GIL disabled (the extension declares
#    free-threading support; an extension that does not re-enables the GIL
#    at import, with a warning).
# 4. The test suite (not the torch/onnxruntime comparisons) with
#    PYTHON_GIL=0, then the concurrency stress test (tests/core/runtime/test_concurrency.py)
#    for BERTEMBED_STRESS_SECONDS (default 60) with BERTEMBED_STRESS_THREADS
#    (default 16) threads, without PYTHON_GIL, so that anything re-enabling
#    the GIL would show; both fail if the GIL is on at the end.
#
# Environment: FT_CACHE (the interpreter cache), FT_WORK (a work directory to
# reuse; default: a fresh temporary one, removed on success), FT_JOBS (make
# -j, default 2), BERTEMBED_STRESS_SECONDS, BERTEMBED_STRESS_THREADS, PYTEST_ARGS (extra pytest
# arguments for the suite). Linux with apt (Debian or Ubuntu) and gcc.
set -euo pipefail

CHECKOUT="$(cd "$(dirname "$0")/.." && pwd)"
FT_CACHE="${FT_CACHE:-/var/cache/bertembed-ci}"
FT_JOBS="${FT_JOBS:-2}"
STRESS_SECONDS="${BERTEMBED_STRESS_SECONDS:-60}"
STRESS_THREADS="${BERTEMBED_STRESS_THREADS:-16}"
SRC_PACKAGE=python3.13
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
unset PYTHONPATH PYTHON_GIL
start=$SECONDS
say() { echo "== freethreaded [$((SECONDS - start))s]: $*"; }

if [[ -n "${FT_WORK:-}" ]]; then
    WORK="$FT_WORK"
    mkdir -p "$WORK"
else
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/bertembed-freethreaded.XXXXXX")"
    trap 'rc=$?; if [[ $rc -eq 0 ]]; then rm -rf "$WORK"; else echo "freethreaded: kept $WORK" >&2; fi' EXIT
fi
say "work directory $WORK"

# ---------------------------------------------------------------- 1. CPython
CACHE="$FT_CACHE/${SRC_PACKAGE}t"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9   # one build at a time; a second run waits and then reuses it

# A private apt configuration that knows only trixie's source packages.
APT_DIR="$CACHE/apt"
mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial" "$APT_DIR/parts"
DEBIAN_MAIN="$(bash "$CHECKOUT/.ci/debian-mirror.sh")"
DEBIAN_SECURITY="$(bash "$CHECKOUT/.ci/debian-mirror.sh" security)"
cat >"$APT_DIR/trixie-src.sources" <<EOF
Types: deb-src
URIs: $DEBIAN_MAIN
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: $DEBIAN_SECURITY
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
APT_OPTS=(-o "Dir::Etc::SourceList=$APT_DIR/trixie-src.sources" -o "Dir::Etc::SourceParts=$APT_DIR/parts"
          -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache"
          -o "APT::Sandbox::User=root")

version=""
if apt-get "${APT_OPTS[@]}" -qq update >"$WORK/apt-update.log" 2>&1; then
    version="$(apt-cache "${APT_OPTS[@]}" showsrc "$SRC_PACKAGE" \
        | sed -n 's/^Version: //p' | sort -V | tail -1)"
fi
if [[ -z "$version" ]]; then
    # No network or no such package: the newest build already cached, if any.
    version="$(find "$CACHE" -mindepth 2 -maxdepth 2 -name .complete -printf '%h\n' 2>/dev/null \
        | xargs -r -n1 basename | sort -V | tail -1)"
    [[ -n "$version" ]] || { cat "$WORK/apt-update.log" >&2; echo "freethreaded: no $SRC_PACKAGE source" >&2; exit 1; }
    echo "freethreaded: apt unavailable, using the cached build $version" >&2
fi
PREFIX="$CACHE/$version"
PY="$PREFIX/bin/${SRC_PACKAGE}t"

if [[ -e "$PREFIX/.complete" && -x "$PY" ]]; then
    say "cached interpreter $PY"
else
    say "building CPython $version with --disable-gil (Debian source package $SRC_PACKAGE)"
    if ! command -v gcc >/dev/null || ! command -v make >/dev/null; then
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
            build-essential pkg-config xz-utils
    fi
    # Headers of the modules pip, NumPy and the tests need (ssl, zlib, ctypes
    # for threadpoolctl, bz2/lzma); dpkg -s first, so a warm machine needs no apt.
    need=()
    for p in libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev uuid-dev; do
        dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
    done
    if [[ ${#need[@]} -gt 0 ]]; then
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}"
    fi
    BUILD="$CACHE/build-$version"
    rm -rf "$BUILD" "$PREFIX"
    mkdir -p "$BUILD"
    # apt checks the .dsc and the tarballs against the signed Release file.
    # Built from the package's upstream tarball, without Debian's patches:
    # those adapt CPython to Debian's layout (dist-packages, multiarch), and
    # with them a venv of the free-threaded build has no site-packages on
    # sys.path (it is named python3.13t, the patched site.py looks for
    # python3.13). Debian's own rules are not used either: they build several
    # variants with PGO + LTO, far beyond this step's time budget.
    (cd "$BUILD" && apt-get "${APT_OPTS[@]}" -qq source --download-only "$SRC_PACKAGE=$version" \
        && mkdir src && tar -xJf ./*.orig.tar.xz -C src --strip-components=1) >"$BUILD/source.log" 2>&1 \
        || { tail -30 "$BUILD/source.log" >&2; exit 1; }
    (cd "$BUILD/src" \
        && ./configure --prefix="$PREFIX" --disable-gil --disable-test-modules \
            --with-ensurepip=no --without-static-libpython \
        && nice -n 10 make -j"$FT_JOBS" \
        && nice -n 10 make install) >"$BUILD/build.log" 2>&1 \
        || { tail -60 "$BUILD/build.log" >&2; echo "freethreaded: build failed, log $BUILD/build.log" >&2; exit 1; }
    "$PY" -c 'import sysconfig, sys; assert sysconfig.get_config_var("Py_GIL_DISABLED") == 1, sys.version'
    touch "$PREFIX/.complete"
    rm -rf "$BUILD"
    # Older builds of the interpreter are no longer needed.
    find "$CACHE" -mindepth 1 -maxdepth 1 -type d ! -name apt ! -name "$version" -exec rm -rf {} +
    say "built $PY"
fi
flock -u 9
"$PY" -VV

# ---------------------------------------------------------------- 2. venv, build
. "$CHECKOUT/.ci/lib.sh"
say "installing NumPy, the test dependencies and the build tools"
# Wheels only: a source build of NumPy would take longer than everything else.
ci_venv "$PY" "$WORK/venv" --only-binary=:all:
VPY="$WORK/venv/bin/python"
# Optional, wheels only: the tests that need them skip without them (and the
# stress test writes its checkpoint without safetensors).
for opt in "${CI_OPTIONAL[@]}"; do
    "$VPY" -m pip install -q --only-binary=:all: "$opt" \
        || echo "freethreaded: no free-threaded wheel of $opt; its tests skip" >&2
done
"$VPY" -m pip list --format=freeze | grep -iE '^(numpy|cython|pytest|hypothesis|threadpoolctl|safetensors|ml.dtypes)=='

ci_copy_package "$CHECKOUT" "$WORK/pkg"
say "building bertembed"
(cd "$WORK/pkg" && nice -n 10 "$VPY" -m pip install -q --no-build-isolation --no-deps \
    --no-cache-dir --force-reinstall .) >"$WORK/build.log" 2>&1 \
    || { tail -50 "$WORK/build.log" >&2; exit 1; }

rm -rf "$WORK/run"
ci_copy_tests "$CHECKOUT" "$WORK/run"
run() { (cd "$WORK/run" && env -u PYTHONPATH PYTHONFAULTHANDLER=1 "$@"); }

# ---------------------------------------------------------------- 3. GIL checks
say "checking that importing bertembed leaves the GIL disabled"
# (gil_check.py is also the pytest plugin below: -p gil_check fails a session
# that ends with the GIL enabled.)
cp "$CHECKOUT/.ci/gil_check.py" "$WORK/run/"
run "$VPY" gil_check.py

# ---------------------------------------------------------------- 4. tests
say "pytest, PYTHON_GIL=0"
# shellcheck disable=SC2086
run env PYTHON_GIL=0 "$VPY" -m pytest -q -p no:cacheprovider -p gil_check tests -m "not heavy" \
    --ignore=tests/core/runtime/test_concurrency.py ${PYTEST_ARGS:-}

say "concurrency stress test: $STRESS_THREADS threads, $STRESS_SECONDS s, GIL left to the interpreter"
run env BERTEMBED_STRESS_SECONDS="$STRESS_SECONDS" BERTEMBED_STRESS_THREADS="$STRESS_THREADS" "$VPY" -m pytest -q -s -p no:cacheprovider \
    -p gil_check tests/core/runtime/test_concurrency.py
say "all passed"
