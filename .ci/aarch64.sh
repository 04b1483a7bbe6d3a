#!/usr/bin/env bash
# Build and test bertembed on Linux aarch64 under emulation (qemu-user + binfmt)
# on an x86-64 Debian/Ubuntu machine, from nothing:
#
#   1. apt: qemu-user-static, binfmt-support, debootstrap; binfmt_misc mounted
#      and the aarch64 handler enabled;
#   2. a Debian bookworm arm64 root (debootstrap, with python3, python3-venv,
#      python3-dev, gcc), cached in $AARCH64_ROOT (default
#      /var/cache/bertembed-ci/arm64-root). It is built in a temporary
#      directory next to it and moved into place only when complete, so an
#      interrupted run never leaves a broken cache;
#   3. inside the root: a venv with PyPI's aarch64 wheels (numpy, pytest, ...;
#      the venv is cached in the root too), bertembed built from a copy of this
#      checkout, the smoke check, `row_kernel_isa` printed, and the tests.
#
# Emulation costs ~10-50x, so by default a sample of the suite runs: every
# test of the files that exercise the compiled kernel (row kernels per ISA,
# dtype conversions bit for bit, LayerNorm, terms, errors, threads, fork,
# fuzzing) and the checkpoint readers. Left out: the CLI, benchmark-harness,
# automatic-thread-choice, property (hypothesis), documentation, example,
# service, leak and big-table tests (pure Python or timing-bound; they run natively on the
# ubuntu-24.04-arm GitHub job). The heavy peers (torch, transformers,
# onnxruntime) are not installed, so those tests skip. AARCH64_PYTEST_ARGS
# replaces the selection, e.g. AARCH64_PYTEST_ARGS="tests" for all of it.
# The C compiler runs through ccache (cached in the root), so a rerun on the
# same sources skips the emulated compile.
#
# Usage: sudo bash .ci/aarch64.sh      (needs root: apt, mount, chroot)
# Environment: AARCH64_ROOT, AARCH64_MIRROR (default: the Debian archive of this machine's apt sources),
# AARCH64_PYTEST_ARGS, BERTEMBED_ISA (passed through to the tests).
set -euo pipefail

CHECKOUT="$(cd "$(dirname "$0")/.." && pwd)"
ROOT="${AARCH64_ROOT:-/var/cache/bertembed-ci/arm64-root}"
MIRROR="${AARCH64_MIRROR:-$(bash "$CHECKOUT/.ci/debian-mirror.sh")}"
# The tests run under emulation (see the header): the kernel, conversions,
# LayerNorm, errors, threads, fork and the checkpoint readers.
DEFAULT_TESTS="tests/core/kernel/test_kernel_paths.py tests/core/tables/test_table_dtypes.py
    tests/core/contract/test_layernorm.py tests/core/contract/test_terms.py tests/core/contract/test_reference.py
    tests/core/contract/test_errors.py tests/core/runtime/test_threads.py tests/core/runtime/test_pool.py
    tests/core/runtime/test_fork.py tests/core/contract/test_worked_examples.py tests/fuzz/test_fuzz_quick.py
    tests/checkpoints/test_weights_safetensors.py tests/checkpoints/test_weights_sharded.py
    tests/checkpoints/test_weights_open.py tests/checkpoints/test_pretrained.py"
PYTEST_ARGS="${AARCH64_PYTEST_ARGS:-$(echo $DEFAULT_TESTS)}"
START=$SECONDS
export DEBIAN_FRONTEND=noninteractive

step() { echo "== aarch64 [$((SECONDS - START))s]: $*"; }

if [[ $(id -u) -ne 0 ]]; then
    echo "aarch64.sh: needs root (apt-get, mount, chroot); run it with sudo" >&2
    exit 2
fi

# --- 1. emulation -----------------------------------------------------------
need=()
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v update-binfmts >/dev/null || need+=(binfmt-support)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
    step "apt-get install ${need[*]}"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/status ]]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
    update-binfmts --enable qemu-aarch64 || true
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
    # Some containers lack the binfmt-support service: register by hand
    # (F: the interpreter is opened now, so it works inside the chroot).
    printf '%s' ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' \
        >/proc/sys/fs/binfmt_misc/register
fi
grep -q enabled /proc/sys/fs/binfmt_misc/qemu-aarch64
step "binfmt: $(grep interpreter /proc/sys/fs/binfmt_misc/qemu-aarch64)"

