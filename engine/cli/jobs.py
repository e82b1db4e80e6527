"""`distill` and `vllm`: thin layers over the training and vLLM library functions."""
from __future__ import annotations

import json

from engine.cli.options import add_db, open_store
from engine.config import add_options, from_args
from engine.train.distill import DistillConfig
from engine.train.evaluate import format_comparison
from engine.train.job import run as run_distill
from engine.vllm.client import level_notes
from engine.vllm.record import SweepConfig, WatchConfig, sweep, watch


def cmd_distill(args) -> int:
    cfg = from_args(DistillConfig, args)
    result = run_distill(cfg, open_store(args.db))  # the job is always recorded: config, losses, before/after runs
    if "evaluation" in result:
        print(format_comparison(result["evaluation"]))
    print(json.dumps({k: v for k, v in result.items() if k != "evaluation"}))
    return 0


def show_level(level: dict) -> None:
    acc = "n/a" if level["acceptance"] is None else f"{level['acceptance']:.1%}"
    print(f"concurrency {level['concurrency']:>4}: {level['throughput_tokens_per_s']:8.1f} tok/s, acceptance {acc}, "
          f"per position " + " ".join("n/a" if r is None else f"{r:.3f}" for r in level["per_position"])
          + (f", {level['failed']} of {level['requests']} requests failed (see the Requests page)" if level.get("failed") else ""))
    for note in level_notes(level):
        print(f"  note: {note}")




def cmd_vllm_sweep(args) -> int:
    run_id = sweep(open_store(args.db), from_args(SweepConfig, args), on_level=show_level)
    print(f"run {run_id} recorded")
    return 0


def cmd_vllm_watch(args) -> int:
    run_id = watch(open_store(args.db), from_args(WatchConfig, args))
    print(f"run {run_id} recorded")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("distill", help="distil the draft on the target's answers (LoRA), merge, optionally evaluate")
    add_options(p, DistillConfig)
    add_db(p)
    p.set_defaults(func=cmd_distill)
    v = sub.add_parser("vllm", help="vLLM as the serving engine: concurrency sweep or live counter watch")
    vsub = v.add_subparsers(dest="vllm_command", required=True)
    s = vsub.add_parser("sweep", help="send the prompts at each concurrency level; scrape vllm:spec_decode_* around each")
    add_options(s, SweepConfig)
    add_db(s)
    s.set_defaults(func=cmd_vllm_sweep)
    w = vsub.add_parser("watch", help="record a live server's spec-decode counters over time as a run (Ctrl-C ends it)")
    add_options(w, WatchConfig)
    add_db(w)
    w.set_defaults(func=cmd_vllm_watch)
