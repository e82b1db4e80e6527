"""Stages 2 and 3 of draft distillation: LoRA fine-tuning with peft, then the merge."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from engine.train.config import DistillConfig
from engine.train.distill import Work


def lora_model(draft, cfg: DistillConfig, adapter_dir: Path | None):
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter_dir is not None:
        return PeftModel.from_pretrained(draft, adapter_dir, is_trainable=True)
    torch.manual_seed(cfg.seed)  # LoRA's A matrices are random; B starts at zero
    lora = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=cfg.target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(draft, lora)


def plan(n_rows: int, cfg: DistillConfig) -> list[list[int]]:
    """Batches of row indices for every epoch, in a seeded order that a resume recomputes exactly."""
    batches = []
    for epoch in range(cfg.epochs):
        order = torch.randperm(n_rows, generator=torch.Generator().manual_seed(cfg.seed * 1000 + epoch)).tolist()
        batches += [order[i : i + cfg.batch_size] for i in range(0, n_rows, cfg.batch_size)]
    return batches


def collate(rows: list[dict], pad_id: int) -> dict[str, torch.Tensor]:
    """Prompt + answer, right-padded; labels are -100 outside the answer, so only answer tokens teach."""
    seqs = [r["prompt_ids"] + r["answer_ids"] for r in rows]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    for i, (r, s) in enumerate(zip(rows, seqs)):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
        start = len(r["prompt_ids"])
        labels[i, start : len(s)] = torch.tensor(r["answer_ids"])
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def _lr(step: int, total: int, peak: float) -> float:
    warm = max(1, total // 20)
    return peak * min(1.0, (step + 1) / warm) * max(0.1, 1.0 - step / total)


def checkpoint(model, opt, work: Work, step: int, losses: list[float], total: int) -> None:
    """Write adapter + optimizer + step into a fresh folder, then swap it in, so a kill leaves one whole checkpoint."""
    tmp, cur, old = work.dir / "ckpt-tmp", work.dir / "ckpt", work.dir / "ckpt-old"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp / "adapter")
    torch.save(opt.state_dict(), tmp / "optimizer.pt")
    (tmp / "step.json").write_text(json.dumps({"step": step, "total": total, "losses": losses}))
    shutil.rmtree(old, ignore_errors=True)
    if cur.exists():
        cur.rename(old)
    tmp.rename(cur)
    shutil.rmtree(old, ignore_errors=True)


def latest_checkpoint(work: Work) -> Path | None:
    for name in ("ckpt", "ckpt-old"):  # ckpt-old survives only a kill between the two renames
        path = work.dir / name
        if (path / "step.json").exists():
            return path
    return None


def stage_lora(
    cfg: DistillConfig,
    draft,
    rows: list[dict],
    work: Work,
    pad_id: int,
    on_step: Callable[[int, float], None] | None = None,
    progress: bool = True,
):
    """Stage 2: returns (peft model, per-step losses)."""
    from tqdm import tqdm

    ckpt = latest_checkpoint(work)
    model = lora_model(draft, cfg, ckpt / "adapter" if ckpt else None)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    batches = plan(len(rows), cfg)
    step, losses = 0, []
    if ckpt:
        meta = json.loads((ckpt / "step.json").read_text())
        step, losses = meta["step"], meta["losses"]
        opt.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=True))
    model.train()
    bar = tqdm(total=len(batches), initial=step, desc="2/3 LoRA fine-tune", disable=not progress)
    for i in range(step, len(batches)):
        for group in opt.param_groups:
            group["lr"] = _lr(i, len(batches), cfg.lr)
        batch = collate([rows[j] for j in batches[i]], pad_id)
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        bar.update(1)
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if (i + 1) % cfg.checkpoint_every == 0 or i + 1 == len(batches):
            checkpoint(model, opt, work, i + 1, losses, len(batches))
        if on_step:
            on_step(i + 1, losses[-1])
    bar.close()
    model.eval()
    return model, losses


def model_card(
    cfg: DistillConfig, base: str, n_answers: int, answer_tokens: int, losses: list[float], seconds: dict
) -> str:
    per_epoch = max(1, len(losses) // cfg.epochs)
    epochs = [sum(losses[i : i + per_epoch]) / len(losses[i : i + per_epoch]) for i in range(0, len(losses), per_epoch)]
    loss_line = (
        (
            f"- Loss: first step {losses[0]:.4f}, last step {losses[-1]:.4f}; mean per epoch "
            + ", ".join(f"{x:.4f}" for x in epochs)
            + "."
        )
        if losses
        else "- Loss: no steps."
    )
    lines = [
        "---",
        "library_name: transformers",
        f"base_model: {base}",
        "tags: [phoenix, speculative-decoding, draft-model, distillation, lora, merged]",
        "---",
        "",
        f"# Distilled draft of `{base}`",
        "",
        f"A draft model for speculative decoding, fine-tuned to write like its target `{cfg.target}`.",
        "",
        "## Data",
        "",
        f"- Teacher: `{cfg.target}`, greedy, up to {cfg.max_new_tokens} new tokens, chat template with thinking "
        "disabled when the tokenizer has one.",
        f"- Prompts: `{cfg.prompts}` ({n_answers} prompts, {answer_tokens} answer tokens). The held-out HumanEval "
        "test split (seed 42, 50 prompts) is excluded and checked.",
        "",
        "## Training",
        "",
        f"- LoRA r={cfg.lora_r}, alpha={cfg.lora_alpha}, dropout={cfg.lora_dropout}, modules `{cfg.target_modules}`, "
        f"lr {cfg.lr}, batch {cfg.batch_size}, {cfg.epochs} epoch(s), {len(losses)} steps, seed {cfg.seed}; loss on "
        "answer tokens only; merged into full weights.",
        loss_line,
        "- Wall time per stage (s): " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()) + ".",
        "",
    ]
    return "\n".join(lines)


def stage_merge(cfg: DistillConfig, model, tokenizer, out: Path) -> Path:
    """Stage 3: merge the adapter and save a plain model directory that loads without peft."""
    merged = model.merge_and_unload()
    merged.to(getattr(torch, cfg.save_dtype)).save_pretrained(out, safe_serialization=True)
    merged.to(torch.float32)
    tokenizer.save_pretrained(out)
    return out


def write_cards(cfg: DistillConfig, out: Path, card: dict, card_md: str) -> None:
    (out / "README.md").write_text(card_md)
    (out / "phoenix_card.json").write_text(json.dumps({**card, "distill_config": asdict(cfg)}, indent=1) + "\n")
