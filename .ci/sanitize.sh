#!/usr/bin/env bash
# Build bertembed with AddressSanitizer + UndefinedBehaviorSanitizer and run
# the test suite and the fuzz targets against that build.
#
#   bash .ci/sanitize.sh                 # everything (FUZZ_SECONDS=90 of fuzzing, shared by the targets)
#   FUZZ_SECONDS=0 bash .ci/sanitize.sh  # no fuzzing
#
# Environment: PYTHON (default python3), SANITIZE_WORK (a work directory to
# reuse; default: a fresh temporary one, removed at the end), FUZZ_SECONDS,
# PYTEST_ARGS (extra pytest arguments). Linux + gcc or clang only.
#
# The checkout is never modified: sources are copied to the work directory,
# built there (BERTEMBED_SANITIZE=1, see setup.py) and installed into the
# work directory's own venv; the tests run from a copy of tests/ so that they
# import the installed, instrumented package.
#
# Python itself is not instrumented, so the ASan runtime must be preloaded
# (LD_PRELOAD). detect_leaks=0: CPython frees little at exit by design.
# PYTHONMALLOC=malloc: every Python object goes through ASan's allocator, so
# overflows of small NumPy arrays and objects land in redzones too.
# Reports go to files (log_path): pytest captures fd 2, and a process that
# ASan stops takes a report written there with it.
set -euo pipefail

CHECKOUT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
FUZZ_SECONDS="${FUZZ_SECONDS:-90}"
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [[ -n "${SANITIZE_WORK:-}" ]]; then
    WORK="$SANITIZE_WORK"
    mkdir -p "$WORK"
else
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/bertembed-sanitize.XXXXXX")"
    # Removed on success; kept (with its logs) for inspection on failure.
    trap 'rc=$?; if [[ $rc -eq 0 ]]; then rm -rf "$WORK"; else echo "sanitize: kept $WORK" >&2; fi' EXIT
fi
echo "== sanitize: work directory $WORK"

CC="${CC:-gcc}"
LIBASAN="$("$CC" -print-file-name=libasan.so)"
if [[ ! -e "$LIBASAN" ]]; then
    echo "sanitize: $CC has no libasan.so ($LIBASAN)" >&2
    exit 2
fi

# 1. A venv of its own.
. "$CHECKOUT/.ci/lib.sh"
ci_venv "$PYTHON" "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q "${CI_OPTIONAL[@]}"
"$VPY" -m pip install -q atheris \
    || echo "sanitize: atheris not installable here; the fuzz step uses hypothesis"

# 2. Copy the sources (no build products) and build the instrumented package.
ci_copy_package "$CHECKOUT" "$WORK/pkg"
echo "== sanitize: building with BERTEMBED_SANITIZE=1"
(cd "$WORK/pkg" && CC="$CC" BERTEMBED_SANITIZE=1 "$VPY" -m pip install -q \
    --no-build-isolation --no-deps --no-cache-dir --force-reinstall .) > "$WORK/build.log" 2>&1 || {
    tail -50 "$WORK/build.log"
    exit 1
}

