"""Bandit regret: every policy against the best fixed arm in hindsight, in one run.

All fixed arms and all policies decode the same held-out prompts, interleaved per
prompt, and every request is recorded in the store, so the Policies page shows
the same run. Regret per request is measured against the best fixed arm's
tokens/sec on the same prompt.

    python -m benchmarks.regret [--limit 50] [--max-new-tokens 96] [--policies ...]
    python -m benchmarks.regret --target smollm2 --draft smollm2-draft --tag smollm2 --limit 20 --policies ...
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from benchmarks.common import RESULTS, write
from db import queries
from db.migrate import ensure_schema
from db.store import Store
from engine.bench.config import BenchConfig
from engine.policies.wrappers import FallbackConfig
from engine.bench.run import execute
from engine.bench.setup import create_run
from engine.analysis.regret import best_fixed, policy_table, regret_curves

POLICIES = ["epsilon_greedy", "ucb1", "thompson", "model_based", "model_based:pass", "ema_hysteresis",
            "ema_hysteresis:pass", "contextual_model_based"]


def parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--target", default="embedded")
    p.add_argument("--draft", default="embedded")
    p.add_argument("--prompts", default="humaneval-test")
    p.add_argument("--limit", type=int, default=50, help="the held-out HumanEval split has 50 prompts")
    p.add_argument("--max-new-tokens", type=int, default=96)
    p.add_argument("--arms", default="0,2,4,6,8")
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--fallback", action="store_true")
    p.add_argument("--drafter", default="model", help="model | ngram: what the fixed arms and the bandits draft with")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--tag", default="", help="results are named <tag>_regret (the README's real-pair sections)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--db", default=None, help="defaults to PHOENIX_DB, else a temporary file")
    p.add_argument("--out", default=str(RESULTS))
    return p.parse_args(argv)


def config(args) -> BenchConfig:
    arms = [int(a) for a in args.arms.split(",")]
    fixed = ["target"] + [f"fixed_{k}" for k in arms if k]
    bandits = [f"bandit:{p}" for p in args.policies.split(",") if p]
    return BenchConfig(target=args.target, draft=args.draft, prompts=args.prompts, limit=args.limit,
                       max_new_tokens=args.max_new_tokens, modes=fixed + bandits, arms=arms, seed=args.seed,
                       fallback=FallbackConfig(enabled=args.fallback), name=f"regret benchmark {args.tag}".strip(), device="cpu",
                       dtype=args.dtype, drafter=args.drafter)


def summarise(store: Store, run_id: int) -> dict:
    frame = queries.policy_frame(store, run_id)
    best = best_fixed(frame)
    table = policy_table(frame, best)
    curves = regret_curves(frame, best)
    final = curves.groupby("mode")["cumulative regret"].last().to_dict()
    curve = {m: g["cumulative regret"].round(3).tolist() for m, g in curves.groupby("mode")}
    ks = {m: g["k"].tolist() for m, g in curves.groupby("mode")}
    return {"best_fixed": best, "table": table.to_dict(orient="records"), "final_cumulative_regret": final,
            "cumulative_regret": curve, "chosen_k": ks}


def main(argv=None) -> None:
    args = parse(argv)
    url = args.db or os.environ.get("PHOENIX_DB") or f"sqlite:///{Path(tempfile.mkdtemp()) / 'regret.db'}"
    ensure_schema(url)
    store = Store(url)
    cfg = config(args)
    run = create_run(store, cfg)
    t0 = time.perf_counter()
    status = execute(store, run.id, cfg, progress=True)
    wall = time.perf_counter() - t0
    summary = summarise(store, run.id)
    path = write(f"{args.tag}_regret" if args.tag else "regret", {"settings": {k: v for k, v in vars(args).items() if k != "db"}, "run_id": run.id,
                            "status": status, "wall_s": wall, **summary}, Path(args.out))
    print(f"best fixed arm in hindsight: {summary['best_fixed']}  (run #{run.id}, {wall:.0f} s)")
    print(f"{'mode':<32}{'n':>4}{'tok/s':>9}{'share':>8}{'mean k':>8}{'p':>9}  verdict")
    for r in summary["table"]:
        p = "" if r["p-value"] is None else f"{r['p-value']:.4f}"
        print(f"{r['mode']:<32}{r['n']:>4}{r['tokens/s']:>9.2f}{r['share of best fixed']:>8.3f}{r['mean k']:>8.2f}{p:>9}  {r['verdict']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
