#!/usr/bin/env bash
# One sitting that judges the fleet plan where it can fail (issue 65): a source replica measured on its own (a
# server no fleet uses, other prompts, closed-loop concurrency, every prompt cold), then fleets of 1 and 2 replicas
# behind vllm-router at Poisson rates past what one replica serves, each pass's requests sharing a deployment's
# system prompt (`--cache system`: one cache_salt a pass, so the replicas' prefix caches serve the system prompt
# and nothing an earlier pass sent). Then `fleet plan --validate` prices each measured pass from the source alone and
# keeps its prediction, the naive guess and both errors in the load run. Run it on a quiet machine. The calibN
# phases measure sources of the fleets' own shape (a calibration fleet on other prompts): `fleet plan --source`
# with their replicas' runs prices each fleet from a replica that ran as its replicas will.
#
#   MODEL=smollm2 bash benchmarks/fleet_sitting.sh
#
# Writes into $DB (default benchmarks/results.db).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DB=${DB:-benchmarks/results.db}
MODEL=${MODEL:-smollm2}
DRAFTER=${DRAFTER:-ngram}
VARIANTS=${VARIANTS:-none,ngram-k4}
RATES=${RATES:-1,2,4}
N=${N:-32}
TOKENS=${TOKENS:-64}
BATCH=${BATCH:-8}
SYSTEM=${SYSTEM:-benchmarks/prompts/system-500.txt}
PORT=${PORT:-8030}
CPU=${CPU:-$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)}
LABEL=${LABEL:-}  # told apart from another sitting of the same day (repeated passes: RATES=4,4,4 LABEL=repeats)
TAG="${MODEL} fleet plan check${LABEL:+, $LABEL} ($(date -u +%F), ${CPU})"
SERVE=(--target "$MODEL" --draft none --drafter "$DRAFTER" --dtype bfloat16 --max-batch "$BATCH")
PHASES=${PHASES:-source,source1,calib1,calib2,1,2}
has() { [[ ",$PHASES," == *",$1,"* ]]; }

# the source replica on its own, on both cores (source) and on one thread (source1: what each of 2 replicas on
# these 2 cores runs with, so the plan prices them from their own measurement, not a 2x scaling)
for phase in source source1; do
  has "$phase" || continue
  threads=$([ "$phase" = source1 ] && echo 1 || nproc)
  OMP_NUM_THREADS=$threads "$PY" -m engine serve "${SERVE[@]}" --port "$PORT" --db "$DB" \
    --name "source replica ($threads thread(s)), $TAG" >"/tmp/phoenix-source-$PORT.log" 2>&1 &
  SERVER=$!
  until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
    kill -0 "$SERVER" 2>/dev/null || { tail -5 "/tmp/phoenix-source-$PORT.log"; exit 1; }
    sleep 1
  done
  "$PY" -m engine engines load --url "http://127.0.0.1:$PORT" --engine phoenix --variants "$VARIANTS" \
    --prompts humaneval-train --limit 16 --concurrency 1,2,4,8 --max-new-tokens "$TOKENS" --system-prompt "$SYSTEM" \
    --db "$DB" --name "source sweep ($threads thread(s)), $TAG"
  kill -TERM "$SERVER"; wait "$SERVER" || true
done
# a fleet of n replicas at the rates: calibN on the training prompts (its replicas are sources of the fleet's own
# shape: each shares the cores with its neighbour, the router and the client, as a measured replica does, and none
# of them serves a measured pass), n on the held-out prompts (the passes the plan is judged on)
fleet() {
  local n=$1 prompts=$2 label=$3
  "$PY" -m engine fleet start --replicas "$n" --router round_robin --port "$PORT" "${SERVE[@]}" --db "$DB" \
    --name "${label}fleet of $n, plan check $(date -u +%F)"
  "$PY" -m engine engines load --url "http://127.0.0.1:$PORT" --engine phoenix --variants "$VARIANTS" \
    --prompts "$prompts" --limit "$N" --request-rate "$RATES" --max-new-tokens "$TOKENS" --cache system \
    --system-prompt "$SYSTEM" --db "$DB" --name "${label}through the router: $n replica(s), $TAG" || true
  "$PY" -m engine fleet stop --port "$PORT"
}
for n in 1 2; do
  if has "calib$n"; then fleet "$n" humaneval-train "calibration "; fi
  if has "$n"; then fleet "$n" humaneval-test ""; fi
done
echo "sitting done: $TAG"
