"""`zoo build-draft smollm2`: a small draft trained here to predict the real target.

With a 49,152-token vocabulary the output layer dominates a small draft's cost, so the
draft is narrow (its tied embedding is the target's, projected onto its top principal
directions) and shallow. It learns the target's next-token distribution (KL to the
target's logits) on code: the interpreter's standard library and the HumanEval *train*
prompts in the target's chat format. The held-out test split is checked out by id and
by text before any training.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.catalog import NAMED, SMOLLM2, SMOLLM2_DRAFT
from engine.decode.decoder import format_prompt
from engine.decode.loading import load_model, pick_dtype
from engine.decode.prompts import humaneval, split
from engine.errors import PhoenixError
from engine.train.zoo import save_model, stdlib_texts, train_lm


@dataclass
class DraftConfig:
    target: str = SMOLLM2  # the model the draft learns to predict
    out: str = str(NAMED[SMOLLM2_DRAFT].path)  # where the draft goes
    seed: int = 1234  # initialisation and batch order
    hidden: int = 320  # narrow: the 49k-row output layer costs hidden x vocab per drafted token
    layers: int = 2  # transformer blocks
    ffn: int = 960  # MLP width
    heads: int = 5  # attention heads of 64 dims
    kv_heads: int = 1  # grouped-query attention keeps the draft's KV cache small
    seq_len: int = 256  # training window in tokens
    steps: int = 300  # optimizer steps of KL distillation
    batch: int = 4  # windows per step
    lr: float = 2e-3  # peak learning rate (warm-up, cosine decay)
    warmup_steps: int = 20  # linear warm-up steps
    teacher_dtype: str = "bfloat16"  # the target's forward while teaching: bf16 is about 2x faster on AVX512-BF16
    save_dtype: str = "float16"  # weights on disk; loaded in the run's dtype

    def validate(self) -> "DraftConfig":
        """Every number checked before the target loads, each with the flag to fix."""
        checks = [(self.steps >= 1, "--steps must be >= 1"), (self.batch >= 1, "--batch must be >= 1"),
                  (self.layers >= 1, "--layers must be >= 1"), (self.seq_len >= 8, "--seq-len must be >= 8"),
                  (self.heads >= 1 and self.hidden % self.heads == 0, "--hidden must be a multiple of --heads"),
                  (self.kv_heads >= 1 and self.heads % self.kv_heads == 0, "--heads must be a multiple of --kv-heads"),
                  (self.lr > 0, "--lr must be > 0"), (0 <= self.warmup_steps < self.steps, "--warmup-steps must be in 0..steps-1"),
                  (self.save_dtype in ("float16", "bfloat16", "float32"), "--save-dtype must be float16, bfloat16 or float32")]
        for ok, message in checks:
            if not ok:
                raise PhoenixError(message)
        return self


def corpus_ids(tokenizer) -> tuple[list[int], dict]:
    """Stdlib code and the HumanEval train prompts in the target's chat format; never a test prompt."""
    train, test = split(humaneval())
    held_out_ids = {p.id for p in test}
    if held_out_ids & {p.id for p in train}:
        raise PhoenixError("the HumanEval split leaks test ids into train; the draft must never see them")
    texts = stdlib_texts()
    joined = "\n".join(texts)
    leaked = [p.id for p in test if p.text.strip() in joined]
    if leaked:
        raise PhoenixError(f"{len(leaked)} held-out HumanEval prompt(s) appear in the stdlib corpus (first: {leaked[0]})")
    ids = tokenizer(joined, add_special_tokens=False)["input_ids"]
    for p in train:
        ids += format_prompt(tokenizer, p.text)
    return ids, {"stdlib_files": len(texts), "humaneval_train_prompts": len(train), "tokens": len(ids),
                 "held_out_checked": len(test)}


def draft_config(target_config, cfg: DraftConfig):
    config = target_config.__class__(**{**target_config.to_dict(), "hidden_size": cfg.hidden, "intermediate_size": cfg.ffn,
                                        "num_hidden_layers": cfg.layers, "num_attention_heads": cfg.heads,
                                        "num_key_value_heads": cfg.kv_heads, "head_dim": cfg.hidden // cfg.heads,
                                        "tie_word_embeddings": True})
    config.architectures = target_config.architectures
    return config


def init_embedding(draft, target) -> None:
    """The target's token embedding projected onto its top ``hidden`` principal directions."""
    import torch

    e = target.get_input_embeddings().weight.detach().float()
    _, _, v = torch.linalg.svd(e - e.mean(0), full_matrices=False)
    projected = e @ v[: draft.config.hidden_size].T
    with torch.no_grad():
        draft.get_input_embeddings().weight.copy_(projected * (e.std() / projected.std()))


def build_draft(cfg: DraftConfig) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    cfg.validate()
    t0 = time.perf_counter()
    teacher, tokenizer = load_model(cfg.target, "target", "cpu", pick_dtype(cfg.teacher_dtype, "cpu"))
    ids, data = corpus_ids(tokenizer)
    torch.manual_seed(cfg.seed)
    draft = AutoModelForCausalLM.from_config(draft_config(teacher.config, cfg), dtype=torch.float32)
    init_embedding(draft, teacher)
    seconds = {"prepare": time.perf_counter() - t0}
    t0 = time.perf_counter()
    losses = train_lm(draft, torch.tensor(ids, dtype=torch.long), cfg, cfg.steps, cfg.batch, cfg.lr, cfg.seed,
                      "draft (KL to the target)", teacher=teacher)
    seconds["distill"] = time.perf_counter() - t0
    card = {"role": "draft", "name": SMOLLM2_DRAFT if cfg.target == SMOLLM2 else Path(cfg.out).name,
            "teacher": cfg.target, "parameters": sum(p.numel() for p in draft.parameters()), "data": data,
            "kl_loss": losses, "stage_seconds": {k: round(v, 1) for k, v in seconds.items()},
            "draft_config": asdict(cfg), "torch": torch.__version__}
    save_model(draft, tokenizer, Path(cfg.out), cfg, card)
    return {"out": cfg.out, "parameters": card["parameters"], "tokens": data["tokens"], "first_loss": losses[0],
            "last_loss": losses[-1], "stage_seconds": card["stage_seconds"]}
