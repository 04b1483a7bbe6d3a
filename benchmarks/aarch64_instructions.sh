#!/usr/bin/env bash
# Executed aarch64 instructions per call, portable row kernel vs NEON, counted
# under emulation on an x86-64 machine with QEMU's instruction-counting TCG
# plugin (tests/plugin/insn.c of QEMU's source, inline counter).
#
#   sudo bash .ci/aarch64.sh                   # once: the arm64 root with bertembed built
#   sudo bash benchmarks/aarch64_instructions.sh
#
# What it does:
#   1. installs qemu-user (the dynamically linked emulator; Debian's build has
#      plugin support, the -static one does not), libglib2.0-dev and
#      pkg-config;
#   2. fetches Debian's source package of that same qemu version (a private
#      deb-src list, the system's apt sources are left alone) and compiles only
#      the plugin, cached in $AARCH64_PLUGIN_DIR;
#   3. for each case (B=1 and B=8 at S=128, H=768, token + position + segment,
#      LayerNorm; float32 tables -> float32 result, float16 tables -> float32
#      result (the default), float16 tables -> float16 result) and each kernel
#      (BERTEMBED_ISA=baseline, the portable C; the default, NEON), runs the
#      arm64 Python of the root under qemu-aarch64 twice: two warm-up calls,
#      then 1 or 1 + REPS more calls (num_threads=1). The difference of the
#      two totals over REPS is the count of one call, the Python shim
#      included; process start-up cancels out. Every thread counts into the
#      one total, so nothing else may run: one OpenMP thread, and one
#      OpenBLAS thread (NumPy's OpenBLAS threads spin for a while at start,
#      a count that depends on timing).
#
# Environment: AARCH64_ROOT (default /var/cache/bertembed-ci/arm64-root),
# AARCH64_PLUGIN_DIR (default /var/cache/bertembed-ci/qemu-plugin), REPS (4).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

ROOT="${AARCH64_ROOT:-/var/cache/bertembed-ci/arm64-root}"
PLUGDIR="${AARCH64_PLUGIN_DIR:-/var/cache/bertembed-ci/qemu-plugin}"
REPS="${REPS:-4}"
export DEBIAN_FRONTEND=noninteractive

if [[ ! -d "$ROOT/work/venv/lib" ]]; then
    echo "no arm64 root with bertembed in $ROOT: run .ci/aarch64.sh first" >&2
    exit 2
fi

# --- 1-2. the emulator and the plugin ---------------------------------------
need=()
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v pkg-config >/dev/null || need+=(pkg-config)
pkg-config --exists glib-2.0 2>/dev/null || need+=(libglib2.0-dev)
if ((${#need[@]})); then
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
version="$(dpkg-query -W -f='${source:Version}' qemu-user)"
plugin="$PLUGDIR/libinsn-$version.so"
if [[ ! -f "$plugin" ]]; then
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    chmod 755 "$tmp" # apt's download user writes there
    mkdir -p "$tmp/lists/partial" "$PLUGDIR"
    main_uri="$(bash "$HERE/../.ci/debian-mirror.sh")"
    security_uri="$(bash "$HERE/../.ci/debian-mirror.sh" security)"
    printf "deb-src $main_uri %s main\n" bookworm bookworm-updates >"$tmp/sources.list"
    printf "deb-src $security_uri bookworm-security main\n" >>"$tmp/sources.list"
    apt_src=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$tmp/lists")
    apt-get "${apt_src[@]}" update -qq
    (cd "$tmp" && apt-get "${apt_src[@]}" source --download-only -qq "qemu=$version")
    tar -C "$tmp" -xf "$tmp"/qemu_*.orig.tar.* --wildcards '*/tests/plugin/insn.c' '*/include/qemu/qemu-plugin.h'
    # shellcheck disable=SC2046
    gcc -O2 -shared -fPIC -I"$(dirname "$tmp"/*/include/qemu/qemu-plugin.h)" $(pkg-config --cflags glib-2.0) \
        "$tmp"/*/tests/plugin/insn.c -o "$plugin.tmp" $(pkg-config --libs glib-2.0)
    mv "$plugin.tmp" "$plugin"
    rm -rf "$tmp"
    trap - EXIT
fi

# --- 3. the counts ------------------------------------------------------------
cat >"$ROOT/work/insn_case.py" <<'PY'
import sys

import numpy as np

import bertembed
from bertembed._core import _kernel

B, dtype, result, calls = int(sys.argv[1]), np.dtype(sys.argv[2]), np.dtype(sys.argv[3]), int(sys.argv[4])
S, H, V = 128, 768, 4096
rng = np.random.default_rng(0)
tok, pos, seg = (rng.standard_normal((n, H), np.float32).astype(dtype) for n in (V, 512, 2))
w = rng.uniform(0.5, 2, H).astype(np.float32)
b = rng.standard_normal(H, np.float32)
layer = bertembed.BertEmbeddings(tok, pos, seg, ln_weight=w, ln_bias=b, dtype=result)
ids = rng.integers(0, V, (B, S))
sids = rng.integers(0, 2, (B, S))
out = None
for _ in range(2 + calls):
    out = layer(ids, sids, num_threads=1)
assert out.dtype == result, out.dtype
print(_kernel.build_info()["isa"], file=sys.stderr)
PY

pyver="$(cd "$ROOT/work/venv/lib" && ls -d python3.* | head -1)"
count() { # isa B tables result calls -> total executed instructions, isa run
    local isa=$1 b=$2 dt=$3 rdt=$4 calls=$5 log
    log="$(mktemp)"
    env -i PATH=/usr/bin:/bin OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive \
        PYTHONHASHSEED=0 BERTEMBED_ISA="$isa" \
        PYTHONPATH="$ROOT/work/venv/lib/$pyver/site-packages" \
        qemu-aarch64 -L "$ROOT" -plugin "$plugin,inline=on" -d plugin -D "$log" \
        "$ROOT/usr/bin/$pyver" "$ROOT/work/insn_case.py" "$b" "$dt" "$rdt" "$calls" >/dev/null 2>"$log.err" || { cat "$log.err" >&2; exit 1; }
    echo "$(awk '/insns:/ {print $2}' "$log") $(cat "$log.err")"
    rm -f "$log" "$log.err"
}

printf '%-3s %-8s %-8s %-9s %12s %12s %7s\n' B tables result kernel "insns/call" "insns/value" ratio
for b in 1 8; do
    for case in float32:float32 float16:float32 float16:float16; do
        dt=${case%:*} rdt=${case#*:}
        declare -A per=()
        for isa in baseline neon; do
            read -r n1 chosen <<<"$(count "$isa" "$b" "$dt" "$rdt" 1)"
            read -r n2 _ <<<"$(count "$isa" "$b" "$dt" "$rdt" $((1 + REPS)))"
            per[$isa]=$(((n2 - n1) / REPS))
            if [[ $chosen != "$isa" ]]; then
                echo "asked for $isa, ran $chosen" >&2
                exit 1
            fi
        done
        for isa in baseline neon; do
            awk -v b="$b" -v dt="$dt" -v rdt="$rdt" -v isa="$isa" -v n="${per[$isa]}" -v base="${per[baseline]}" 'BEGIN {
                printf "%-3s %-8s %-8s %-9s %12d %12.2f %6.2fx\n", b, dt, rdt, isa, n, n / (b * 128 * 768), base / n }'
        done
        unset per
    done
done
