"""`python -m engine distill` and `python -m engine vllm`: thin layers over the library functions."""
from __future__ import annotations

import json

from engine.config import add_options, from_args

DISTILL_HELP = {"target": "teacher: 'embedded', a model directory or a cached HF id", "draft": "the draft to distil",
                "prompts": "humaneval-train or a JSONL file; the held-out test split is refused",
                "out": "output model directory (default models/<draft>-distilled; it shows up in the dashboard's model list)",
                "eval": "benchmark the held-out test prompts with the original and the distilled draft, side by side"}


def add_commands(sub) -> None:
    from engine.backends.vllm_run import SweepConfig, WatchConfig
    from engine.cli_runs import _db_arg
    from engine.distill import DistillConfig

    p = sub.add_parser("distill", help="distil the draft on the target's answers (LoRA), merge, optionally evaluate")
    add_options(p, DistillConfig, DISTILL_HELP)
    _db_arg(p)
    p.set_defaults(func=cmd_distill)
    v = sub.add_parser("vllm", help="vLLM as the serving engine: concurrency sweep or live counter watch")
    vsub = v.add_subparsers(dest="vllm_command", required=True)
    s = vsub.add_parser("sweep", help="send the prompts at each concurrency level; scrape vllm:spec_decode_* around each")
    add_options(s, SweepConfig)
    _db_arg(s)
    s.set_defaults(func=cmd_vllm_sweep)
    w = vsub.add_parser("watch", help="record a live server's spec-decode counters over time as a run (Ctrl-C ends it)")
    add_options(w, WatchConfig)
    _db_arg(w)
    w.set_defaults(func=cmd_vllm_watch)


def cmd_distill(args) -> int:
    from engine.cli_runs import open_store
    from engine.distill import DistillConfig
    from engine.distill_run import run

    cfg = from_args(DistillConfig, args)
    result = run(cfg, open_store(args.db))  # the job is always recorded: config, losses, before/after runs
    if "evaluation" in result:
        from engine.distill_eval import format_comparison

        print(format_comparison(result["evaluation"]))
    print(json.dumps({k: v for k, v in result.items() if k != "evaluation"}))
    return 0


def cmd_vllm_sweep(args) -> int:
    from engine.backends.vllm_run import SweepConfig, sweep
    from engine.cli_runs import open_store

    def show(level: dict) -> None:
        acc = "n/a" if level["acceptance"] is None else f"{level['acceptance']:.1%}"
        print(f"concurrency {level['concurrency']:>4}: {level['throughput_tokens_per_s']:8.1f} tok/s, acceptance {acc}, "
              f"per position " + " ".join("n/a" if r is None else f"{r:.3f}" for r in level["per_position"]))

    run_id = sweep(open_store(args.db), from_args(SweepConfig, args), on_level=show)
    print(f"run {run_id} recorded")
    return 0


def cmd_vllm_watch(args) -> int:
    from engine.backends.vllm_run import WatchConfig, watch
    from engine.cli_runs import open_store

    run_id = watch(open_store(args.db), from_args(WatchConfig, args))
    print(f"run {run_id} recorded")
    return 0
