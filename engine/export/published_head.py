"""The EAGLE-3 head's build stages as its card keeps them (``phoenix_card.json``'s ``stages``, written by ``zoo
build-head``): docs/engine.md's stage table is generated from the card, so a stage's time, steps and held-out
agreement cannot drift from what the build recorded."""

from __future__ import annotations

import json

from engine.errors import PhoenixError
from engine.paths import ROOT


def _card(folder: str) -> dict:
    path = ROOT / folder / "phoenix_card.json"
    if not path.is_file():
        raise PhoenixError(f"head-stages: no card at {path}")
    return json.loads(path.read_text(encoding="utf-8"))


def _curve(values) -> str:
    return " / ".join(f"{v:.3f}" for v in values) if values else "not recorded"


def head_stages(fig, args: str) -> str:
    """ARGS: ``FOLDER`` (a head's folder under the repository). One row per stage and held-out source: when it
    finished, its training steps and why it stopped, its minutes (answering, fixed or teacher-forced text, training),
    and held-out top-1 agreement per unroll step before and after the stage (the card's ``held_out``)."""
    stages = _card(args.strip()).get("stages") or []
    if not stages:
        raise PhoenixError(f"head-stages: the card in {args.strip()} lists no stages")
    lines = [
        "| stage | finished | steps (stopped by) | minutes: answers / text / training | held-out source "
        "| top-1 per unroll step, before | after |",
        "|---|---|---|---|---|---|---|",
    ]
    for stage in stages:
        seconds = stage.get("seconds") or {}
        minutes = " / ".join(f"{seconds.get(k, 0.0) / 60:.1f}" for k in ("answers", "fixed_text", "training"))
        finished = str(stage.get("finished"))[:10] if stage.get("finished") else "not recorded"
        head = (
            f"| {stage.get('stage')} | {finished} | "
            f"{stage.get('steps')} ({stage.get('stopped') or 'not recorded'}) | {minutes} |"
        )
        for source, held in (stage.get("held_out") or {}).items():
            lines.append(f"{head} {source} | {_curve(held.get('before'))} | {_curve(held.get('after'))} |")
            head = "| | | | |"  # the stage's own cells once, its sources beneath
    return "\n" + "\n".join(lines) + "\n"


def head_vocab(fig, args: str) -> str:
    """ARGS: ``FOLDER``. The draft vocabulary's coverage as the card's last stage measured it, one sentence."""
    v = _card(args.strip()).get("draft_vocab") or {}
    if not v.get("size") or not v.get("answer_tokens"):
        raise PhoenixError(f"head-vocab: the card in {args.strip()} records no draft vocabulary coverage")
    covered = (v.get("coverage") or {}).get(str(v["size"]))
    said = f"the last stage's {v['answer_tokens']:,} answer tokens use {v.get('distinct', 0):,} distinct ids"
    if covered is not None:
        said += f"; the head's {v['size']:,} rows cover {covered:.1%} of those tokens"
    if v.get("text_tokens") and v.get("text_coverage") is not None:
        said += f" and {v['text_coverage']:.1%} of its {v['text_tokens']:,} text tokens"
    return said
