#!/usr/bin/env bash
# Run a command as on an AVX2 host without AVX-512, AVX-VNNI or AMX: every
# library that picks its kernels by CPUID (bertembed, NumPy, OpenBLAS, ONNX
# Runtime, torch) runs its AVX2 code, children included (shared/avx2_only.c).
# Linux x86-64 with CPUID faulting and a C compiler.
#
#   bash benchmarks/avx2_host.sh python benchmarks/service/int8_encoder.py --rounds 5
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
grep -qw cpuid_fault /proc/cpuinfo || { echo "avx2_host: this CPU has no CPUID faulting" >&2; exit 2; }
lib="$(mktemp -d)/avx2_only.so"
"${CC:-cc}" -O2 -shared -fPIC "$here/shared/avx2_only.c" -o "$lib"
LD_PRELOAD="$lib${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"