# --- 2. the arm64 root (cached) ---------------------------------------------
if [[ ! -x "$ROOT/usr/bin/python3" ]]; then
    step "debootstrap bookworm arm64 into $ROOT (first run only)"
    mkdir -p "$(dirname "$ROOT")"
    tmproot="$(mktemp -d "$ROOT.tmp.XXXXXX")"
    trap 'rm -rf "$tmproot"' EXIT
    debootstrap --arch=arm64 --variant=minbase \
        --include=python3,python3-venv,python3-dev,gcc,libc6-dev,ca-certificates,ccache \
        bookworm "$tmproot" "$MIRROR" >"$tmproot.log" 2>&1 \
        || { tail -30 "$tmproot.log" >&2; exit 1; }
    rm -f "$tmproot.log"
    rm -rf "$tmproot/var/cache/apt/archives/"*.deb
    rm -rf "$ROOT"
    mv "$tmproot" "$ROOT"
    trap - EXIT
fi
step "root ready: $(chroot "$ROOT" /usr/bin/python3 --version) on $(chroot "$ROOT" uname -m)"

# --- 3. build and test inside the root ----------------------------------------
mounted=()
cleanup() {
    local m
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        m="${mounted[i]}"
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
}
trap cleanup EXIT
for fs in proc dev/shm; do
    mkdir -p "$ROOT/$fs"
done
mount -t proc proc "$ROOT/proc" && mounted+=("$ROOT/proc")
mount -t tmpfs tmpfs "$ROOT/dev/shm" && mounted+=("$ROOT/dev/shm")
cp -L /etc/resolv.conf "$ROOT/etc/resolv.conf"
# The host's trust store for pip inside the root (it may hold a proxy's CA).
ca=""
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    cp -L /etc/ssl/certs/ca-certificates.crt "$ROOT/work-host-ca.crt"
    ca=/work-host-ca.crt
fi

# A fresh copy of the checkout (tracked and untracked files, minus build
# products and venvs).
rm -rf "$ROOT/work/src"
mkdir -p "$ROOT/work/src"
tar -C "$CHECKOUT" \
    --exclude=.git --exclude=.venv --exclude=build --exclude='*.so' \
    --exclude='src/bertembed/_core/_kernel.c' --exclude='*.egg-info' \
    --exclude=docs/_build --exclude=__pycache__ -cf - . |
    tar -C "$ROOT/work/src" -xf -

if [[ ! -x "$ROOT/usr/bin/ccache" ]]; then # a root cached before ccache was added
    step "apt-get install ccache (in the root)"
    chroot "$ROOT" /usr/bin/env -i PATH=/usr/bin:/bin DEBIAN_FRONTEND=noninteractive \
        sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends ccache' >/dev/null
fi

cat >"$ROOT/work/run.sh" <<EOF
set -euo pipefail
export HOME=/root PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 LC_ALL=C.UTF-8
export PIP_ONLY_BINARY=:all: PIP_CACHE_DIR=/work/pip-cache
export BERTEMBED_ISA="${BERTEMBED_ISA:-}"
[[ -z "$ca" ]] || export PIP_CERT="$ca"
[[ -n "\$BERTEMBED_ISA" ]] || unset BERTEMBED_ISA
# The venv is cached in the root; one cut short (a run stopped while making
# it) is made again.
if [[ ! -e /work/venv/.complete ]]; then
    rm -rf /work/venv
    python3 -m venv /work/venv
    touch /work/venv/.complete
fi
. /work/venv/bin/activate
cd /work/src
echo "== aarch64: pip install (PyPI aarch64 wheels)"
pip install -q "numpy>=2.0" "cython>=3.1" "setuptools>=77" wheel "pytest>=7" "hypothesis>=6" \
    "threadpoolctl>=3" "safetensors>=0.4" "ml_dtypes>=0.4"
echo "== aarch64: build (\$(date -u +%T))"
export CC="ccache gcc" CCACHE_DIR=/work/ccache
PIP_ONLY_BINARY= pip install -v --no-build-isolation --no-deps . >/work/build.log 2>&1 \
    || { tail -40 /work/build.log; exit 1; }
echo "compiler warnings: \$(grep -c -E ':[0-9]+:[0-9]+: warning:' /work/build.log || true)"
grep -E ':[0-9]+:[0-9]+: warning:' /work/build.log || true
ccache -s | grep -i -E "hits|misses" || true
cd /work
python src/.ci/wheel_smoke.py
python - <<'PY'
import platform, bertembed
print("machine:", platform.machine())
bertembed.show_config()
PY
echo "== aarch64: pytest $PYTEST_ARGS (\$(date -u +%T))"
cd /work/src
python -m pytest -p no:cacheprovider -q --durations=10 $PYTEST_ARGS
EOF
step "build and test inside the root"
chroot "$ROOT" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root TERM=dumb /bin/bash /work/run.sh
step "passed"
