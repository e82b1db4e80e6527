"""`zoo build-head`: an EAGLE-3 head for a real target, trained on the target's own answers.

Four stages, each timed into the model card:
1. answers: the target answers training prompts greedily, in batches, and the three taps plus its final hidden state
   are kept from those same passes (no second forward);
2. vocabulary: the draft's output rows are the most frequent tokens of those answers (FR-Spec), coverage recorded;
3. training: a training-time-test unroll (EAGLE-3 / HASS): step s feeds the head its own step s-1 state and attends to
   the real prefix plus its own chain, with soft cross-entropy to the target's distribution over the draft vocabulary;
4. evaluation: top-1 agreement per unroll step on the answers of held-out prompts.
Held-out prompts (HumanEval and Spec-Bench test halves) are never used: checked by id and by text.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from engine.decode.eagle3 import Eagle3Head, head_config_for, save_head, vocab_maps
from engine.paths import check_ours
from engine.train.config import HeadBuildConfig


@dataclass
class Sample:
    tokens: torch.Tensor  # [N] prompt + answer
    feats: torch.Tensor  # [N-1, 3H] taps at positions 0..N-2
    last: torch.Tensor  # [N-1, H] the target's final (normed) hidden state there
    prompt_len: int
    greedy: bool = True  # the tokens after the prompt are the target's greedy answer (False: fixed text)


def answer_with_taps(
    target,
    prompts: list[list[int]],
    max_new: int,
    batch: int,
    taps: tuple[int, ...],
    pad_id: int,
    eos_id: int | None,
    on_batch=None,
) -> list[Sample]:
    """Greedy answers in left-padded batches; taps and final states taken from generate's own passes."""
    samples: list[Sample] = []
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for start in range(0, len(order), batch):
        rows = [prompts[i] for i in order[start : start + batch]]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for r, p in enumerate(rows):
            ids[r, width - len(p) :], mask[r, width - len(p) :] = torch.tensor(p), 1
        with torch.inference_mode():
            out = target.generate(
                input_ids=ids.to(target.device),
                attention_mask=mask.to(target.device),
                max_new_tokens=max_new,
                do_sample=False,
                output_hidden_states=True,
                return_dict_in_generate=True,
                pad_token_id=pad_id,
                eos_token_id=eos_id,
            )
        layers = [*taps, -1]
        per_layer = [torch.cat([step[i] for step in out.hidden_states], dim=1) for i in layers]
        for r, p in enumerate(rows):
            samples.append(
                _sample(out.sequences[r].cpu(), [t[r].cpu() for t in per_layer], width - len(p), width, eos_id)
            )
        if on_batch:
            on_batch(len(samples), len(prompts))
    return samples


def text_with_taps(target, texts: list[list[int]], batch: int, taps: tuple[int, ...], on_batch=None) -> list[Sample]:
    """Fixed text, teacher-forced (EAGLE-1's data): one forward per batch gives the taps and the target's own
    distribution at every position, all of them trained on. None is scored for agreement: the next token there is
    the text's, not the target's greedy pick."""
    samples: list[Sample] = []
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    for start in range(0, len(order), batch):
        rows = [texts[i] for i in order[start : start + batch]]
        width = max(len(ids) for ids in rows)
        x = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros_like(x)
        for r, ids in enumerate(rows):
            x[r, : len(ids)], mask[r, : len(ids)] = torch.tensor(ids), 1
        with torch.inference_mode():
            hs = target(
                input_ids=x.to(target.device), attention_mask=mask.to(target.device), output_hidden_states=True
            ).hidden_states
        for r, ids in enumerate(rows):
            n = len(ids)
            feats = torch.cat([hs[i][r, : n - 1] for i in taps], dim=-1).cpu().to(torch.bfloat16)
            samples.append(Sample(x[r, :n].clone(), feats, hs[-1][r, : n - 1].cpu().to(torch.bfloat16), 0, False))
        if on_batch:
            on_batch(len(samples), len(texts))
    return samples


def _sample(seq: torch.Tensor, layers: list[torch.Tensor], pad: int, width: int, eos_id: int | None) -> Sample:
    end = len(seq)
    if eos_id is not None:
        hits = (seq[width:] == eos_id).nonzero()
        if len(hits):
            end = width + int(hits[0]) + 1
    feats = torch.cat(layers[:-1], dim=-1)[pad : end - 1].to(torch.bfloat16)
    return Sample(seq[pad:end].clone(), feats, layers[-1][pad : end - 1].to(torch.bfloat16), width - pad)


