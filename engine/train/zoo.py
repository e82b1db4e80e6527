"""The embedded default: a tokenizer, target and draft trained here from the stdlib.

Nothing can be downloaded on our machines, so Phoenix trains its own pair from the
Python standard library of the running interpreter. The draft is distilled from the
target (KL to the target's next-token distribution), because acceptance is what a
draft is for. ``python -m engine zoo build`` rebuilds everything from a seed.
"""

from __future__ import annotations

import glob
import json
import math
import sysconfig
import time
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from engine.decode.spec import generate
from engine.paths import check_ours
from engine.prompts.sets import humaneval, split
from engine.train.config import ZooConfig

EOS = "<|endoftext|>"


def stdlib_texts() -> list[str]:
    """Top-level stdlib modules, sorted so the corpus is the same on every run."""
    files = sorted(glob.glob(str(Path(sysconfig.get_paths()["stdlib"]) / "*.py")))
    texts = []
    for f in files:
        try:
            texts.append(Path(f).read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return texts


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, bos_token=EOS, pad_token=EOS)


def qwen3_config(vocab_size: int, hidden: int, layers: int, ffn: int, heads: int, kv: int, eos_id: int):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=hidden // heads,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )


def _lr(step: int, total: int, peak: float, warmup: int) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _batches(ids, steps: int, batch: int, seq_len: int, seed: int):
    import torch

    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - seq_len - 1, (batch,), generator=gen)
        yield torch.stack([ids[s : s + seq_len] for s in starts.tolist()])


def optimizer_step(model, opt, loss, losses: list[float], bar) -> None:
    import torch

    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    losses.append(round(loss.item(), 4))
    bar.set_postfix(loss=f"{losses[-1]:.3f}")


class TrainSettings(Protocol):
    """What the shared training loops read from a config: ZooConfig and the real target's DraftConfig both have it."""

    seed: int
    seq_len: int
    warmup_steps: int
    seq_batch: int
    seq_lr: float
    seq_steps: int
    save_dtype: str


def train_lm(model, ids, cfg: TrainSettings, steps: int, batch: int, lr: float, seed: int, desc: str, teacher=None):
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    model.train()
    losses: list[float] = []
    bar = tqdm(enumerate(_batches(ids, steps, batch, cfg.seq_len, seed)), total=steps, desc=desc)
    for step, x in bar:
        for group in opt.param_groups:
            group["lr"] = _lr(step, steps, lr, cfg.warmup_steps)
        logits = model(input_ids=x).logits[:, :-1]
        if teacher is None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        else:
            with torch.no_grad():
                t_logp = F.log_softmax(teacher(input_ids=x).logits[:, :-1].float(), dim=-1)  # a bf16 teacher too
            loss = F.kl_div(F.log_softmax(logits, dim=-1), t_logp, log_target=True, reduction="batchmean") / x.shape[1]
        optimizer_step(model, opt, loss, losses, bar)
    model.eval()
    return losses


def save_model(model, tokenizer, path: Path, cfg: TrainSettings, card: dict) -> None:
    check_ours(path)  # the commands check before their work; this guards any other caller
    import torch

    path.mkdir(parents=True, exist_ok=True)
    model.to(getattr(torch, cfg.save_dtype)).save_pretrained(path, safe_serialization=True)
    model.to(torch.float32)
    tokenizer.save_pretrained(path)
    (path / "phoenix_card.json").write_text(json.dumps(card, indent=2) + "\n")


def build(cfg: ZooConfig) -> dict:
    """Train tokenizer, target and distilled draft; write them under cfg.out."""
    for role in ("target", "draft"):  # before 45 minutes of training, not after
        check_ours(Path(cfg.out) / role)
    import torch
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(cfg.seed)
    texts = stdlib_texts()
    t0 = time.perf_counter()
    tokenizer = train_tokenizer(texts, cfg.vocab_size)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    ids = torch.tensor(tokenizer(EOS.join(texts))["input_ids"], dtype=torch.long)
    vocab = len(tokenizer)
    target = Qwen3ForCausalLM(
        qwen3_config(
            vocab, cfg.target_hidden, cfg.target_layers, cfg.target_ffn, cfg.target_heads, cfg.target_kv_heads, eos_id
        )
    )
    t_losses = train_lm(target, ids, cfg, cfg.target_steps, cfg.target_batch, cfg.target_lr, cfg.seed, "target")
    torch.manual_seed(cfg.seed + 1)
    draft = Qwen3ForCausalLM(
        qwen3_config(
            vocab, cfg.draft_hidden, cfg.draft_layers, cfg.draft_ffn, cfg.draft_heads, cfg.draft_kv_heads, eos_id
        )
    )
    d_losses = train_lm(
        draft, ids, cfg, cfg.draft_steps, cfg.draft_batch, cfg.draft_lr, cfg.seed + 1, "draft (distil)", teacher=target
    )
    torch.manual_seed(cfg.seed + 2)
    a_losses = train_on_sequences(draft, teacher_sequences(target, tokenizer, ids, cfg), cfg)
    corpus = {"source": "stdlib top-level *.py", "files": len(texts), "tokens": int(len(ids))}
    common = {"zoo_config": asdict(cfg), "corpus": corpus, "torch": torch.__version__}
    out = Path(cfg.out)
    save_model(target, tokenizer, out / "target", cfg, {**common, "role": "target", "loss": t_losses})
    save_model(
        draft, tokenizer, out / "draft", cfg, {**common, "role": "draft", "kl_loss": d_losses, "answers_loss": a_losses}
    )
    return {
        "out": str(out),
        "tokens": int(len(ids)),
        "seconds": round(time.perf_counter() - t0, 1),
        "target_final_loss": t_losses[-1],
        "draft_final_kl": d_losses[-1],
        "draft_final_answers_loss": a_losses[-1],
    }


