#!/usr/bin/env bash
# Lint, format and type checks: what .pre-commit-config.yaml runs, over the
# whole tree. Needs the "dev" extra (and NumPy) in the active environment.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "-- ruff check";  ruff check .
echo "-- ruff format"; ruff format --check .
echo "-- cython-lint"; cython-lint src/bertembed/_core/_kernel.pyx src/bertembed/_core/_kernel.pxd
echo "-- clang-format"; clang-format --dry-run --Werror src/bertembed/_core/csrc/*.h
for platform in linux win32 darwin; do
    echo "-- mypy --platform $platform"
    mypy --platform "$platform"
done
# The compiled kernel's stub against the module (the bertembed that Python imports: the
# installed one, or PYTHONPATH=src with the kernel built in place).
echo "-- stubtest"; python -m mypy.stubtest bertembed._core._kernel
