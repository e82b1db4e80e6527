"""The per-prompt oracle (Run and Policies pages) and a hybrid drafter's passes by source (Run page)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import charts, data, tables, widgets
from engine.analysis.oracle import ORACLE, ORACLE_NOTE
from engine.modes import Mode


def compact(table: pd.DataFrame) -> pd.DataFrame:
    """Each share with its IQR in one cell; the CSV keeps the columns apart."""

    def share(r) -> str:
        if r["mode"] == ORACLE:
            return "1"
        if pd.isna(r["share of oracle"]):
            return ""
        return f"{r['share of oracle']:.3f} ({r['share p25']:.3f}-{r['share p75']:.3f})"

    return pd.DataFrame(
        {
            "mode": table["mode"],
            "n": table["n"],
            "x reference": table["x reference"],
            "share of oracle (IQR)": [share(r) for _, r in table.iterrows()],
            "oracle picks": table["oracle picks"],
        }
    )


def panel(url: str, run_id: int, policies_only: bool = False) -> None:
    """The oracle's row and every mode's share of it; on the Policies page, the policies and the best fixed modes
    only. Nothing where the run has fewer than two fixed modes."""
    table = data.oracle(url, run_id)
    if table.empty:
        return
    shown = table
    if policies_only:
        fixed = table["oracle picks"].notna() & (table["mode"] != ORACLE)
        best = table[fixed].sort_values("share of oracle", ascending=False).head(3)["mode"]
        keep = (table["mode"] == ORACLE) | table["mode"].map(lambda m: Mode.of(m).is_bandit) | table["mode"].isin(best)
        shown = table[keep]
    st.subheader("Against the oracle")
    tables.show(compact(shown), name="oracle", formats={"x reference": "%.2fx"}, widths={"share of oracle (IQR)": 180})
    st.caption(
        ORACLE_NOTE
        + ". x reference is the speedup every page shows (the median of per-prompt ratios against the reference "
        "mode). `python -m engine report RUN --by oracle` prints the same table."
    )
    widgets.csv_download(table, f"run{run_id}-oracle", key="dl_oracle")


def sources(url: str, run_id: int) -> None:
    """A hybrid's passes by the source that drafted them, and acceptance per position per source."""
    table = data.sources(url, run_id)
    if table.empty:
        return
    st.subheader("Acceptance per source (hybrid)")
    tables.show(
        table,
        name="sources",
        formats={"share of passes": "%.2f", "acceptance": "%.3f", "accepted per pass": "%.2f"},
    )
    st.caption(
        "Each pass of a hybrid mode drafts from one source: the suffix trees when their score (the tokens they "
        "expect accepted) reaches the run's hybrid min score, the EAGLE-3 head otherwise. acceptance: accepted "
        "drafted tokens over drafted tokens of that source's passes. `python -m engine report RUN --by source` "
        "prints the same table."
    )
    pos = data.source_positions(url, run_id)
    if not pos.empty:
        frame, _ = charts.acceptance_frame(pos)
        charts.show(charts.acceptance_chart(frame), width="stretch")
    widgets.csv_download(table, f"run{run_id}-sources", key="dl_sources")
