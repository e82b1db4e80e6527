"""A head that learns from traffic (issue 67): the prompts and outputs a Phoenix server or a lab run recorded are the
target's own text (on-policy, what the head will be asked to draft), so `zoo build-head --from-runs 12,15:0.8`
teacher-forces the target over them, ahead of the fixed text. ``RUN:SHARE`` keeps a run's first SHARE of its
answered requests by arrival (its ``seq``), so the rest can measure the head on what it never saw. Only runs of the
head's own target are taken; warm-ups, failed and empty answers are left out; the head's card keeps which runs and
requests it learned from (its lineage)."""

from __future__ import annotations

import math

from db.connect import resolve_url
from db.store import Store
from engine.catalog import model_name
from engine.decode.decoder import format_prompt
from engine.errors import PhoenixError


def parse(spec: str) -> list[tuple[int, float]]:
    """``12,15:0.8`` -> [(12, 1.0), (15, 0.8)]; one line for anything else."""
    out = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        run, _, share = part.partition(":")
        try:
            run_id, kept = int(run), float(share) if share else 1.0
        except ValueError:
            raise PhoenixError(f"--from-runs {part!r}: give RUN or RUN:SHARE (12 or 12:0.8)") from None
        if run_id < 1 or not 0.0 < kept <= 1.0:
            raise PhoenixError(f"--from-runs {part!r}: a run id >= 1, and a share in (0, 1]")
        out.append((run_id, kept))
    return out


def store_of(cfg) -> Store:
    return Store(resolve_url(cfg.db or None))


def check(cfg, store: Store) -> None:
    """Every run of --from-runs exists, finished, and served the head's target: refused before any work."""
    for run_id, _ in parse(cfg.from_runs):
        run = store.get_run(run_id)
        if run is None:
            raise PhoenixError(f"--from-runs: no run #{run_id} in {store.url.split('///')[-1]}")
        if model_name(run.target) != model_name(cfg.target):
            raise PhoenixError(
                f"--from-runs: run #{run_id} decoded {model_name(run.target)}, not the head's target "
                f"{model_name(cfg.target)}: a head learns only its own target's text"
            )


def recorded(cfg, tokenizer, store: Store) -> tuple[list[list[int]], dict]:
    """Each kept request as prompt + output token ids (the prompt cut to its last ``max_prompt_tokens``), and per
    run what was kept: the lineage the head's card records."""
    out: list[list[int]] = []
    lineage: dict[str, dict] = {}
    for run_id, share in parse(cfg.from_runs):
        run = store.get_run(run_id)
        assert run is not None  # check() ran first
        rows = sorted(
            (r for r in store.requests(run_id) if not r.warmup and r.error is None and r.output_text),
            key=lambda r: r.seq,
        )
        kept = rows[: math.ceil(share * len(rows))]
        served = "phoenix_serve" in (run.config or {})  # its prompt text is what the model saw, template and all
        for r in kept:
            text = r.prompt_text or store.prompt_text(run_id, r.prompt_id) or ""  # kept once per prompt (0022)
            prompt = (
                tokenizer(text, add_special_tokens=False)["input_ids"] if served else format_prompt(tokenizer, text)
            )
            answer = tokenizer(r.output_text, add_special_tokens=False)["input_ids"]
            if answer:
                out.append(prompt[-cfg.max_prompt_tokens :] + answer)
        lineage[str(run_id)] = {
            "requests": len(kept),
            "of": len(rows),
            "seq": [kept[0].seq, kept[-1].seq] if kept else None,
            "served": served,
        }
    return out, lineage
