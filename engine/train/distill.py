"""Draft distillation: teach the draft to write like the target (LoRA with peft).

Three stages, each resumable from files under ``<out>/work``:
  1. answers  - the target, as teacher, answers the training prompts greedily
                (decoded with our speculative loop: identical text, faster);
  2. lora     - LoRA supervised fine-tuning of the draft on prompt + answer, with
                the loss on answer tokens only; checkpointed every few steps;
  3. merge    - the adapter merged into full weights, saved as a plain Hugging
                Face model directory with a model card.
No held-out test prompt (engine.prompts' test split) may be in the teacher data.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from engine.decode.decoder import Decoder, format_prompt
from engine.errors import PhoenixError
from engine.modes import K_MAX
from engine.paths import MODELS_DIR
from engine.prompts.sets import humaneval, load, split
from engine.train.config import DistillConfig


def validate(cfg: DistillConfig) -> DistillConfig:
    """Every number checked before any model loads, each with the flag to fix."""
    checks = [
        (cfg.epochs >= 1, "--epochs must be >= 1"),
        (cfg.lora_r >= 1, "--lora-r must be >= 1"),
        (cfg.lora_alpha > 0, "--lora-alpha must be > 0"),
        (0 <= cfg.lora_dropout < 1, "--lora-dropout must be in [0, 1)"),
        (cfg.lr > 0, "--lr must be > 0"),
        (cfg.batch_size >= 1, "--batch-size must be >= 1"),
        (cfg.checkpoint_every >= 1, "--checkpoint-every must be >= 1"),
        (1 <= cfg.max_new_tokens <= 4096, "--max-new-tokens must be in 1..4096"),
        (cfg.limit is None or cfg.limit >= 1, "--limit must be >= 1"),
        (cfg.save_dtype in ("float16", "bfloat16", "float32"), "--save-dtype must be float16, bfloat16 or float32"),
    ]
    for ok, message in checks:
        if not ok:
            raise PhoenixError(message)
    if not cfg.draft or cfg.draft == "none":
        raise PhoenixError("distillation needs a draft model: pass --draft")
    eval_ks(cfg)
    return cfg


def eval_ks(cfg: DistillConfig) -> list[int]:
    try:
        ks = [int(k) for k in cfg.eval_ks.split(",") if k.strip()]
    except ValueError:
        raise PhoenixError(f"--eval-ks must be comma-separated whole numbers, got {cfg.eval_ks!r}") from None
    if not ks or any(not 1 <= k <= K_MAX for k in ks):
        raise PhoenixError(f"--eval-ks must list k values in 1..{K_MAX}, got {cfg.eval_ks!r}")
    return ks


def default_out(cfg: DistillConfig) -> str:
    name = "phoenix-tiny-draft" if cfg.draft == "embedded" else Path(cfg.draft.rstrip("/")).name.replace("/", "--")
    return str(MODELS_DIR / f"{name}-distilled")


def training_prompts(cfg: DistillConfig):
    if cfg.prompts in ("humaneval-test", "humaneval"):
        raise PhoenixError(
            f"--prompts {cfg.prompts} includes the held-out test split: use humaneval-train or a JSONL file"
        )
    prompts = load(cfg.prompts, cfg.limit)
    _, test = split(humaneval())
    held_out = {p.id for p in test} | {p.text.strip() for p in test}
    leaked = [p.id for p in prompts if p.id in held_out or p.text.strip() in held_out]
    if leaked:
        raise PhoenixError(
            f"{len(leaked)} training prompt(s) are held-out test prompts (first: {leaked[0]}); remove them"
        )
    return prompts


class Work:
    """Files under <out>/work that make every stage resumable."""

    def __init__(self, out: Path):
        self.dir = out / "work"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.answers = self.dir / "answers.jsonl"
        self.state_file = self.dir / "state.json"
        self.adapter = self.dir / "adapter"

    def state(self) -> dict:
        return json.loads(self.state_file.read_text()) if self.state_file.exists() else {}

    def save_state(self, **values) -> dict:
        state = {**self.state(), **values}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1))
        tmp.replace(self.state_file)  # atomic: a kill never leaves half a state file
        return state

    def read_answers(self) -> list[dict]:
        if not self.answers.exists():
            return []
        rows = []
        for line in self.answers.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                break  # a line cut by a kill: it is redone
        return rows


def stage_answers(
    cfg: DistillConfig, pair, work: Work, prompts, on_answer: Callable | None = None, progress: bool = True
) -> list[dict]:
    """Stage 1: greedy teacher answers, appended one JSON line per prompt."""
    from tqdm import tqdm

    done = work.read_answers()
    work.answers.write_text("".join(json.dumps(r) + "\n" for r in done))  # drop a cut last line
    have = {r["id"] for r in done}
    decoder = Decoder(pair, max_new_cap=4096)
    k = 4 if pair.draft is not None else 0  # speculation gives the target's own greedy text, faster
    with work.answers.open("a") as fh:
        for p in tqdm([p for p in prompts if p.id not in have], desc="1/3 teacher answers", disable=not progress):
            ids = format_prompt(pair.tokenizer, p.text)
            stats = decoder.run(ids, k, cfg.max_new_tokens, "model" if k else "none")  # refuses a too-long prompt
            row = {"id": p.id, "prompt_ids": ids, "answer_ids": stats.output_ids}
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            done.append(row)
            if on_answer:
                on_answer(row)
    return done
