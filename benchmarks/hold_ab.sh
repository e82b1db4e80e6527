#!/usr/bin/env bash
# Does holding a row at k = 0 when its own recent acceptance is below the break-even of its k pay (issue 66)? Two
# servers of the same model and drafter, one with the rule (`--hold-rows`) and one without (the default), each
# started alone, then cold `engines load` passes against them in alternating rounds (hold, no-hold; then no-hold,
# hold), so drift in the sitting lands on both alike. Each pass sends speculation off and the tuner. Run it on a
# quiet machine.
#
#   MODEL=smollm2 DRAFT=smollm2-eagle3 DRAFTER=eagle3 ROUNDS=2 LEVELS=1,2,4,8,16 bash benchmarks/hold_ab.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DB=${DB:-benchmarks/results.db}
MODEL=${MODEL:-smollm2}
DRAFT=${DRAFT:-smollm2-eagle3}
DRAFTER=${DRAFTER:-eagle3}
LEVELS=${LEVELS:-1,2,4,8,16}
ROUNDS=${ROUNDS:-2}
N=${N:-16}
TOKENS=${TOKENS:-64}
CPU=${CPU:-$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)}
TAG="${MODEL} rows held below break-even ($(date -u +%F), ${CPU})"
declare -A FLAG=([hold]="--hold-rows" [no-hold]="")
declare -A PORT=([hold]=8061 [no-hold]=8062)
NAMES=(hold no-hold)
PIDS=()
trap 'kill -TERM "${PIDS[@]}" 2>/dev/null || true' EXIT
for name in "${NAMES[@]}"; do
  # shellcheck disable=SC2086
  "$PY" -m engine serve --target "$MODEL" --draft "$DRAFT" --drafter "$DRAFTER" --dtype bfloat16 --max-batch 16 \
    --k-max 4 ${FLAG[$name]} --port "${PORT[$name]}" --db "$DB" --name "phoenix serve, $name, $TAG" \
    >"/tmp/phoenix-hold-$name.log" 2>&1 &
  PIDS+=($!)
  until curl -sf "http://127.0.0.1:${PORT[$name]}/health" >/dev/null; do
    kill -0 "${PIDS[-1]}" 2>/dev/null || { tail -5 "/tmp/phoenix-hold-$name.log"; exit 1; }
    sleep 1
  done
done
for round in $(seq 1 "$ROUNDS"); do
  for i in 0 1; do
    name=${NAMES[$(((i + round - 1) % 2))]}
    "$PY" -m engine engines load --url "http://127.0.0.1:${PORT[$name]}" --engine phoenix --variants none,auto \
      --concurrency "$LEVELS" --limit "$N" --max-new-tokens "$TOKENS" --db "$DB" \
      --name "$name round $round, $TAG"
  done
done
echo "sitting done: $TAG"
