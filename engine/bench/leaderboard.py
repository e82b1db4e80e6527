"""Spec-Bench's leaderboard shape, with what it leaves out: n and a test in every cell.

Spec-Bench reports, per method, the speedup in six column groups (multi-turn conversation, translation,
summarization, QA, math reasoning, RAG), the mean accepted tokens per step and the overall speedup. Here each
cell is the median per-prompt speedup against target-only in the same run (Phoenix's paired figure), with its n,
and Welch's test of the mode's tokens/s against target-only's on the same prompts. Mean accepted tokens counts
the bonus token: 1 + accepted / passes, so 1.00 for target-only.
"""

from __future__ import annotations

import pandas as pd

from engine.analysis.compare import compare
from engine.analysis.speedup import speedups
from engine.measure import tokens_per_pass
from engine.modes import reference_mode
from engine.prompts.sets import SPEC_BENCH_ORDER, spec_bench_column, spec_bench_column_of

OVERALL = "overall"
COLUMN_TITLES = {
    "multiturn": "Multi-turn conversation",
    "translation": "Translation",
    "summarization": "Summarization",
    "qa": "QA",
    "math": "Math reasoning",
    "rag": "RAG",
    OVERALL: "Overall",
}
COLUMNS = [
    "mode",
    "column",
    "speedup",
    "ci_low",
    "ci_high",
    "p25",
    "p75",
    "n",
    "mean_accepted",
    "tokens_per_s",
    "target_tokens_per_s",
    "p_value",
    "verdict",
]  # ci_*: the median's 95% interval (percentile bootstrap)


def in_column(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows of one column group (any rows for OVERALL)."""
    return frame if column == OVERALL else frame[column_of(frame) == column]


def column_of(frame: pd.DataFrame) -> pd.Series:
    """Each request's leaderboard column: from its recorded category, else from a Spec-Bench prompt id."""
    by_id = frame["prompt_id"].map(spec_bench_column_of)
    if "category" not in frame:
        return by_id
    by_category = frame["category"].map(lambda c: spec_bench_column(c) if isinstance(c, str) and c else None)
    return by_category.where(by_category.notna(), by_id)


def leaderboard(frame: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """One row per (mode, column) and per mode overall. ``frame`` has prompt_id, mode, tokens_per_s, passes and
    accepted (category optional). Empty unless the run is Spec-Bench with a target mode."""
    ref = reference_mode(frame["mode"].unique()) if not frame.empty else None
    if ref is None:  # target-only, or a server's own no-speculation mode (llamacpp-none_c1)
        return pd.DataFrame(columns=COLUMNS)
    frame = frame.assign(column=column_of(frame))
    if frame["column"].isna().any():
        return pd.DataFrame(columns=COLUMNS)
    groups = [(c, frame[frame["column"] == c]) for c in SPEC_BENCH_ORDER if (frame["column"] == c).any()]
    rows = []
    for column, part in groups + [(OVERALL, frame)]:
        paired = speedups(part, ref)
        base = part[part["mode"] == ref]
        for mode, g in part.groupby("mode", sort=False):
            rows.append(_row(str(mode), column, g, base, paired.get(str(mode)), alpha, ref))
    return pd.DataFrame(rows, columns=COLUMNS)


def _row(mode: str, column: str, g: pd.DataFrame, base: pd.DataFrame, spread, alpha: float, ref: str) -> dict:
    passes = float(g["passes"].sum())
    same = base[base["prompt_id"].isin(g["prompt_id"])]
    test = compare(same["tokens_per_s"].tolist(), g["tokens_per_s"].tolist(), alpha) if mode != ref else None
    return {
        "mode": mode,
        "column": column,
        "speedup": 1.0 if mode == ref else (spread.median if spread else None),
        "ci_low": spread.low if spread else None,
        "ci_high": spread.high if spread else None,
        "p25": spread.p25 if spread else None,
        "p75": spread.p75 if spread else None,
        "n": len(g),
        "mean_accepted": tokens_per_pass(int(g["accepted"].sum()), passes),  # Spec-Bench's: per decoding step
        "tokens_per_s": float(g["tokens_per_s"].mean()),
        "target_tokens_per_s": float(same["tokens_per_s"].mean()),
        "p_value": test.p_value if test else None,
        "verdict": test.verdict if test else "reference",
    }


def _cell(row: pd.Series) -> str:
    if row["speedup"] is None or row["speedup"] != row["speedup"]:
        return f"n/a (n={row['n']})"
    if row["verdict"] == "reference":
        return f"1.00x (n={row['n']})"
    p = row["p_value"]
    mark = "" if p is None or p != p or p >= 0.05 else "*"
    return f"{row['speedup']:.2f}x{mark} (n={row['n']}, p{_p(p)})"


def _p(p) -> str:
    if p is None or p != p:
        return " n/a"
    return "<0.001" if p < 0.001 else f"={p:.3f}"


def markdown(table: pd.DataFrame) -> str:
    """The leaderboard's shape: modes as rows; the six column groups, mean accepted tokens and overall."""
    if table.empty:
        return ""
    columns = [c for c in SPEC_BENCH_ORDER if c in set(table["column"])]
    head = [COLUMN_TITLES[c] for c in columns] + ["Mean accepted tokens", "Overall"]
    lines = ["| mode | " + " | ".join(head) + " |", "|---|" + "---:|" * len(head)]
    for mode, g in table.groupby("mode", sort=False):
        cells = {r["column"]: r for _, r in g.iterrows()}
        overall = cells[OVERALL]
        acc = overall["mean_accepted"]
        row = [_cell(cells[c]) if c in cells else "" for c in columns]
        row += ["n/a" if acc is None or acc != acc else f"{acc:.2f}", _cell(overall)]
        lines.append(f"| {mode} | " + " | ".join(row) + " |")
    lines += [
        "",
        "Each cell: median per-prompt speedup against target-only in the same run; n requests; p, Welch's "
        "t-test of tokens/s against target-only on the same prompts (* below 0.05). Mean accepted tokens per "
        "verify step counts the bonus token (1.00 for target-only).",
    ]
    return "\n".join(lines)


def per_position(positions: pd.DataFrame) -> pd.DataFrame:
    """Acceptance per draft position, per mode and column: accepted / proposed, with proposed as n."""
    cols = ["mode", "column", "position", "proposed", "accepted", "reached", "acceptance"]
    if positions.empty:
        return pd.DataFrame(columns=cols)
    frame = positions.assign(column=column_of(positions)).dropna(subset=["column"])
    g = frame.groupby(["mode", "column", "position"], sort=True)[["proposed", "accepted", "reached"]].sum(min_count=1)
    g = g.reset_index()
    g = g[g["proposed"] > 0]
    g["acceptance"] = g["accepted"] / g["proposed"]
    return g[cols]
