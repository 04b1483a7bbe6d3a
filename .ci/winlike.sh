#!/usr/bin/env bash
# The tests that touch what differs on Windows, run on Linux the way Windows'
# Python sees bertembed (.ci/winlike/winlike.py): the POSIX-only attributes
# of os and signal and the POSIX-only modules taken away from bertembed and
# its tests, no fork start method, Windows' rule for mapped files (no
# replacing, renaming, deleting or truncating a file a process of the run
# maps), and a cp1252 standard output and error (a Windows console's legacy
# code page), which the processes the tests start inherit.
#
#   bash .ci/winlike.sh [PYTEST_ARGS...]     # with the active environment's python
#   bash .ci/winlike.sh --ci [PYTEST_ARGS...] # the bounded subset .ci/run runs (step 7)
#
# The subset: the checkpoint readers and writers, the command line, the ONNX
# splitter (it writes into served directories), the documentation examples
# (docstrings and pages), and the kernel-runtime tests
# that depend on the OS (CPUs, fork, threads, pool, the big table, leaks).
# Not here: the numeric tests (the same on every OS), tests/fuzz/ and
# tests/examples/ and tests/serve/ (the server runs gunicorn: POSIX only; see docs/building.rst).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/.."
PY="${PYTHON:-python}"
TESTS=(tests/checkpoints tests/cli tests/onnx_split tests/docs tests/core/runtime/test_cpus.py
    tests/core/runtime/test_fork.py tests/core/runtime/test_threads.py tests/core/runtime/test_pool.py
    tests/core/tables/test_big_table.py tests/core/runtime/test_leaks.py tests/core/kernel/test_unbuilt_import.py
    tests/core/kernel/test_kernel_paths.py)
# The bounded subset (.ci/run, step 7; a few minutes on two cores): the
# checkpoint readers and writers, the command line less its benchmark and
# transformers comparisons, the per-case time bound of the fuzz targets
# without SIGALRM, spawned workers, fork's absence, CPUs and the big table.
CI_TESTS=(tests/checkpoints/test_weights_open.py tests/checkpoints/test_weights_safetensors.py
    tests/checkpoints/test_weights_sharded.py tests/checkpoints/test_weights_limits.py
    tests/checkpoints/test_save_pretrained.py tests/checkpoints/test_safetensors_writer.py
    tests/checkpoints/test_pretrained.py tests/cli/test_cli_convert.py tests/cli/test_cli_trim.py
    tests/cli/test_cli.py tests/core/runtime/test_spawn.py tests/core/runtime/test_fork.py
    tests/core/runtime/test_cpus.py tests/core/tables/test_big_table.py tests/fuzz/test_fuzz_checkpoints_quick.py
    -k "not bench and not matches_transformers and not mutated_inputs")
if [[ "${1:-}" == --ci ]]; then
    shift
    TESTS=("${CI_TESTS[@]}" "$@")
elif [[ $# -gt 0 ]]; then
    TESTS=("$@")
fi
# tests/ on PYTHONPATH: winlike.py imports helpers.windows in every process it applies to.
BERTEMBED_WINLIKE=1 PYTHONIOENCODING=cp1252 PYTHONPATH="$here/winlike:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}" \
    "$PY" -m pytest -q -p no:cacheprovider -p winlike "${TESTS[@]}"