def teacher_sequences(target, tokenizer, ids, cfg: ZooConfig) -> list[tuple[list[int], int]]:
    """(prompt + greedy continuation, prompt length) from the target, on prompts
    that never include the held-out HumanEval test split."""
    import torch
    from tqdm import tqdm

    train, _ = split(humaneval())
    prompts = [tokenizer(p.text, add_special_tokens=False)["input_ids"] for p in train][: cfg.seq_prompts]
    gen = torch.Generator().manual_seed(cfg.seed + 2)
    while len(prompts) < cfg.seq_prompts:
        start = int(torch.randint(0, len(ids) - 64, (1,), generator=gen))
        prompts.append(ids[start : start + 64].tolist())
    out = []
    with torch.inference_mode():
        for p in tqdm(prompts, desc="teacher answers"):
            cont = generate(target, None, p, 0, cfg.seq_new_tokens, tokenizer.eos_token_id).output_ids
            out.append((p + cont, len(p)))
    return out


def train_on_sequences(draft, seqs: list[tuple[list[int], int]], cfg: TrainSettings) -> list[float]:
    """Cross-entropy on the teacher's continuation tokens only (prompts are context)."""
    import torch
    import torch.nn.functional as F
    from tqdm import tqdm

    opt = torch.optim.AdamW(draft.parameters(), lr=cfg.seq_lr, weight_decay=0.01)
    gen = torch.Generator().manual_seed(cfg.seed + 3)
    draft.train()
    losses: list[float] = []
    for step in (bar := tqdm(range(cfg.seq_steps), desc="draft (teacher answers)")):
        for group in opt.param_groups:
            group["lr"] = _lr(step, cfg.seq_steps, cfg.seq_lr, cfg.warmup_steps)
        pick = torch.randint(0, len(seqs), (cfg.seq_batch,), generator=gen).tolist()
        width = max(len(seqs[i][0]) for i in pick)
        x = torch.zeros(len(pick), width, dtype=torch.long)
        mask = torch.zeros(len(pick), width, dtype=torch.bool)
        for row, i in enumerate(pick):
            seq, plen = seqs[i]
            x[row, : len(seq)] = torch.tensor(seq)
            mask[row, plen : len(seq)] = True  # predict continuation tokens
        # Output-layer logits only where the loss looks: with a 49k vocabulary, logits at every prompt position
        # cost more than the rest of the step.
        hidden = draft.get_decoder()(input_ids=x).last_hidden_state[:, :-1]
        logits = draft.get_output_embeddings()(hidden[mask[:, 1:]])
        loss = F.cross_entropy(logits.float(), x[:, 1:][mask[:, 1:]])
        optimizer_step(draft, opt, loss, losses, bar)
    draft.eval()
    return losses


def distill_draft_on_answers(cfg: ZooConfig) -> dict:
    """Stage 3 alone, on an already built pair: `python -m engine zoo distill-draft`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(cfg.out)
    check_ours(out / "draft")
    tokenizer = AutoTokenizer.from_pretrained(out / "target")
    target = AutoModelForCausalLM.from_pretrained(out / "target", dtype=torch.float32).eval()
    draft = AutoModelForCausalLM.from_pretrained(out / "draft", dtype=torch.float32)
    ids = torch.tensor(tokenizer(EOS.join(stdlib_texts()))["input_ids"], dtype=torch.long)
    torch.manual_seed(cfg.seed + 2)
    seqs = teacher_sequences(target, tokenizer, ids, cfg)
    losses = train_on_sequences(draft, seqs, cfg)
    card = json.loads((out / "draft" / "phoenix_card.json").read_text())
    card.update(
        {
            "answers_loss": losses,
            "answers": {
                "sequences": len(seqs),
                "new_tokens": cfg.seq_new_tokens,
                "sources": "HumanEval train split + stdlib windows",
            },
        }
    )
    save_model(draft, tokenizer, out / "draft", cfg, card)
    return {"sequences": len(seqs), "final_loss": losses[-1]}
