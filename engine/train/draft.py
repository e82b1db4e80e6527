"""`zoo build-draft smollm2`: a small draft trained here to predict the real target.

With a 49,152-token vocabulary the output layer dominates a small draft's cost, so the
draft is narrow (its tied embedding is the target's, projected onto its top principal
directions) and shallow. Two stages:

1. KL to the target's next-token distribution on code: the interpreter's standard
   library and the HumanEval *train* prompts in the target's chat format;
2. the target's own greedy chat answers (HumanEval train prompts plus stdlib functions
   posed the same way), learned token by token: greedy speculation accepts exactly
   these tokens, and a draft that only saw source files learns a different text.

The held-out test split is checked out by id and by text before any training.
"""

from __future__ import annotations

import ast
import json
import time
from dataclasses import asdict
from pathlib import Path

from engine.catalog import SMOLLM2, SMOLLM2_DRAFT
from engine.decode.decoder import format_prompt
from engine.decode.loading import load_model, pick_dtype
from engine.errors import PhoenixError
from engine.paths import check_ours
from engine.prompts.sets import humaneval, split
from engine.train.config import DraftConfig
from engine.train.zoo import save_model, stdlib_texts, train_lm, train_on_sequences


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
        raise PhoenixError(
            f"{len(leaked)} held-out HumanEval prompt(s) appear in the stdlib corpus (first: {leaked[0]})"
        )
    ids = tokenizer(joined, add_special_tokens=False)["input_ids"]
    for p in train:
        ids += format_prompt(tokenizer, p.text)
    return ids, {
        "stdlib_files": len(texts),
        "humaneval_train_prompts": len(train),
        "tokens": len(ids),
        "held_out_checked": len(test),
    }


def stdlib_functions(texts: list[str]) -> list[str]:
    """Stdlib functions with docstrings, cut after the docstring: HumanEval's shape of prompt."""
    out = []
    for text in texts:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines()
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or len(node.body) < 2:
                continue
            doc = node.body[0]
            if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and isinstance(doc.value.value, str):
                out.append("\n".join(lines[node.lineno - 1 : doc.end_lineno]) + "\n")
    return out


def answer_prompts(limit: int) -> list[str]:
    """HumanEval train prompts, then stdlib functions; none equal to or containing a held-out prompt."""
    train, test = split(humaneval())
    # short functions first after HumanEval: a long docstring costs the target's answer time, not answer tokens
    texts = [p.text for p in train] + sorted(stdlib_functions(stdlib_texts()), key=len)
    held_out = [p.text.strip() for p in test]
    return [t for t in texts if not any(h in t for h in held_out)][:limit]


def target_answers(teacher, tokenizer, texts: list[str], cfg: DraftConfig) -> list[tuple[list[int], int]]:
    """(chat prompt + the target's greedy answer, prompt length), generated in left-padded batches."""
    import torch
    from tqdm import tqdm

    prompts = [format_prompt(tokenizer, t) for t in texts]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out = []
    with torch.inference_mode():
        for start in tqdm(range(0, len(prompts), cfg.answer_batch), desc="target answers"):
            chunk = prompts[start : start + cfg.answer_batch]
            width = max(map(len, chunk))
            x = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
            gen = teacher.generate(
                input_ids=x, attention_mask=mask, max_new_tokens=cfg.answer_tokens, do_sample=False, pad_token_id=pad
            )
            for p, row in zip(chunk, gen[:, width:].tolist()):
                answer = row[: row.index(tokenizer.eos_token_id) + 1] if tokenizer.eos_token_id in row else row
                out.append((p + answer, len(p)))
    return out


def draft_config(target_config, cfg: DraftConfig):
    config = target_config.__class__(
        **{
            **target_config.to_dict(),
            "hidden_size": cfg.hidden,
            "intermediate_size": cfg.ffn,
            "num_hidden_layers": cfg.layers,
            "num_attention_heads": cfg.heads,
            "num_key_value_heads": cfg.kv_heads,
            "head_dim": cfg.hidden // cfg.heads,
            "tie_word_embeddings": True,
        }
    )
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
    check_ours(Path(cfg.out))  # before the teacher loads and 30 minutes of training
    t0 = time.perf_counter()
    teacher, tokenizer = load_model(cfg.target, "target", "cpu", pick_dtype(cfg.teacher_dtype, "cpu"))
    ids, data = corpus_ids(tokenizer)
    torch.manual_seed(cfg.seed)
    if cfg.init_from:
        draft = AutoModelForCausalLM.from_pretrained(cfg.init_from, dtype=torch.float32)
    else:
        draft = AutoModelForCausalLM.from_config(draft_config(teacher.config, cfg), dtype=torch.float32)
        init_embedding(draft, teacher)
    seconds = {"prepare": time.perf_counter() - t0}
    losses, answer_losses, answers = [], [], []
    if cfg.steps:
        t0 = time.perf_counter()
        losses = train_lm(
            draft,
            torch.tensor(ids, dtype=torch.long),
            cfg,
            cfg.steps,
            cfg.batch,
            cfg.lr,
            cfg.seed,
            "draft (KL to the target)",
            teacher=teacher,
        )
        seconds["distill"] = time.perf_counter() - t0
    if cfg.seq_steps and cfg.answer_prompts:
        t0 = time.perf_counter()
        answers = target_answers(teacher, tokenizer, answer_prompts(cfg.answer_prompts), cfg)
        seconds["answers"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        answer_losses = train_on_sequences(draft, answers, cfg)
        seconds["answers_training"] = time.perf_counter() - t0
    data["answers"] = {"prompts": len(answers), "answer_tokens": sum(len(s) - n for s, n in answers)}
    card = {
        "role": "draft",
        "name": SMOLLM2_DRAFT if cfg.target == SMOLLM2 else Path(cfg.out).name,
        "teacher": cfg.target,
        "parameters": sum(p.numel() for p in draft.parameters()),
        "data": data,
        "kl_loss": losses,
        "answers_loss": answer_losses,
        "stage_seconds": {k: round(v, 1) for k, v in seconds.items()},
        "draft_config": asdict(cfg),
        "torch": torch.__version__,
    }
    if cfg.init_from:
        card["init_from"] = _card(cfg.init_from)
    save_model(draft, tokenizer, Path(cfg.out), cfg, card)
    return {
        "out": cfg.out,
        "parameters": card["parameters"],
        "tokens": data["tokens"],
        "kl_last_loss": losses[-1] if losses else None,
        "answers_last_loss": answer_losses[-1] if answer_losses else None,
        "stage_seconds": card["stage_seconds"],
    }


def _card(path: str) -> dict:
    """The starting draft's own card, so the chain of builds stays on record."""
    f = Path(path) / "phoenix_card.json"
    return json.loads(f.read_text()) if f.is_file() else {"path": path}
