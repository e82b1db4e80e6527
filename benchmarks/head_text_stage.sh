#!/usr/bin/env bash
# A stage of the committed SmolLM2 head on issue 67's recipe: most of its data teacher-forced over code already on
# the machine (`--text`: installed packages' source, never Alembic, whose functions the traffic check holds out),
# plus a slice of the target's own answers (HumanEval's train split and standard-library functions asked about in
# chat); then the lab measures it against the committed head on held-out HumanEval and on code prompts neither saw
# (benchmarks/prompts/traffic-alembic-test.jsonl), greedy, fp32. Acceptance counts do not depend on the machine's
# speed; the build's time does, and is in the card.
#
#   bash benchmarks/head_text_stage.sh            # PHASES=build,measure
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DB=${DB:-benchmarks/results.db}
MODEL=${MODEL:-smollm2}
HEAD=${HEAD:-smollm2-eagle3}
OUT=${OUT:-data/heads/${HEAD}-text}
K=${K:-3}
TOKENS=${TOKENS:-128}
BUDGET=${BUDGET:-900}
FIXED=${FIXED:-150000}
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
TEXT=${TEXT:-$SITE/requests,$SITE/click,$SITE/jinja2}
CPU=${CPU:-$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)}
TAG="${MODEL} head on text ($(date -u +%F), ${CPU})"
PHASES=${PHASES:-build,measure}
has() { [[ ",$PHASES," == *",$1,"* ]]; }

if has build; then
  mkdir -p "$(dirname "$OUT")"
  rm -rf "$OUT" && cp -r "models/$HEAD" "$OUT"  # --resume continues the head at --out: a copy of the committed one
  /usr/bin/time -v "$PY" -m engine zoo build-head "$MODEL" --resume --out "$OUT" --text "$TEXT" \
    --fixed-text-tokens "$FIXED" --humaneval-prompts 114 --spec-bench-prompts 0 --second-turns 0 \
    --code-style-prompts 120 --stdlib-prompts 0 --epochs 2 --lr 5e-4 --warmup-steps 10 --time-budget-s "$BUDGET" \
    --eval-every 60
fi
if has measure; then
  for head in "models/$HEAD" "$OUT"; do
    "$PY" -m engine bench --target "$MODEL" --draft "$head" --drafter eagle3 --modes "eagle3_$K" --dtype float32 \
      --prompts humaneval-test --limit 50 --max-new-tokens "$TOKENS" --db "$DB" \
      --name "held-out HumanEval, $(basename "$head"), $TAG"
  done
  "$PY" -m engine bench --target "$MODEL" --draft "$OUT" --drafter eagle3 --modes "eagle3_$K" --dtype float32 \
    --prompts benchmarks/prompts/traffic-alembic-test.jsonl --limit 50 --max-new-tokens "$TOKENS" --db "$DB" \
    --name "unseen code (Alembic edits), $(basename "$OUT"), $TAG"
fi
echo "stage done: $TAG"
