#!/usr/bin/env bash
# Start the sentence-embedding service.
#
#   run.sh OUT_DIR PORT [WORKERS] [--threads N] [--max-batch-tokens N] [--max-wait-ms MS]
#          [--max-request-tokens N] [--batch-size N]
#
# OUT_DIR is the output of export_encoder.py or from_onnx.py. WORKERS defaults
# to 1, whose encoder then gets every usable core (SERVICE_THREADS): one
# batcher sees every request. With more workers each batches only the requests
# of the connections it happened to accept (keep-alive clients stay on one
# worker), so the load can sit on one of them while the others idle; see
# README.md, "Workers and threads". gunicorn runs WORKERS uvicorn workers (the
# uvicorn-worker package) and restarts any that dies. --preload imports the
# app in the master: the checkpoint's embedding tables are memory-mapped once
# there, and every worker forked from it shares the same pages. Each worker
# then creates its own ONNX Runtime session and batcher thread (thread pools
# do not survive a fork).
#
# The options set the app's SERVICE_* settings of the same names (see app.py):
# --threads SERVICE_THREADS, --max-batch-tokens SERVICE_MAX_BATCH_TOKENS,
# --max-wait-ms SERVICE_MAX_WAIT_MS, --max-request-tokens
# SERVICE_MAX_REQUEST_TOKENS, --batch-size SERVICE_BATCH_SIZE.
# Environment: HOST (default 127.0.0.1), PYTHON (default python3), and the
# other SERVICE_* settings; SERVICE_DIR and SERVICE_WORKERS are set here.
set -euo pipefail
usage() {
    echo "usage: $0 OUT_DIR PORT [WORKERS] [--threads N] [--max-batch-tokens N] [--max-wait-ms MS]" \
        "[--max-request-tokens N] [--batch-size N]" >&2
    exit 2
}
positional=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --threads) export SERVICE_THREADS="${2:?}"; shift 2 ;;
        --max-batch-tokens) export SERVICE_MAX_BATCH_TOKENS="${2:?}"; shift 2 ;;
        --max-wait-ms) export SERVICE_MAX_WAIT_MS="${2:?}"; shift 2 ;;
        --max-request-tokens) export SERVICE_MAX_REQUEST_TOKENS="${2:?}"; shift 2 ;;
        --batch-size) export SERVICE_BATCH_SIZE="${2:?}"; shift 2 ;;
        -h|--help) usage ;;
        --*) echo "$0: unknown option $1" >&2; usage ;;
        *) positional+=("$1"); shift ;;
    esac
done
if [[ ${#positional[@]} -lt 2 || ${#positional[@]} -gt 3 ]]; then
    usage
fi
here="$(cd "$(dirname "$0")" && pwd)"
out_dir="$(cd "${positional[0]}" && pwd)"
port="${positional[1]}"
python="${PYTHON:-python3}"
workers="${positional[2]:-1}"
if [[ ! -f "$out_dir/service.json" ]]; then
    echo "$0: $out_dir/service.json not found; run export_encoder.py MODEL_DIR $out_dir first" >&2
    exit 2
fi
export SERVICE_DIR="$out_dir" SERVICE_WORKERS="$workers"
exec "$python" -m gunicorn "app:create_app()" \
    --chdir "$here" \
    --preload \
    --workers "$workers" \
    --worker-class uvicorn_worker.UvicornWorker \
    --bind "${HOST:-127.0.0.1}:$port" \
    --timeout 60 \
    --graceful-timeout 10 \
    --keep-alive 5 \
    --no-control-socket
