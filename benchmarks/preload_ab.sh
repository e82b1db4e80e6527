#!/usr/bin/env bash
# Does the allocator and OpenMP runtime vLLM preloads on the CPU (tcmalloc, Intel's OpenMP) pay for Phoenix's server
# too (issue 66)? Servers of the same model with different preloads, each started alone (a start-up profile on a
# busy machine lies), then cold `engines load` passes against them in alternating rounds (A B C, B C A, ...), so
# drift in the sitting lands on every server alike. Run it on a quiet machine.
#
#   MODEL=smollm2 ROUNDS=2 LEVELS=4,8,16 bash benchmarks/preload_ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DB=${DB:-benchmarks/results.db}
MODEL=${MODEL:-smollm2}
LEVELS=${LEVELS:-4,8,16}
ROUNDS=${ROUNDS:-2}
N=${N:-16}
TOKENS=${TOKENS:-64}
VARIANTS=${VARIANTS:-none}
TCMALLOC=${TCMALLOC:-/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4}
IOMP=${IOMP:-$HOME/.cache/phoenix/vllm-0.32.0/lib/libiomp5.so}
CPU=${CPU:-$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)}
TAG="${MODEL} preloads ($(date -u +%F), ${CPU})"
declare -A PRELOAD=([plain]="" [tcmalloc]="$TCMALLOC" [tcmalloc+iomp]="$TCMALLOC:$IOMP")
NAMES=(plain tcmalloc tcmalloc+iomp)
declare -A PORT=([plain]=8051 [tcmalloc]=8052 [tcmalloc+iomp]=8053)
PIDS=()
trap 'kill -TERM "${PIDS[@]}" 2>/dev/null || true' EXIT
for name in "${NAMES[@]}"; do
  LD_PRELOAD="${PRELOAD[$name]}" "$PY" -m engine serve --target "$MODEL" --port "${PORT[$name]}" --db "$DB" \
    --name "phoenix serve, preload $name, $TAG" >"/tmp/phoenix-preload-$name.log" 2>&1 &
  PIDS+=($!)
  until curl -sf "http://127.0.0.1:${PORT[$name]}/health" >/dev/null; do
    kill -0 "${PIDS[-1]}" 2>/dev/null || { tail -5 "/tmp/phoenix-preload-$name.log"; exit 1; }
    sleep 1
  done
done
for round in $(seq 1 "$ROUNDS"); do
  for i in 0 1 2; do
    name=${NAMES[$(((i + round - 1) % 3))]}
    "$PY" -m engine engines load --url "http://127.0.0.1:${PORT[$name]}" --engine phoenix --variants "$VARIANTS" \
      --concurrency "$LEVELS" --limit "$N" --max-new-tokens "$TOKENS" --db "$DB" \
      --name "preload $name round $round, $TAG"
  done
done
echo "sitting done: $TAG"
