"""`distill`: a thin layer over the training functions. The other engines' commands are in engine.cli.engines."""

from __future__ import annotations

import json

from engine.cli.options import add_db, open_store
from engine.config import add_options, from_args
from engine.train.config import DistillConfig


def cmd_distill(args) -> int:
    from engine.train.evaluate import format_comparison  # lazy: torch, kept off --help
    from engine.train.job import run as run_distill  # lazy: torch, kept off --help

    cfg = from_args(DistillConfig, args)
    result = run_distill(cfg, open_store(args.db))  # the job is always recorded: config, losses, before/after runs
    if "evaluation" in result:
        print(format_comparison(result["evaluation"]))
    print(json.dumps({k: v for k, v in result.items() if k != "evaluation"}))
    return 0


def _command(parent, name: str, help_text: str, config, func, db: bool = True):
    """A subcommand whose flags come from ``config`` (a dataclass), with --db where it writes runs."""
    p = parent.add_parser(name, help=help_text)
    add_options(p, config)
    if db:
        add_db(p)
    p.set_defaults(func=func)
    return p


def add_commands(sub) -> None:
    _command(
        sub,
        "distill",
        "distil the draft on the target's answers (LoRA), merge, optionally evaluate",
        DistillConfig,
        cmd_distill,
    )
