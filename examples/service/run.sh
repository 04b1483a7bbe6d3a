#!/usr/bin/env bash
# Start the sentence-embedding service.
#
#   run.sh OUT_DIR PORT [WORKERS]
#
# OUT_DIR is the output of export_encoder.py; WORKERS defaults to the number
# of usable cores. gunicorn runs WORKERS uvicorn workers (the uvicorn-worker
# package) and restarts any that dies. --preload imports the app in the
# master: the checkpoint's embedding tables are memory-mapped once there, and
# every worker forked from it shares the same pages. Each worker then creates
# its own ONNX Runtime session (thread pools do not survive a fork).
#
# Environment: HOST (default 127.0.0.1), PYTHON (default python3), and the
# app's SERVICE_* settings (see app.py); SERVICE_DIR and SERVICE_WORKERS are
# set here from the arguments.
set -euo pipefail
if [[ $# -lt 2 || $# -gt 3 ]]; then
    echo "usage: $0 OUT_DIR PORT [WORKERS]" >&2
    exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
out_dir="$(cd "$1" && pwd)"
port="$2"
python="${PYTHON:-python3}"
workers="${3:-$("$python" -c 'import os; print(len(os.sched_getaffinity(0)))')}"
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
