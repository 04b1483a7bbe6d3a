#!/usr/bin/env bash
# Make a virtual environment with text-embeddings-inference-client, the client
# generated from Text Embeddings Inference's OpenAPI schema, and print its
# Python. It pins httpx < 0.26, which the service's other clients cannot use,
# so it gets an environment of its own; the service's tests run it there
# (tests/serve/test_service_clients.py reads BERTEMBED_TEI_CLIENT_PYTHON).
#
#   export BERTEMBED_TEI_CLIENT_PYTHON="$(bash .ci/tei-client.sh)"
set -euo pipefail
DEST="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/bertembed/tei-client-venv}"
PIN="text-embeddings-inference-client==0.1.0"
if ! "$DEST/bin/python" -c "import text_embeddings_inference_client" 2>/dev/null; then
    rm -rf "$DEST"
    "${PYTHON:-python3}" -m venv "$DEST" >&2
    "$DEST/bin/pip" install -q --disable-pip-version-check "$PIN" >&2
fi
echo "$DEST/bin/python"
