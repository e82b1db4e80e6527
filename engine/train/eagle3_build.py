"""The pipeline behind `python -m engine zoo build-head smollm2`: prompts, answers with taps, vocabulary, training,
held-out agreement per source, and a model card with every stage's data, time and agreement.

A build is a stage. ``--resume`` makes the next stage continue the head at ``--out``: its fp32 weights and AdamW
state from ``state_dir`` (the file named by the published weights' hash, so a head changed by hand is never
continued from a stale state), its draft vocabulary, and its card's stages, so several sessions' CPU time adds up.
Each source's answers are cached apart (``engine.train.head_data``), so a stage that adds a source answers only that
one. Before a stage overwrites the head, the published head is kept in ``state_dir`` too: nothing is lost.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import pickle
import shutil
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import torch

from engine.decode.eagle3 import WEIGHTS, default_taps, load_head
from engine.decode.loading import load_model, pick_dtype
from engine.decode.packed import pack
from engine.errors import PhoenixError
from engine.paths import CARD, check_ours
from engine.train import traffic
from engine.train.config import HeadBuildConfig
from engine.train.eagle3 import (
    Sample,
    Trainer,
    answer_with_taps,
    clip_prompt,
    evaluate,
    expected_length,
    kept_coverage,
    new_head,
    pick_vocab,
    save,
    text_with_taps,
    train,
)
from engine.train.head_data import (
    ANSWER_SOURCES,
    cache_path,
    encode,
    fixed_texts,
    held_out_sources,
    training_prompts,
    training_sources,
)

__all__ = ["build_head", "training_prompts", "validate"]


def validate(cfg: HeadBuildConfig) -> HeadBuildConfig:
    counts = (cfg.humaneval_prompts, cfg.spec_bench_prompts, cfg.stdlib_prompts, cfg.eval_prompts)
    checks = [
        (cfg.draft_vocab_size >= 2, "--draft-vocab-size must be >= 2"),
        (cfg.ttt_steps >= 1 and cfg.epochs >= 1, "--ttt-steps and --epochs must be >= 1"),
        (cfg.max_new_tokens >= 2 and cfg.gen_batch >= 1, "--max-new-tokens must be >= 2, --gen-batch >= 1"),
        (cfg.max_prompt_tokens >= 8 and cfg.train_prompt_tokens >= 1, "--max-prompt-tokens must be >= 8"),
        (cfg.batch_tokens >= 64 and cfg.lr > 0, "--batch-tokens must be >= 64 and --lr > 0"),
        (min(*counts, cfg.second_turns, cfg.code_style_prompts) >= 0, "prompt counts must be >= 0"),
        (0 < cfg.step_decay <= 1, "--step-decay must be in (0, 1]"),
        (cfg.intermediate_size >= 0, "--intermediate-size must be >= 0 (0: the target's)"),
        (cfg.pack in ("auto", "on", "off"), "--pack must be auto, on or off"),
        (cfg.train_dtype in ("float32", "bfloat16"), "--train-dtype must be float32 or bfloat16"),
    ]
    for ok, message in checks:
        if not ok:
            raise PhoenixError(message)
    for part in [x.strip() for x in cfg.text.split(",") if x.strip()]:  # before any answer is decoded
        if not Path(part).expanduser().exists():
            raise PhoenixError(f"--text {part}: no such file or folder")
    if cfg.from_runs:
        traffic.check(cfg, traffic.store_of(cfg))
    return cfg


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def weights_sha(folder: Path) -> str:
    digest = hashlib.sha256()
    with open(folder / WEIGHTS, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def answered(cfg: HeadBuildConfig, target, tokenizer, taps, rows: dict, pad: int, seconds: dict) -> dict:
    """Per source, the target's answers with their taps: read from the source's cache, or answered and cached. A
    second turn is answered after its first, whose answer goes into its context."""
    out: dict[str, list[Sample]] = {}
    texts: dict[str, str] = {}
    t0 = time.perf_counter()
    for name, source in rows.items():
        if not source:
            out[name] = []
            continue
        prompts = encode(tokenizer, source, cfg.max_prompt_tokens, texts)
        path = cache_path(cfg.answers_dir, name, [cfg.target, cfg.dtype, cfg.max_new_tokens, list(taps), prompts])
        if path.exists():
            out[name] = load_cache(path)
            log(f"answers ({name}): {len(out[name])} read from {path}")
        else:
            out[name] = answer_with_taps(
                target,
                prompts,
                cfg.max_new_tokens,
                cfg.gen_batch,
                taps,
                pad,
                tokenizer.eos_token_id,
                lambda d, n, name=name: log(f"answers ({name}): {d}/{n}"),
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(out[name], path.with_suffix(".partial"))
            path.with_suffix(".partial").replace(path)  # whole or absent: a killed build leaves no half cache
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # answer_with_taps's order
        for i, s in zip(order, out[name]):
            texts[source[i].id] = tokenizer.decode(s.tokens[s.prompt_len :], skip_special_tokens=True)
    seconds["answers"] = round(time.perf_counter() - t0, 1)
    return out


def load_cache(path: Path) -> list[Sample]:
    """A cache of answers this build wrote: tensors, numbers and ``Sample``s only. A file holding anything else
    (a planted pickle once ran its code here) is refused in one line, never run."""
    try:
        with torch.serialization.safe_globals([Sample]):
            return torch.load(path, weights_only=True)
    except pickle.UnpicklingError:
        raise PhoenixError(
            f"{path} holds objects Phoenix's head build does not write; refused unread: delete it and build again"
        ) from None


def fixed(cfg: HeadBuildConfig, target, tokenizer, taps, seconds: dict) -> tuple[list[Sample], dict]:
    """The teacher-forced fixed text with its taps, cached like the answers: the recorded traffic of --from-runs
    first, whole requests, then the fixed text."""
    t0 = time.perf_counter()
    texts, info = fixed_texts(cfg, tokenizer) if cfg.fixed_text_tokens else ([], {})
    if cfg.from_runs:
        seen, lineage = traffic.recorded(cfg, tokenizer, traffic.store_of(cfg))
        texts, info = seen + texts, {**info, "from_runs": lineage, "traffic_tokens": sum(map(len, seen))}
    path = cache_path(cfg.answers_dir, "fixed_text", [cfg.target, cfg.dtype, list(taps), texts])
    if texts and path.exists():
        samples = load_cache(path)
    else:
        samples = text_with_taps(target, texts, cfg.gen_batch, taps, lambda d, n: log(f"fixed text: {d}/{n}"))
        if texts:
            path.parent.mkdir(parents=True, exist_ok=True)
            torch.save(samples, path.with_suffix(".partial"))
            path.with_suffix(".partial").replace(path)
    seconds["fixed_text"] = round(time.perf_counter() - t0, 1)
    return samples, info


def resumed(cfg: HeadBuildConfig, target, taps) -> tuple:
    """(head, vocabulary ids, optimizer state or None, earlier stages, published sha) of the head at --out."""
    out = Path(cfg.out)
    if not (out / "config.json").exists():
        raise PhoenixError(f"--resume: no head at {out} to continue; build one first (without --resume)")
    head = load_head(out, "--resume", torch.float32)
    if tuple(head.config.taps) != tuple(taps) or head.config.target_hidden_size != target.config.hidden_size:
        raise PhoenixError(f"--resume: the head at {out} was built for another target (taps {head.config.taps})")
    sha = weights_sha(out)
    state_file = Path(cfg.state_dir) / f"{out.name}-{sha[:16]}.pt"
    optimizer = None
    if state_file.exists():
        try:
            state = torch.load(state_file, weights_only=True)  # tensors and numbers: nothing in it is run
            head.load_state_dict(state["head"])
            optimizer = state["optimizer"]
        except Exception as exc:  # a malformed state file: the published weights still continue
            log(f"--resume: {state_file} unreadable ({type(exc).__name__}); continuing from the published weights")
    d2t = head.state_dict()["d2t"]  # offsets: target id = draft id + d2t
    vocab_ids = torch.arange(d2t.numel()) + d2t
    card = json.loads((out / CARD).read_text()) if (out / CARD).exists() else {}
    return head, vocab_ids, optimizer, card.get("stages") or first_stage(card), sha


def first_stage(card: dict) -> list[dict]:
    """The stage a card written before stages existed describes, so the history starts with it."""
    if not card:
        return []
    held = card.get("held_out", {})
    return [
        {
            "stage": 1,
            "data": card.get("data", {}),
            "steps": card.get("training", {}).get("steps"),
            "stopped": card.get("training", {}).get("stopped"),
            "seconds": card.get("stage_seconds", {}),
            "held_out": {
                "humaneval-test + spec-bench-test (4 + 4 prompts)": {
                    "before": held.get("top1_before"),
                    "after": held.get("top1_after"),
                }
            },
            "config": card.get("build_config", {}),
        }
    ]


def keep_published(cfg: HeadBuildConfig, sha: str) -> None:
    """A copy of the head a stage is about to replace, under its hash (kept once)."""
    copy = Path(cfg.state_dir) / f"{Path(cfg.out).name}-{sha[:16]}"
    if not copy.exists():
        shutil.copytree(cfg.out, copy)


def build_head(cfg: HeadBuildConfig) -> dict:
    validate(cfg)
    check_ours(Path(cfg.out))  # before an hour of work, not after
    torch.manual_seed(cfg.seed)
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    target, tokenizer = load_model(cfg.target, "target", "cpu", pick_dtype(cfg.dtype, "cpu"))
    target.requires_grad_(False)
    log(f"target's linear layers: {pack(target, cfg.pack)}")
    taps = default_taps(target.config.num_hidden_layers)
    rows, data = training_sources(cfg)
    held_rows = held_out_sources(cfg)
    prior = resumed(cfg, target, taps) if cfg.resume else None
    seconds["load"] = round(time.perf_counter() - t0, 1)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    samples = answered(cfg, target, tokenizer, taps, rows, pad, seconds)
    held = answered(cfg, target, tokenizer, taps, held_rows, pad, {})
    texts, fixed_info = fixed(cfg, target, tokenizer, taps, seconds)
    every = [s for name in ANSWER_SOURCES for s in samples[name]]
    vocab = target.get_output_embeddings().weight.shape[0]
    if prior is None:
        vocab_ids, coverage = pick_vocab(every + texts, min(cfg.draft_vocab_size, vocab), vocab)  # text after answers
        head = new_head(target, vocab_ids, cfg.seed, cfg.intermediate_size)
        head.config.taps = taps
        optimizer, stages, sha = None, [], None
    else:
        head, vocab_ids, optimizer, stages, sha = prior
        coverage = kept_coverage(every + texts, vocab_ids, vocab)  # this stage's data under the kept vocabulary
    log(
        f"draft vocabulary: {len(vocab_ids)} tokens; coverage of this stage's answers {coverage['coverage']}"
        + (f", of its text {coverage['text_coverage']}" if coverage.get("text_coverage") is not None else "")
    )
    # training needs the target's embedding and its output rows of the draft vocabulary only: the rest of the target
    # (14 GB for a 1.5B model in fp32, packed) is let go, so the machine can measure beside a paused build
    embed = copy.deepcopy(target.get_input_embeddings()).requires_grad_(False)
    out_rows = target.get_output_embeddings().weight[vocab_ids].float().clone()
    del target
    gc.collect()
    trainer = Trainer(head, embed, out_rows, cfg)
    held = {name: [clip_prompt(s, cfg.train_prompt_tokens) for s in ss] for name, ss in held.items()}
    before = {name: evaluate(trainer, ss) for name, ss in held.items()}
    t0 = time.perf_counter()
    result = train(
        trainer,
        [clip_prompt(s, cfg.train_prompt_tokens) for s in every + texts],
        cfg,
        progress,
        [s for ss in held.values() for s in ss],
        optimizer,
    )
    seconds["training"] = round(time.perf_counter() - t0, 1)
    after = {name: evaluate(trainer, ss) for name, ss in held.items()}
    stage = {
        "stage": len(stages) + 1,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "resumed_from_sha256": sha,
        "optimizer": "continued" if optimizer is not None else "fresh",
        "data": {
            **data,
            **{f"{name}_tokens": sum(len(s.tokens) for s in samples[name]) for name in ANSWER_SOURCES},
            "answer_tokens": sum(len(s.tokens) - s.prompt_len for s in every),
            "fixed_text": fixed_info,
        },
        "steps": result["steps"],
        "stopped": result["stopped"],
        "seconds": seconds,
        "held_out": {name: held_figures(before[name], after[name]) for name in held},
        "config": asdict(cfg),
    }
    if sha is not None:
        keep_published(cfg, sha)
    out = save(head, cfg, card(cfg, head, taps, coverage, stage, stages, result))
    new_sha = weights_sha(out)
    Path(cfg.state_dir).mkdir(parents=True, exist_ok=True)
    state_file = Path(cfg.state_dir) / f"{out.name}-{new_sha[:16]}.pt"
    torch.save({"head": head.state_dict(), "optimizer": result["optimizer"]}, state_file.with_suffix(".partial"))
    state_file.with_suffix(".partial").replace(state_file)
    return {
        "out": str(out),
        "stage": stage["stage"],
        "draft_vocab": len(vocab_ids),
        "coverage": coverage["coverage"],
        "held_out_top1_before": before,
        "held_out_top1_after": after,
        "steps": result["steps"],
        "stage_seconds": seconds,
    }


def progress(h: dict) -> None:
    """Every 10th step's loss and training agreement; at each held-out check, what it means for drafting."""
    if h["step"] % 10 == 0:  # agreement is over answer positions: a batch of teacher-forced text alone has none
        top1 = h["top1"] if all(a == a for a in h["top1"]) else "n/a (text only)"
        log(f"step {h['step']} loss {h['loss']} top1 {top1} {h['s']}s")
    if "held_out_top1" in h:
        top1 = h["held_out_top1"]
        log(f"held out at step {h['step']}: position 0 {top1[0] if top1 else 0:.3f}, expected acceptance length "
            f"{expected_length(top1)} at k = 3")  # fmt: skip


def held_figures(before: list[float], after: list[float]) -> dict:
    """A held-out source's top-1 agreement per unroll step and the acceptance length it predicts at k = 3."""
    return {
        "before": before,
        "after": after,
        "expected_length_k3": {"before": expected_length(before), "after": expected_length(after)},
    }


def card(cfg: HeadBuildConfig, head, taps, coverage: dict, stage: dict, stages: list, result: dict) -> dict:
    """The model card: this stage's figures at the top (as readers of the first card expect) and every stage."""
    history = result["history"]
    return {
        "role": "eagle3-head",
        "target": cfg.target,
        "taps": list(taps),
        "parameters": sum(p.numel() for p in head.parameters()),
        "draft_vocab": {"size": int(head.state_dict()["d2t"].numel()), **coverage},
        "data": stage["data"],
        "held_out": stage["held_out"],
        "training": {"steps": result["steps"], "stopped": result["stopped"]},
        "losses": [h["loss"] for h in history],
        "held_out_top1_curve": [
            {"step": h["step"], "s": h["s"], "top1": h["held_out_top1"]} for h in history if "held_out_top1" in h
        ],
        "stage_seconds": stage["seconds"],
        "stages": stages + [stage],
        "torch": torch.__version__,
    }
