#!/usr/bin/env bash
# Does a head learn from the server's own traffic (issue 67)? Phoenix's server answers 200 requests of one prompt
# distribution (code edits of Alembic's functions: benchmarks/traffic_prompts.py), `zoo build-head --from-runs`
# fine-tunes the committed head on what that server recorded, and the lab measures the head it started from and the
# new one on 50 requests of the same distribution over functions neither saw (the same prompts, greedy, fp32).
# The figure is acceptance counts, which do not depend on the machine's speed; the served runs' timings do: tag them
# 'disturbed' (python -m engine tag N disturbed) when the sitting ran beside other work.
#
#   bash benchmarks/traffic_sitting.sh            # PHASES=serve,build,measure,elsewhere
#
# Writes into $DB (default benchmarks/results.db); the new head into $OUT (default data/heads/<head>-traffic).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DB=${DB:-benchmarks/results.db}
MODEL=${MODEL:-smollm2}
HEAD=${HEAD:-smollm2-eagle3}
OUT=${OUT:-data/heads/${HEAD}-traffic}
K=${K:-3}
TOKENS=${TOKENS:-128}
CONCURRENCY=${CONCURRENCY:-4}
BUDGET=${BUDGET:-900}
EPOCHS=${EPOCHS:-3}
PORT=${PORT:-8040}
TRAIN=benchmarks/prompts/traffic-alembic-train.jsonl
TEST=benchmarks/prompts/traffic-alembic-test.jsonl
CPU=${CPU:-$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)}
TAG="${MODEL} learning from traffic ($(date -u +%F), ${CPU})"
PHASES=${PHASES:-serve,build,measure,elsewhere}
has() { [[ ",$PHASES," == *",$1,"* ]]; }

if has serve; then
  "$PY" -m engine serve --target "$MODEL" --draft "$HEAD" --drafter eagle3 --port "$PORT" --db "$DB" \
    --name "served traffic (code edits of Alembic, 200 requests), $TAG" >"/tmp/phoenix-traffic-$PORT.log" 2>&1 &
  SERVER=$!
  until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
    kill -0 "$SERVER" 2>/dev/null || { tail -5 "/tmp/phoenix-traffic-$PORT.log"; exit 1; }
    sleep 2
  done
  SERVED=$(curl -sf "http://127.0.0.1:$PORT/health" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["run_id"])')
  "$PY" -m engine engines load --url "http://127.0.0.1:$PORT" --engine phoenix --variants "eagle3-k$K" \
    --prompts "$TRAIN" --limit 200 --concurrency "$CONCURRENCY" --max-new-tokens "$TOKENS" \
    --db "$DB" --name "client of the served traffic, $TAG"
  kill -TERM "$SERVER"; wait "$SERVER" || true
  echo "$SERVED" >/tmp/phoenix-traffic-served
fi
if has build; then
  SERVED=${SERVED:-$(cat /tmp/phoenix-traffic-served)}
  mkdir -p "$(dirname "$OUT")"
  rm -rf "$OUT" && cp -r "models/$HEAD" "$OUT"  # --resume continues the head at --out: a copy of the committed one
  "$PY" -m engine zoo build-head "$MODEL" --resume --out "$OUT" --from-runs "$SERVED" --db "$DB" \
    --humaneval-prompts 0 --spec-bench-prompts 0 --second-turns 0 --code-style-prompts 0 --stdlib-prompts 0 \
    --fixed-text-tokens 0 --epochs "$EPOCHS" --lr 1e-3 --warmup-steps 10 --time-budget-s "$BUDGET" --eval-every 40
fi
if has measure; then
  for head in "models/$HEAD" "$OUT"; do
    "$PY" -m engine bench --target "$MODEL" --draft "$head" --drafter eagle3 --modes "eagle3_$K" --dtype float32 \
      --prompts "$TEST" --limit 50 --max-new-tokens "$TOKENS" --db "$DB" \
      --name "held-out traffic, $(basename "$head"), $TAG"
  done
fi
if has elsewhere; then  # what learning one distribution cost on another: held-out HumanEval, both heads
  for head in "models/$HEAD" "$OUT"; do
    "$PY" -m engine bench --target "$MODEL" --draft "$head" --drafter eagle3 --modes "eagle3_$K" --dtype float32 \
      --prompts humaneval-test --limit 50 --max-new-tokens "$TOKENS" --db "$DB" \
      --name "held-out HumanEval, $(basename "$head"), $TAG"
  done
fi
echo "sitting done: $TAG"
