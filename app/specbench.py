"""The Run page's Spec-Bench part: the leaderboard's table per column group, and acceptance per position per
column."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import charts, data, tables, widgets
from engine.bench.leaderboard import COLUMN_TITLES


def columns(url: str, run_id: int) -> None:
    """Spec-Bench's leaderboard shape, with n and Welch's p in every cell, and acceptance per position per column."""
    table = data.spec_bench(url, run_id)
    if table.empty:
        return
    st.subheader("Spec-Bench: per column group")
    tables.show(
        compact_spec_bench(table),
        name="spec_bench",
        formats={"x target": "%.2fx", "mean accepted": "%.2f", "tok/s": "%.1f", "p_value": "%.4f"},
    )
    st.caption(
        "Median per-prompt speedup against target-only in this run, with its 95% interval (bootstrap), its "
        "IQR and n requests; Welch's "
        "t-test of tokens/s against target-only on the same prompts; mean accepted tokens per verify step, "
        "bonus included (1.00 for target-only). `python -m engine report RUN --by column --format md` prints "
        "the same table in the leaderboard's shape."
    )
    widgets.csv_download(table, f"run{run_id}-spec-bench", key="dl_sb")
    curves = data.spec_bench_positions(url, run_id)
    if not curves.empty:
        charts.show(charts.column_position_chart(curves), width="content")


def compact_spec_bench(table):
    """The leaderboard table narrow enough for a 1280 px screen: each interval in one cell, the figures a reader
    compares with another column group's kept as numbers. The CSV keeps every column apart."""

    def span(lo, hi) -> str:
        return "" if lo is None or hi is None or lo != lo or hi != hi else f"{lo:.2f}-{hi:.2f}"

    return pd.DataFrame(
        {
            "mode": table["mode"],
            "column": table["column"].map(COLUMN_TITLES),
            "speedup": table["speedup"],
            "95% CI": [span(lo, hi) for lo, hi in zip(table["ci_low"], table["ci_high"])],
            "IQR": [span(lo, hi) for lo, hi in zip(table["p25"], table["p75"])],
            "n": table["n"],
            "mean accepted": table["mean_accepted"],
            "tok/s": table["tokens_per_s"],
            "p_value": table["p_value"],
        }
    ).rename(columns={"speedup": "x target"})
