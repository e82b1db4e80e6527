"""Published figures read from a benchmark's result file, not from a run (the ``limits`` and ``limits-goals``
blocks of engine.export.published): what `python -m benchmarks.limits` wrote, so findings' step-floor table and its
goals are the file's, never typed."""

from __future__ import annotations

import importlib
import json

from engine.errors import PhoenixError
from engine.paths import ROOT


def _result(path: str) -> dict:
    file = (ROOT / path).resolve()
    if ROOT.resolve() not in file.parents or not file.is_file():
        raise PhoenixError(f"a generated block cites {path}, which is not a file in this repository")
    result = json.loads(file.read_text(encoding="utf-8"))
    if result.get("benchmark") != "limits":
        raise PhoenixError(f"{path} is not a benchmarks.limits result")
    return result


def _benchmark():
    """The benchmark's own readers of its file (benchmarks/ is the benchmarks' package, not the engine's: imported
    only where a block reads one of its files)."""
    return importlib.import_module("benchmarks.limits")


def limits(fig, path: str) -> str:
    """ARGS: ``FILE``: each dtype and path's step, the step over its floor, V(2), V(5), V(9), 8 and 16 rows of 5
    tokens in steps, and compile seconds; the fastest step in bold (one file, one sitting: the paths took turns)."""
    bench = _benchmark()
    _cell, _entries, _v = bench._cell, bench._entries, bench._v
    result = _result(path.strip())
    rows = list(_entries(result))
    fastest = min(e["step_s"]["median"] for _, _, e in rows)
    lines = [
        "| dtype | path | step ms | step / floor | V(2) | V(5) | V(9) | 8 rows x 5 tokens | 16 rows x 5 tokens | "
        "compile s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r, name, e in rows:
        step = e["step_s"]["median"] * 1e3
        shown = f"**{step:.1f}**" if e["step_s"]["median"] == fastest else f"{step:.1f}"
        grid = [_cell(e, 8, 5), _cell(e, 16, 5)]
        compile_s = f"{e['compile']['warmup_s']:.0f}" if e.get("compile") else ""
        lines.append(
            f"| {r['dtype']} | {name} | {shown} | {e['step_over_floor']:.2f} | "
            + " | ".join(_shown(_v(e["verify_over_step"], n)) for n in (2, 5, 9))
            + " | "
            + " | ".join("" if g is None else f"{g:.2f}" for g in grid)
            + f" | {compile_s} |"
        )
    return "\n\n" + "\n".join(lines) + "\n\n"


def _shown(value: float) -> str:
    return "" if value != value else f"{value:.2f}"  # a width the file did not measure (NaN) is an empty cell


def limits_goals(fig, path: str) -> str:
    """ARGS: ``FILE``: the benchmark's goals on each dtype's fastest path, as `benchmarks.limits` prints them."""
    return "\n\n" + "\n".join(_benchmark().goals(_result(path.strip()))) + "\n\n"
