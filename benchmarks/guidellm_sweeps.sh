#!/usr/bin/env bash
# GuideLLM's own sweep against Phoenix's server and against compiled vLLM on the same cores (issue 69), each
# imported as a sweep of its own, so the Sweeps page draws the two engines on one picture through a client neither
# wrote. Cold as GuideLLM sends it: synthetic prompts drawn afresh for every request (no prefix shared beyond the
# chat template). Run it on a quiet machine, one server at a time.
#
#   GUIDELLM=~/.cache/phoenix/tools/guidellm/bin/guidellm MODEL=smollm2 bash benchmarks/guidellm_sweeps.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
DB=${DB:-benchmarks/results.db}
MODEL=${MODEL:-smollm2}
GUIDELLM=${GUIDELLM:-$HOME/.cache/phoenix/tools/guidellm/bin/guidellm}
STREAMS=${STREAMS:-1,2,4,8}
N=${N:-16}
IN=${IN:-256}
OUT=${OUT:-64}
CPU=${CPU:-$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)}
HW="$CPU, 2 cores"
WORK=$(mktemp -d)
SERVER=
trap 'if [ -n "$SERVER" ]; then kill -TERM $SERVER 2>/dev/null || true; fi; "$PY" -m engine vllm stop --port 8082 >/dev/null 2>&1 || true' EXIT
TOK=$("$PY" -c "from engine.engines.vllm import model_dir; print(model_dir('$MODEL', 'target', '--target'))")
served() { curl -s "$1/v1/models" | "$PY" -c "import json,sys; print(json.load(sys.stdin)['data'][0]['id'])"; }
sweep() {  # URL MODEL_NAME FILE
  HF_HUB_OFFLINE=1 "$GUIDELLM" run --backend "kind=openai_http,target=$1,model=$2" \
    --profile kind=concurrent,streams=1 --override profile.streams "$STREAMS" --constraint "kind=max_requests,count=$N" \
    --data "kind=synthetic_text,prompt_tokens=$IN,output_tokens=$OUT" --tokenizer "kind=hf_auto,model=$TOK" \
    --output "kind=json,path=$3" --disable-console
}
ENGINES=${ENGINES:-phoenix,vllm}
if [[ ",$ENGINES," == *",phoenix,"* ]]; then
"$PY" -m engine serve --target "$MODEL" --port 8081 --db "$DB" \
  --name "phoenix serve for GuideLLM's sweep, $MODEL ($(date -u +%F), $CPU)" >"$WORK/phoenix.log" 2>&1 &
SERVER=$!
until curl -sf http://127.0.0.1:8081/health >/dev/null; do kill -0 $SERVER || exit 1; sleep 1; done
sweep http://127.0.0.1:8081 "$(served http://127.0.0.1:8081)" "$WORK/phoenix.json"
kill -TERM $SERVER; wait $SERVER || true
SERVER=
"$PY" -m engine import "$WORK/phoenix.json" --engine phoenix --variant auto --hardware "$HW" --db "$DB" \
  --name "GuideLLM sweep of Phoenix's server ($MODEL, its defaults)"
fi
[[ ",$ENGINES," == *",vllm,"* ]] || exit 0
"$PY" -m engine vllm start --target "$MODEL" --port 8082
sweep http://127.0.0.1:8082 "$(served http://127.0.0.1:8082)" "$WORK/vllm.json"
"$PY" -m engine vllm stop --port 8082
"$PY" -m engine import "$WORK/vllm.json" --engine vllm --variant none --hardware "$HW" --db "$DB" \
  --name "GuideLLM sweep of compiled vLLM ($MODEL, both cores, no speculation)"
cp "$WORK"/*.json /tmp/ 2>/dev/null || true