# The run environment: the instrumented package from the venv, ASan preloaded.
LOGS="$WORK/logs"
SAN_ENV=(
    env -u PYTHONPATH
    LD_PRELOAD="$LIBASAN"
    ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:allocator_may_return_null=1:log_path=$LOGS/asan"
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$LOGS/ubsan"
    PYTHONMALLOC=malloc
    PYTHONFAULTHANDLER=1
)
run() { (cd "$WORK/run" && "${SAN_ENV[@]}" "$@"); }
# Fail if a step left sanitizer reports (child processes write their own).
new_logs() { rm -rf "$LOGS"; mkdir -p "$LOGS"; }
check_logs() {
    local f found=0
    for f in "$LOGS"/*; do
        [[ -e "$f" ]] || continue
        found=1
        echo "---- $f"
        head -60 "$f"
    done
    if [[ $found -ne 0 ]]; then
        echo "sanitize: $1 produced sanitizer reports (above)" >&2
        exit 1
    fi
}

rm -rf "$WORK/run"
mkdir -p "$WORK/run"
cp -r "$CHECKOUT/tests" "$WORK/run/tests"
cp "$CHECKOUT/pyproject.toml" "$WORK/run/"
find "$WORK/run/tests" -name '__pycache__' -prune -exec rm -rf {} +

where="$(run "$VPY" -c 'import bertembed, sys; print(bertembed.__file__)')"
case "$where" in
    "$WORK/venv/"*) echo "== sanitize: testing $where" ;;
    *) echo "sanitize: imported bertembed from $where, not the venv" >&2; exit 1 ;;
esac
# (nm's whole output first: `nm | grep -q` fails under pipefail when grep
# stops reading early and nm gets SIGPIPE.)
symbols="$(nm -D "$(dirname "$where")"/_core/_kernel*.so)"
if ! grep -q __asan_ <<<"$symbols"; then
    echo "sanitize: the installed extension is not instrumented" >&2
    exit 1
fi

# 3. Self-check: a table that claims one row more than its buffer holds (a
#    strided view), so that an id the kernel's range check allows reads one
#    row past the end: ASan must report it. If this passes silently the
#    sanitizer is not active and the rest proves nothing.
echo "== sanitize: self-check (an out-of-bounds read must be caught)"
new_logs
set +e
run "$VPY" - > "$WORK/selfcheck.log" 2>&1 <<'EOF'
import numpy as np
from numpy.lib.stride_tricks import as_strided
import bertembed
buffer = np.ones((7, 5))
tok = as_strided(buffer, shape=(8, 5))  # row 7 is past the buffer's end
pos = np.ones((4, 5))
bertembed.bert_embeddings([[0, 7]], None, tok, pos, None, num_threads=1)
print("NOT CAUGHT")
EOF
rc=$?
set -e
if [[ $rc -eq 0 ]] || ! grep -qs "AddressSanitizer: heap-buffer-overflow" "$LOGS"/asan.*; then
    cat "$WORK/selfcheck.log" "$LOGS"/* 2>/dev/null || true
    echo "sanitize: self-check failed: the out-of-bounds read was not reported" >&2
    exit 1
fi
grep -h -m1 -A2 "AddressSanitizer: heap-buffer-overflow" "$LOGS"/asan.*
echo "   ok: reported (exit $rc)"

# 4. The test suite (not the torch/onnxruntime comparisons).
echo "== sanitize: pytest"
new_logs
set +e
# shellcheck disable=SC2086
run "$VPY" -m pytest -q -p no:cacheprovider tests -m "not heavy" ${PYTEST_ARGS:-}
rc=$?
set -e
check_logs pytest
if [[ $rc -ne 0 ]]; then
    echo "sanitize: pytest failed (exit $rc)" >&2
    exit "$rc"
fi

# 5. The fuzz targets, time-bounded: FUZZ_SECONDS in all, half for the
#    embedding call (fuzz_embed.py), half shared by the five checkpoint readers
#    (fuzz_checkpoints.py: safetensors header, sharded index, zip directory,
#    unpickler, config.json). The kept corpus (tests/fuzz/corpus/<target>/, what
#    the long campaigns of .github/workflows/fuzz.yml found) was replayed in
#    full by step 4 (tests/fuzz/test_fuzz_corpus.py: a few hundred small
#    inputs, bounded by the corpus size); libFuzzer starts from it here.
fuzz() {  # fuzz <label> <seconds> <script and arguments...>
    local label="$1" seconds="$2" status
    shift 2
    echo "== sanitize: fuzzing $label for $seconds s"
    mkdir -p "$WORK/fuzz-corpus/$label"
    if [[ -d "$WORK/run/tests/fuzz/corpus/$label" ]]; then
        cp "$WORK/run/tests/fuzz/corpus/$label"/* "$WORK/fuzz-corpus/$label"/ 2>/dev/null || true
    fi
    new_logs
    set +e
    # (tests/ on PYTHONPATH: the fuzz scripts import the tests' helpers package.)
    run env PYTHONPATH="$WORK/run/tests" "$VPY" "$@" -max_total_time="$seconds" -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="$WORK/$label-" "$WORK/fuzz-corpus/$label" \
        > "$WORK/fuzz-$label.log" 2>&1
    status=$?
    set -e
    grep -v '^INFO: Instrumenting' "$WORK/fuzz-$label.log" | tail -20
    check_logs "the fuzz target $label"
    if [[ $status -ne 0 ]]; then
        echo "sanitize: the fuzz target $label failed (exit $status); log: $WORK/fuzz-$label.log" >&2
        exit "$status"
    fi
}
if [[ "$FUZZ_SECONDS" != "0" ]]; then
    readers=(safetensors index zip pickle config)
    embed_seconds=$(( (FUZZ_SECONDS + 1) / 2 ))
    reader_seconds=$(( (FUZZ_SECONDS - embed_seconds) / ${#readers[@]} ))
    (( reader_seconds >= 1 )) || reader_seconds=1
    fuzz embed "$embed_seconds" tests/fuzz/fuzz_embed.py
    for target in "${readers[@]}"; do
        fuzz "$target" "$reader_seconds" tests/fuzz/fuzz_checkpoints.py "$target"
    done
fi
echo "== sanitize: all passed"
