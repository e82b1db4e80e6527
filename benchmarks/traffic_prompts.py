"""A served prompt distribution the head never trained on, for issue 67's learning-from-traffic check: code-edit
requests (the three changes of ``engine.prompts.edits``) on functions of Alembic, a package the head's recipe
never reads (its fixed text is the standard library and the Python docs; its answers HumanEval's and Spec-Bench's).
The functions are split, not the requests: the first file's functions are served and learned from, the second's
measure the head on code it never saw.

    .venv/bin/python -m benchmarks.traffic_prompts        # writes benchmarks/prompts/traffic-alembic-{train,test}.jsonl

Deterministic for one Alembic version (its version is in each file's ids' prefix); the files are committed, so a
later Alembic does not change the sitting's prompts.
"""

from __future__ import annotations

import ast
import json
import random
from pathlib import Path

from engine.prompts.edits import CHANGES, ask

BOUND = ("self", "cls")  # a method's first parameter is not one a user renames

OUT = Path(__file__).parent / "prompts"
TRAIN, TEST = 200, 50
MIN_LINES, MAX_LINES = 6, 30  # a function a user pastes whole; its edit fits an answer of 128-256 tokens
SEED = 67


def functions(package: Path) -> list[tuple[str, str, str, str]]:
    """(id, name, source, first parameter but self or cls) of every function and method of 6-30 lines in
    ``package``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.end_lineno is None or node.decorator_list:
                continue
            n = node.end_lineno - node.lineno + 1
            named = [a.arg for a in node.args.args if a.arg not in BOUND]
            if MIN_LINES <= n <= MAX_LINES and named:
                body = lines[node.lineno - 1 : node.end_lineno]
                indent = len(body[0]) - len(body[0].lstrip())
                source = "\n".join(line[indent:] for line in body) + "\n"
                rel = path.relative_to(package.parent).with_suffix("")
                found.append((f"{'.'.join(rel.parts)}.{node.name}:{node.lineno}", node.name, source, named[0]))
    return found


def prompt(index: int, name: str, source: str, parameter: str) -> str:
    change = CHANGES[index % len(CHANGES)]
    request = (
        f"Rename the parameter `{parameter}` of `{name}` to `{parameter}_value` everywhere it is used."
        if change == "rename"
        else ask(change, source, name)
    )
    return (
        f"Here is a Python function:\n\n```python\n{source}```\n\n{request} "
        "Reply with the complete function only, in one Python code block."
    )


def main() -> None:
    import alembic

    picked = functions(Path(alembic.__file__).parent)
    random.Random(SEED).shuffle(picked)
    picked = picked[: TRAIN + TEST]
    if len(picked) < TRAIN + TEST:
        raise SystemExit(f"alembic has {len(picked)} functions of {MIN_LINES}-{MAX_LINES} lines; need {TRAIN + TEST}")
    for name, rows in (("train", picked[:TRAIN]), ("test", picked[TRAIN:])):
        path = OUT / f"traffic-alembic-{name}.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for i, (pid, fn, source, parameter) in enumerate(rows):
                f.write(
                    json.dumps(
                        {"id": f"alembic-{alembic.__version__}/{pid}", "prompt": prompt(i, fn, source, parameter)}
                    )
                )
                f.write("\n")
        print(f"{path}: {len(rows)} prompts")


if __name__ == "__main__":
    main()
