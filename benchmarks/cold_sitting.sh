#!/usr/bin/env bash
# One sitting of the server comparison on equal terms (issue 65): Phoenix's server, compiled vLLM on every core,
# llama.cpp on its GGUF (phase llamacpp), Phoenix's server again (the drift between its two sweeps bounds the
# sitting's noise), Poisson arrivals on Phoenix and vLLM (phase rates, RATES req/s), vLLM's own client against
# Phoenix's server (the cross-check, both clients sending the same requests), then vLLM's second pass (phase
# vllm2): each engine's two passes alternate (Phoenix, vLLM, Phoenix, vLLM), and the findings' `sitting` block
# pools them; phase A2 sweeps server A a second time (its first sweep against its second). Every sweep is cold
# (engines load's default: a cache_salt per request, so no prompt is one its server has seen), and every row
# records the prompt tokens its server's cache served. Run it on a quiet machine: nothing else on the cores (it
# checks the host's memory read first and after every phase: benchmarks.host_check).
#
#   MODEL=smollm2 HEAD=smollm2-eagle3 bash benchmarks/cold_sitting.sh
#   MODEL=qwen2.5-coder-1.5b HEAD= DRAFT=qwen2.5-coder-0.5b DRAFTER=model SPEC_TYPES=none,ngram-k3 N=8 TOKENS=32 \
#     bash benchmarks/cold_sitting.sh      (Phoenix with its best measured draft there, the 0.5B sibling)
#
# Writes into $DB (default benchmarks/results.db); `python -m engine docs` and `python -m benchmarks.report` then
# regenerate what cites the runs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DB=${DB:-benchmarks/results.db}
MODEL=${MODEL:-smollm2}
HEAD=${HEAD-smollm2-eagle3}  # empty: vLLM's speculating variants take the target's own (none needs it)
DRAFT=${DRAFT:-$HEAD}  # what Phoenix's server drafts with
DRAFTER=${DRAFTER:-eagle3}
LEVELS=${LEVELS:-1,2,4,8,16}
N=${N:-16}
TOKENS=${TOKENS:-64}
GOODPUT=${GOODPUT:-ttft:2000,tpot:200}
PORT=${PORT:-8015}
VARIANTS=${VARIANTS:-none,auto}
SPEC_TYPES=${SPEC_TYPES:-none,eagle3-k3}
LLAMACPP_TYPES=${LLAMACPP_TYPES:-none,ngram-simple-n4-m8}
GGUF=${GGUF:-$MODEL}
RATES=${RATES:-1,2,4}  # Poisson arrivals (phase rates), at most 16 in flight
CPU=${CPU:-$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)}
SITTING=${SITTING:-}  # names a later sitting on the same day (its runs apart from the first's)
TAG="${MODEL} cold protocol${SITTING:+, $SITTING} ($(date -u +%F), ${CPU})"
URL="http://127.0.0.1:${PORT}"
PHASES=${PHASES:-A,vllm,llamacpp,B,rates,cross,vllm2}  # a sitting cut short resumes with the phases it still lacks
has() { [[ ",$PHASES," == *",$1,"* ]]; }

serve_phoenix() {
  "$PY" -m engine serve --target "$MODEL" --draft "$DRAFT" --drafter "$DRAFTER" --dtype bfloat16 --max-batch 16 \
    --k-max 4 --port "$PORT" --db "$DB" --name "phoenix serve $TAG" >"/tmp/phoenix-serve-$PORT.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 600); do
    if curl -sf "$URL/health" >/dev/null; then return 0; fi
    kill -0 "$SERVER" 2>/dev/null || { tail -5 "/tmp/phoenix-serve-$PORT.log"; exit 1; }
    sleep 1
  done
  echo "Phoenix's server did not answer /health"; exit 1
}

phoenix_sweep() {  # $1 names the pass; the rest picks the load
  local name=$1; shift
  "$PY" -m engine engines load --url "$URL" --engine phoenix --variants "$VARIANTS" "$@" \
    --limit "$N" --max-new-tokens "$TOKENS" --goodput "$GOODPUT" --db "$DB" --name "phoenix $name, $TAG"
}

vllm_sweep() {  # VLLM_PASS names a later pass
  "$PY" -m engine engines load --engine vllm --spec-types "$SPEC_TYPES" --target "$MODEL" ${HEAD:+--head "$HEAD"} \
    "$@" --limit "$N" --max-new-tokens "$TOKENS" --goodput "$GOODPUT" --db "$DB" \
    --name "vllm compiled, every core, ${VLLM_PASS:+$VLLM_PASS, }$TAG"
}

# A busy or shared host measures itself (benchmarks.host_check): the sitting starts only where the memory reads near
# the best this CPU recorded (ANYWAY=1 sits regardless), and after each phase a slower read tags that phase's runs
# `disturbed`, the figure in each one's note.
"$PY" -m benchmarks.host_check || [[ -n "${ANYWAY:-}" ]] || { echo "a disturbed host: ANYWAY=1 sits anyway"; exit 3; }
SINCE=$("$PY" -m benchmarks.host_check --db "$DB" --last-run)
checked() {
  "$PY" -m benchmarks.host_check --db "$DB" --tag-since "$SINCE" || true
  SINCE=$("$PY" -m benchmarks.host_check --db "$DB" --last-run)
}

if has A; then
  serve_phoenix
  phoenix_sweep "pass A" --concurrency "$LEVELS"
  # phase A2: a second sweep on the same server, its prompts cold too (the findings' first-sweep block: issue 66)
  if has A2; then phoenix_sweep "pass A, second sweep" --concurrency "$LEVELS"; fi
  kill -TERM "$SERVER"; wait "$SERVER" || true
  checked
fi
if has vllm; then vllm_sweep --concurrency "$LEVELS"; checked; fi
if has llamacpp; then
  "$PY" -m engine engines load --engine llamacpp --spec-types "$LLAMACPP_TYPES" --gguf "$GGUF" \
    --concurrency "$LEVELS" --limit "$N" --max-new-tokens "$TOKENS" --goodput "$GOODPUT" --db "$DB" \
    --name "llama.cpp $GGUF, $TAG"
  checked
fi
if has rates; then vllm_sweep --request-rate "$RATES" --max-concurrency 16; checked; fi
if has B || has rates || has prates || has cross; then
  serve_phoenix
  if has B; then phoenix_sweep "${PASS_B:-pass B}" --concurrency "$LEVELS"; fi  # PASS_B names a later pass (a change measured after)
  # phase prates: Phoenix's rates alone (its settings against each other at a rate: the tuner-rates block)
  if has rates || has prates; then phoenix_sweep "rates" --request-rate "$RATES" --max-concurrency 16; fi
  if has cross; then
    "$PY" -m engine engines crosscheck --url "$URL" --engine phoenix --tokenizer "$MODEL" --concurrency 4 \
      --rounds 2 --limit "$N" --max-new-tokens "$TOKENS" --db "$DB"
  fi
  kill -TERM "$SERVER"; wait "$SERVER" || true
  checked
fi
if has vllm2; then VLLM_PASS="pass 2" vllm_sweep --concurrency "$LEVELS"; checked; fi
echo "sitting done: $TAG"
