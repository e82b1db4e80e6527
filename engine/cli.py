"""`python -m engine ...`: a thin layer over the library functions."""
from __future__ import annotations

import argparse
import json
import sys

from engine.errors import PhoenixError


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default="embedded", help="'embedded', a model directory or a cached HF id")
    p.add_argument("--draft", default="embedded", help="'embedded', a model directory, a cached HF id, or 'none'")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--allow-pickle", action="store_true", help="allow pickle (.bin) weights; only for files you trust")


def _draft_arg(value: str) -> str | None:
    return None if value in ("none", "") else value


def cmd_generate(args) -> int:
    from engine.models import load_pair
    from engine.prompts import check_prompt
    from engine.runner import Decoder, check_k, stats_dict

    check_prompt(args.prompt)
    check_k(args.k)
    draft = _draft_arg(args.draft) if args.drafter != "ngram" else None
    pair = load_pair(args.target, draft, args.device, args.dtype, args.allow_pickle)
    dec = Decoder(pair)
    ids = dec.encode(args.prompt)
    dec.run(ids, args.k, min(args.max_new_tokens, 8), args.drafter)  # warm-up, excluded
    stats = dec.run(ids, args.k, args.max_new_tokens, args.drafter)
    out = stats_dict(stats, dec.text(stats))
    if args.json:
        print(json.dumps(out))
        return 0
    print(out["output_text"])
    print("---")
    acc = "n/a" if out["acceptance"] is None else f"{out['acceptance']:.1%}"
    print(f"k={args.k} drafter={args.drafter} tokens={out['output_tokens']} passes={out['passes']} "
          f"accepted/proposed={out['accepted']}/{out['proposed']} ({acc}) "
          f"latency={out['latency_s']:.3f}s tok/s={out['tokens_per_s']:.1f} "
          f"draft={out['draft_s']:.3f}s verify={out['verify_s']:.3f}s")
    for row in out["per_position"]:
        rate = row["accepted"] / row["proposed"] if row["proposed"] else 0
        print(f"  position {row['position']}: {row['accepted']}/{row['proposed']} ({rate:.1%})")
    return 0


def cmd_zoo_build(args) -> int:
    from engine.zoo import build, config_from_args

    overrides = dict(kv.split("=", 1) for kv in args.set)
    from engine.zoo import ZooConfig
    import dataclasses

    types = {f.name: f.type for f in dataclasses.fields(ZooConfig)}
    cast = {"int": int, "float": float, "str": str}
    cfg = config_from_args({k: cast.get(types.get(k, "str"), str)(v) for k, v in overrides.items()})
    if args.out:
        cfg.out = args.out
    if getattr(args, "stage", None) == "distill-draft":
        from engine.zoo import distill_draft_on_answers

        print(json.dumps(distill_draft_on_answers(cfg)))
        return 0
    print(json.dumps(build(cfg)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine", description="Phoenix speculative-decoding engine")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="decode one prompt and print the text and stats")
    _add_model_args(g)
    g.add_argument("--drafter", default="model", choices=["model", "ngram", "hf"])
    g.add_argument("--k", type=int, default=4)
    g.add_argument("--max-new-tokens", type=int, default=64)
    g.add_argument("--prompt", default="def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n")
    g.add_argument("--json", action="store_true", help="print exactly one JSON object")
    g.set_defaults(func=cmd_generate)

    z = sub.add_parser("zoo", help="the embedded default model pair")
    zsub = z.add_subparsers(dest="zoo_command", required=True)
    zb = zsub.add_parser("build", help="retrain tokenizer, target and draft from the stdlib")
    zb.add_argument("--out", default=None)
    zb.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a ZooConfig field")
    zb.set_defaults(func=cmd_zoo_build)
    zd = zsub.add_parser("distill-draft", help="only the last stage: retrain the draft on the target's answers")
    zd.add_argument("--out", default=None)
    zd.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a ZooConfig field")
    zd.set_defaults(func=cmd_zoo_build, stage="distill-draft")

    from engine import cli_jobs, cli_runs

    cli_runs.add_commands(sub)
    cli_jobs.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except PhoenixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except Exception as exc:
        from db.store import StoreError

        if not isinstance(exc, StoreError):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
