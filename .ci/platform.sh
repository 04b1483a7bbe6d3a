#!/usr/bin/env bash
# The platform steps of .ci/run, one after another, on the checkout this
# script sits in (.ci/run hands it a copy taken before anything is built):
#   P1. Linux aarch64 under emulation (.ci/aarch64.sh: qemu-user, a cached
#       Debian arm64 root, PyPI wheels): build, a sample of the suite, NEON;
#   P2. free-threaded CPython 3.13t (.ci/freethreaded.sh: built once from
#       Debian's source package, cached outside the clone): GIL checks, the
#       suite, a concurrency stress run;
#   P3. clang + libomp builds (.ci/clang.sh): the suite, each instruction set
#       bit for bit against GCC, no compiler warning from our sources.
# Each is mostly one-thread work; .ci/run runs them beside its own steps.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
sudo_=""
[[ $(id -u) -eq 0 ]] || sudo_="sudo"
t0=$SECONDS
took() { echo "== $1 took $((SECONDS - t0)) s"; t0=$SECONDS; }

echo "== P1. Linux aarch64 under emulation (qemu-user, Debian arm64 root): build, tests, NEON kernel"
$sudo_ bash "$here/aarch64.sh"
took P1
echo "== P2. free-threaded CPython: build, the GIL stays off, tests, concurrency stress"
bash "$here/freethreaded.sh"
took P2
echo "== P3. clang + libomp: build and test"
bash "$here/clang.sh"
took P3
