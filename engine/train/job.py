"""Running a distillation job end to end, recorded in the store, and its --eval."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from db.store import Store
from engine.decode.loading import load_pair
from engine.errors import PhoenixError
from engine.paths import CARD, check_ours
from engine.provenance import environment
from engine.train.config import DistillConfig
from engine.train.distill import Work, default_out, stage_answers, training_prompts, validate
from engine.train.evaluate import evaluate
from engine.train.lora import model_card, stage_lora, stage_merge, write_cards


class Timer:
    """Wall seconds per stage, added to what earlier (interrupted) attempts spent."""

    def __init__(self, work: Work):
        self.work = work
        self.seconds = dict(work.state().get("seconds", {}))

    def add(self, stage: str, t0: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - t0
        self.work.save_state(seconds=self.seconds)


def run(
    cfg: DistillConfig,
    store: Store | None = None,
    progress: bool = True,
    on_answer: Callable | None = None,
    on_step: Callable | None = None,
) -> dict:
    """All three stages (resuming whatever an earlier attempt finished), then --eval if asked."""
    validate(cfg)
    cfg.out = cfg.out or default_out(cfg)
    out = Path(cfg.out).resolve()
    check_ours(out, markers=(CARD, "work"))  # a resumed job finds its own work/ folder
    prompts = training_prompts(cfg)  # refuses test-split prompts before any work
    row = _job(store, cfg, out)
    try:
        work = Work(out)
        timer = Timer(work)
        pair = load_pair(cfg.target, cfg.draft, cfg.device, "float32", cfg.allow_pickle)
        t0 = time.perf_counter()
        answers = stage_answers(cfg, pair, work, prompts, on_answer, progress)
        timer.add("answers", t0)
        t0 = time.perf_counter()
        pad = pair.tokenizer.pad_token_id if pair.tokenizer.pad_token_id is not None else pair.tokenizer.eos_token_id
        model, losses = stage_lora(cfg, pair.draft, answers, work, pad, on_step, progress)
        timer.add("lora", t0)
        _record(store, row, losses=losses, stage_seconds=timer.seconds)
        t0 = time.perf_counter()
        stage_merge(cfg, model, pair.tokenizer, out)
        timer.add("merge", t0)
        n_tokens = sum(len(a["answer_ids"]) for a in answers)
        base = "phoenix-tiny/draft (embedded)" if cfg.draft == "embedded" else cfg.draft
        card = {
            "role": "draft",
            "base_model": base,
            "teacher": cfg.target,
            "answers": len(answers),
            "answer_tokens": n_tokens,
            "losses": losses,
            "stage_seconds": timer.seconds,
        }
        write_cards(cfg, out, card, model_card(cfg, base, len(answers), n_tokens, losses, timer.seconds))
        work.save_state(merged=True)
        _record(store, row, stage_seconds=timer.seconds)
        result = {
            "out": str(out),
            "answers": len(answers),
            "answer_tokens": n_tokens,
            "steps": len(losses),
            "first_loss": losses[0] if losses else None,
            "last_loss": losses[-1] if losses else None,
            "stage_seconds": timer.seconds,
            "distill_id": row.id if row else None,
        }
        if cfg.eval:
            if store is None:
                raise PhoenixError("--eval records its runs in the database: pass --db or set PHOENIX_DB")
            result["evaluation"] = evaluate(store, cfg, str(out), row.id, progress)
        _record(store, row, status="done")
        return result
    except KeyboardInterrupt:
        _record(store, row, status="interrupted")
        raise
    except Exception as exc:
        _record(
            store,
            row,
            status="failed",
            error=str(exc) if isinstance(exc, PhoenixError) else f"{type(exc).__name__}: {exc}",
        )
        raise


def _job(store: Store | None, cfg: DistillConfig, out: Path):
    if store is None:
        return None
    row = store.latest_distill(str(out))
    if row is not None:
        store.set_distill_fields(row.id, status="running", error=None)
        return row
    return store.create_distill({"distill": asdict(cfg), "environment": environment()}, str(out))


def _record(store: Store | None, row, **values) -> None:
    if store is not None and row is not None:
        store.set_distill_fields(row.id, **values)
