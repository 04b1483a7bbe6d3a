#!/usr/bin/env bash
# The README's two commands, exactly as written there, each in a fresh copy of
# the checkout with a fresh virtual environment and nothing else installed:
#
#   1. install, run the demo;
#   2. install with the test extra alone, run the whole suite: a test that
#      needs more (torch, ml_dtypes, onnx, ...) must skip, naming the extra
#      that installs it (tests/helpers/extras.py), never fail.
#
# A fresh copy is what a clone holds: the checkout's tracked files and its new,
# not ignored ones, as they are in the working tree; no build output, no
# .venv, no caches. .ci/run runs this before it installs anything; it runs
# alone too:  bash .ci/readme.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 HF_HUB_OFFLINE=1
unset PYTHONPATH

work="$(mktemp -d "${TMPDIR:-/tmp}/bertembed-readme.XXXXXX")"
trap 'rm -rf "$work"' EXIT

fresh_copy() {  # fresh_copy DEST
    mkdir -p "$1"
    git ls-files -z --cached --others --exclude-standard \
        | while IFS= read -r -d '' f; do
            if [[ -e "$f" || -L "$f" ]]; then printf '%s\0' "$f"; fi  # (deleted, not yet committed: left out)
        done \
        | tar --null -T - -cf - | tar -C "$1" -xf -
}

echo "== README, first command: install and run the demo (fresh copy, fresh venv)"
fresh_copy "$work/demo"
(
    cd "$work/demo"
    python3 -m venv .venv && . .venv/bin/activate && pip install . && bertembed demo
)

echo "== README, second command: the tests with the test extra alone (fresh copy, fresh venv)"
fresh_copy "$work/tests"
(
    cd "$work/tests"
    python3 -m venv .venv && . .venv/bin/activate && pip install ".[test]" && python -m pytest
)
echo "== the README's two commands passed"