def kept_coverage(samples: list[Sample], vocab_ids: torch.Tensor, vocab: int) -> dict:
    """The share of the samples' answer tokens, and of their teacher-forced text's, that a kept draft vocabulary
    covers (a resumed stage keeps its head's); None where the stage has none of that kind (a stage on traffic or
    text alone answers nothing)."""
    counts = {True: torch.zeros(vocab, dtype=torch.long), False: torch.zeros(vocab, dtype=torch.long)}
    for s in samples:
        counts[s.greedy] += torch.bincount(s.tokens[s.prompt_len :], minlength=vocab)[:vocab]

    def share(c: torch.Tensor) -> float | None:
        return round(float(c[vocab_ids].sum()) / int(c.sum()), 4) if int(c.sum()) else None

    return {
        "answer_tokens": int(counts[True].sum()),
        "distinct": int((counts[True] > 0).sum()),
        "coverage": {len(vocab_ids): share(counts[True])},
        "text_tokens": int(counts[False].sum()),
        "text_coverage": share(counts[False]),
    }


def pick_vocab(samples: list[Sample], size: int, vocab: int) -> tuple[torch.Tensor, dict]:
    """At most ``size`` ids (sorted), by coverage of the data: the target's answer tokens by count, then tokens seen
    only in the fixed text by theirs, ties by id; never an id the data never holds (the Qwen preset once padded
    3,714 seen ids to 8,192 with ids in argsort's tie order). Also the share of answer tokens they cover at a few
    sizes, so the choice is measured, not assumed."""
    counts = torch.zeros(vocab, dtype=torch.long)
    text = torch.zeros(vocab, dtype=torch.long)
    for s in samples:
        seen = torch.bincount(s.tokens[s.prompt_len :], minlength=vocab)[:vocab]
        if s.greedy:
            counts += seen
        else:
            text += seen
    # one key: answer counts first, the fixed text's breaking what they leave level (its counts stay below a unit)
    key = counts.double() + text.double() / (float(text.max()) + 1.0)
    ranked = torch.sort(key, descending=True, stable=True).indices
    seen_ids = int((key > 0).sum())
    n = min(size, max(seen_ids, 2))  # a head needs two rows at least, whatever the data
    total = max(int(counts.sum()), 1)
    coverage = {
        k: round(float(counts[ranked[:k]].sum()) / total, 4) for k in (1024, 2048, 4096, 8192, 16384, n) if k <= vocab
    }
    return ranked[:n].sort().values, {
        "answer_tokens": total,
        "distinct": int((counts > 0).sum()),
        "distinct_with_text": seen_ids,
        "never_seen_left_out": size - n,
        "coverage": coverage,
    }


class Trainer:
    """Soft cross-entropy over the draft vocabulary with a training-time-test unroll."""

    def __init__(self, head: Eagle3Head, embed: torch.nn.Module, out_rows: torch.Tensor, cfg: HeadBuildConfig):
        self.head, self.embed, self.cfg = head, embed, cfg
        self.out_rows = out_rows  # [V_draft, H] the target's output layer, draft rows only: soft labels

    def losses(self, batch: list[Sample]) -> tuple[torch.Tensor, list[float]]:
        """Weighted loss, and top-1 agreement with the target's greedy token per unroll step (answer positions)."""
        f, z, x, valid, answer = _pad(batch)
        J = f.shape[1] - 1  # pairs j = 0..J-1: taps at j, token j+1, label: the target's distribution at j+1
        with torch.no_grad():
            p = torch.softmax(z[:, 1 : J + 1].float() @ self.out_rows.T, dim=-1)
            greedy = x[:, 2 : J + 2]
            emb = self.embed(x[:, 1 : J + 1]).float()
        with torch.autocast("cpu", torch.bfloat16, enabled=self.cfg.train_dtype == "bfloat16"):
            return self._unroll(f, x, valid, answer, p, greedy, emb, J, len(batch))

    def _unroll(self, f, x, valid, answer, p, greedy, emb, J: int, rows: int) -> tuple[torch.Tensor, list[float]]:
        hidden = self.head.fc(f[:, :J].float())
        positions = torch.arange(J).expand(rows, J)
        keys, values, total, agree = [], [], torch.zeros(()), []
        for s in range(self.cfg.ttt_steps):
            q, k, v = self.head.qkv(emb, hidden, positions)
            keys.append(k)
            values.append(v)
            prenorm = self.head.after_attention(_ttt_attention(q, keys, values), hidden)
            logits = self.head.logits(prenorm)
            ok = valid[:, 1 : J + 1] & (torch.arange(J) >= s)  # step s needs a real prefix ending at j - s
            ce = -(p * torch.log_softmax(logits.float(), dim=-1)).sum(-1)
            total = total + self.cfg.step_decay**s * ce[ok].mean()
            with torch.no_grad():
                hit = self.head.to_target_ids(logits.argmax(-1)) == greedy
                sel = ok & answer[:, 1 : J + 1]
                agree.append(float(hit[sel].float().mean()) if sel.any() else float("nan"))
            hidden = torch.cat([torch.zeros_like(prenorm[:, :1]), prenorm[:, :-1]], dim=1)
        return total, agree


