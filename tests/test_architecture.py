"""The plan of the house, enforced: dependencies run one way, no cycles, no hidden imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [p for folder in ("engine", "db", "app") for p in (ROOT / folder).rglob("*.py")] + [
    ROOT / "migrations" / "env.py"
]
BASE = {
    "engine.errors",
    "engine.config",
    "engine.modes",
    "engine.paths",
    "engine.catalog",
    "engine.provenance",
    "engine.runspec",  # what ran: read by every layer that compares runs
    "engine.speculation",  # the one grammar of speculation's spellings, part of what ran
    "engine.preload",  # what a process runs with preloaded: recorded by provenance, set by serve
}
SHAPE = {"engine.measure"}  # one request as measured: imports nothing, so every layer may build on it, db included

# package -> the packages it may import (itself included). Read top-down: nothing below imports anything above.
# Both servers (Phoenix's own, and the managers and clients of other engines) stand on the same layers.
SERVING = {"shape", "base", "prompts", "decode", "analysis", "db", "observe", "record", "bench", "queue"}
LIBRARY = SERVING | {"policies", "export", "train", "serve", "engines", "imports"}  # everything a front end may call
ALLOWED = {
    "shape": {"shape"},
    "base": {"shape", "base"},
    "prompts": {"shape", "base", "prompts"},
    "decode": {"shape", "base", "prompts", "decode"},
    "policies": {"shape", "base", "policies"},
    "analysis": {"shape", "base", "analysis"},
    "db": {"shape", "db"},
    "migrations": {"shape", "db"},
    "observe": {"shape", "base", "observe"},
    "record": {"shape", "base", "prompts", "decode", "db", "record"},  # rows and their writing, below both doors
    "bench": {"shape", "base", "prompts", "decode", "policies", "analysis", "db", "observe", "record", "bench"},
    "queue": {
        "shape",
        "base",
        "prompts",
        "decode",
        "policies",
        "analysis",
        "db",
        "observe",
        "record",
        "bench",
        "queue",
    },
    "export": {"shape", "base", "analysis", "db", "bench", "export"},
    "train": {"shape", "base", "prompts", "decode", "analysis", "db", "record", "bench", "train"},
    "serve": SERVING | {"serve"},
    "engines": SERVING | {"engines"},
    "imports": {"shape", "base", "analysis", "db", "engines", "imports"},  # other tools' results, as runs
    "cli": LIBRARY | {"cli"},
    "app": (LIBRARY - {"observe", "export", "train"}) | {"app"},  # it reads runs: it neither trains nor exports
    "entry": {"shape", "cli"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package(module: str) -> str:
    if module in SHAPE:
        return "shape"
    if module in BASE:
        return "base"
    if module in ("engine", "engine.__main__"):
        return "entry"
    head, _, rest = module.partition(".")
    if head == "engine":
        return rest.split(".")[0]
    return "migrations" if head == "migrations" else head


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def targets(node: ast.AST) -> list[str]:
    """Project modules an import statement loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        names = [f"{node.module}.{a.name}" if is_module(f"{node.module}.{a.name}") else node.module for a in node.names]
    else:
        return []
    return [n for n in names if n.split(".")[0] in ("engine", "db", "app", "migrations") and is_module(n)]


def imports(path: Path) -> tuple[list[str], list[tuple[int, str]]]:
    """(module-level project imports, function-local ones with their line numbers)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top, local = [], []
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inside = {id(n) for f in functions for n in ast.walk(f) if n is not f}
    for node in ast.walk(tree):
        for target in targets(node):
            (local.append((node.lineno, target)) if id(node) in inside else top.append(target))
    return top, local


GRAPH = {module_name(p): imports(p) for p in SOURCES}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_dependencies_run_one_way(module):
    top, local = GRAPH[module]
    allowed = ALLOWED[package(module)]
    bad = sorted({t for t in top + [t for _, t in local] if package(t) not in allowed})
    assert not bad, f"{module} ({package(module)}) may not import {bad}"


def test_decode_and_policies_know_nothing_of_storage_runs_or_ui():
    for module, (top, local) in GRAPH.items():
        if package(module) in ("decode", "policies"):
            below = (
                ("shape", "base", "prompts", package(module))
                if package(module) == "decode"
                else ("shape", "base", "policies")
            )
            assert all(package(t) in below for t in top + [t for _, t in local]), module


def test_there_is_no_import_cycle():
    """Imports inside functions count too: a function-local import must not hide a circle."""
    graph = {m: {t for t in top + [t for _, t in local] if t != m} for m, (top, local) in GRAPH.items()}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in graph.get(m, ()):
            if state.get(t) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(t) :] + [t]))
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_function_local_project_imports_say_why():
    """Allowed only to keep a heavy optional dependency off a path that does not need it, marked `# lazy:`."""
    unexplained = []
    for path in SOURCES:
        lines = path.read_text(encoding="utf-8").splitlines()
        for lineno, target in imports(path)[1]:
            if "# lazy:" not in lines[lineno - 1]:
                unexplained.append(f"{path.relative_to(ROOT)}:{lineno} imports {target}")
    assert not unexplained, unexplained


def test_dashboard_pages_are_scripts_that_no_module_imports():
    pages = {module_name(p) for p in (ROOT / "app" / "views").glob("*.py") if p.name != "__init__.py"}
    importers = {m for m, (top, local) in GRAPH.items() if pages & set(top + [t for _, t in local])}
    assert not importers, importers