def _ttt_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor]) -> torch.Tensor:
    """Step s = len(keys)-1: query q sees step-0 keys at positions <= q-s and, for t = 1..s, step t's key at
    position q-s+t (the chain it drafted), exactly what the head's cache holds while drafting."""
    s = len(keys) - 1
    rep = q.shape[1] // keys[0].shape[1]
    ks = [k.repeat_interleave(rep, dim=1) for k in keys]
    vs = [v.repeat_interleave(rep, dim=1) for v in values]
    scale = q.shape[-1] ** -0.5
    J = q.shape[2]
    pos = torch.arange(J)
    scores = [(q @ ks[0].transpose(-1, -2)) * scale + torch.where(pos[None, :] <= pos[:, None] - s, 0.0, -math.inf)]
    for t in range(1, s + 1):
        scores.append(((q * _shift(ks[t], s - t)).sum(-1, keepdim=True)) * scale)
    # fp32 softmax: under bf16 autocast the scores come out bf16, whose rounding a softmax over ~1,000 keys amplifies
    w = torch.softmax(torch.cat(scores, dim=-1).float().nan_to_num(nan=0.0), dim=-1).nan_to_num(nan=0.0)
    out = w[..., :J] @ vs[0]
    for t in range(1, s + 1):
        out = out + w[..., J + t - 1 : J + t] * _shift(vs[t], s - t)
    return out.transpose(1, 2)


def _shift(x: torch.Tensor, d: int) -> torch.Tensor:
    """x[..., q - d, :] at position q (zeros before the start)."""
    if d == 0:
        return x
    return torch.cat([torch.zeros_like(x[..., :d, :]), x[..., :-d, :]], dim=-2)


def _pad(batch: list[Sample]):
    T = max(len(s.tokens) for s in batch)
    B, width, H = len(batch), batch[0].feats.shape[1], batch[0].last.shape[1]
    f, z = torch.zeros(B, T - 1, width), torch.zeros(B, T - 1, H)
    x = torch.zeros(B, T + 1, dtype=torch.long)
    valid = torch.zeros(B, T, dtype=torch.bool)  # a label exists at position i (i <= N-2)
    answer = torch.zeros(B, T, dtype=torch.bool)  # ... and it is the target's greedy answer token
    for r, s in enumerate(batch):
        n = len(s.tokens)
        f[r, : n - 1], z[r, : n - 1], x[r, :n] = s.feats.float(), s.last.float(), s.tokens
        valid[r, : n - 1] = True
        answer[r, max(s.prompt_len - 1, 0) : n - 1] = s.greedy
    return f, z, x, valid, answer


def batches(samples: list[Sample], batch_tokens: int, gen: torch.Generator) -> list[list[Sample]]:
    order = torch.randperm(len(samples), generator=gen).tolist()
    out: list[list[Sample]] = []
    cur: list[Sample] = []
    size = 0
    for i in order:
        if cur and size + len(samples[i].tokens) > batch_tokens:
            out.append(cur)
            cur, size = [], 0
        cur.append(samples[i])
        size += len(samples[i].tokens)
    return out + ([cur] if cur else [])


def clip_prompt(sample: Sample, keep: int) -> Sample:
    """The last ``keep`` prompt tokens and the whole answer."""
    cut = max(sample.prompt_len - keep, 0)
    if cut == 0:
        return sample
    return Sample(sample.tokens[cut:], sample.feats[cut:], sample.last[cut:], sample.prompt_len - cut, sample.greedy)


def train(
    trainer: Trainer,
    samples: list[Sample],
    cfg: HeadBuildConfig,
    on_step=None,
    held: list[Sample] | None = None,
    optimizer_state: dict | None = None,
) -> dict:
    """Train; ``optimizer_state`` continues an earlier stage's AdamW moments. The result holds the optimizer's state
    (``optimizer``) for the next stage."""
    gen = torch.Generator().manual_seed(cfg.seed)
    params = [p for p in trainer.head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0, betas=(0.9, 0.95))
    if optimizer_state is not None:
        opt.load_state_dict(optimizer_state)
    total_steps = cfg.epochs * len(batches(samples, cfg.batch_tokens, torch.Generator().manual_seed(0)))
    history: list[dict] = []
    # the budget counts the time training ran: the main thread's CPU time, which a paused build (SIGSTOP while the
    # machine measures something else) or a starved one does not accrue, as wall time would
    start, step, ran = time.perf_counter(), 0, time.thread_time()
    trainer.head.train()
    for epoch in range(cfg.epochs):
        for batch in batches(samples, cfg.batch_tokens, gen):
            for group in opt.param_groups:
                group["lr"] = _lr(step, total_steps, cfg)
            loss, agree = trainer.losses(batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            history.append(
                {
                    "step": step,
                    "epoch": epoch,
                    "loss": round(loss.item(), 4),
                    "top1": [round(a, 4) for a in agree],
                    "s": round(time.perf_counter() - start, 1),
                }
            )
            if held and cfg.eval_every and step % cfg.eval_every == 0:
                history[-1]["held_out_top1"] = evaluate(trainer, held)
                trainer.head.train()
            if on_step:
                on_step(history[-1])
            if cfg.time_budget_s and time.thread_time() - ran > cfg.time_budget_s:
                trainer.head.eval()
                return {"steps": step, "stopped": "time budget", "history": history, "optimizer": opt.state_dict()}
    trainer.head.eval()
    return {"steps": step, "stopped": "epochs done", "history": history, "optimizer": opt.state_dict()}


def _lr(step: int, total: int, cfg: HeadBuildConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def evaluate(trainer: Trainer, samples: list[Sample]) -> list[float]:
    """Top-1 agreement per unroll step on answer positions of held-out samples (one pass each)."""
    sums = [0.0] * trainer.cfg.ttt_steps
    with torch.no_grad():
        per = [trainer.losses([s])[1] for s in samples]
    for row in per:
        for i, a in enumerate(row):
            sums[i] += 0.0 if a != a else a
    return [round(v / max(len(per), 1), 4) for v in sums]


def expected_length(top1: list[float], k: int = 3) -> float:
    """The mean acceptance length (vLLM's, bonus token included) drafting ``k`` tokens, were top-1 agreement at unroll
    step s the acceptance at position s after s accepted ones: each step is teacher-forced, so it is what drafting
    sees once its earlier drafts were accepted. An estimate from the figures training already has (no forward of
    its own); steps past the unroll repeat its last."""
    length, reach = 1.0, 1.0
    for i in range(k):
        reach *= top1[min(i, len(top1) - 1)] if top1 else 0.0
        length += reach
    return round(length, 3)


def new_head(target, vocab_ids: torch.Tensor, seed: int, intermediate_size: int = 0) -> Eagle3Head:
    """A head shaped like one target layer; its output layer starts from the target's own rows for those tokens."""
    torch.manual_seed(seed)
    head = Eagle3Head(head_config_for(target.config, len(vocab_ids), intermediate_size=intermediate_size))
    d2t, t2d = vocab_maps(vocab_ids, head.config.vocab_size)
    head.load_state_dict({"d2t": d2t, "t2d": t2d}, strict=False)
    with torch.no_grad():
        head.lm_head.weight.copy_(target.get_output_embeddings().weight[vocab_ids].float())
        for lin in (head.fc, head.midlayer.self_attn.o_proj, head.midlayer.mlp.down_proj):
            lin.weight.mul_(0.5)
    return head


def save(head: Eagle3Head, cfg: HeadBuildConfig, card: dict) -> Path:
    out = Path(cfg.out)
    check_ours(out)
    save_head(head, out, getattr(torch, cfg.save_dtype), {**card, "build_config": asdict(cfg)})
    return out
