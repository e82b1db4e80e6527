"""Compare: runs or modes side by side, with Welch's t-test and a plain verdict."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from app import charts, data, urlstate, widgets
from engine.analysis.stats import welch


def _series_options(url: str, runs: pd.DataFrame) -> list[str]:
    options = []
    for run_id in runs["id"].head(50):
        for m in data.summaries(url, int(run_id)):
            options.append(f"{run_id}:{m.mode}")
    return options


def render() -> None:
    url = data.db_url()
    st.title("Compare")
    runs = data.runs(url)
    if runs.empty:
        widgets.empty_state()
        return
    options = _series_options(url, runs)
    wanted = [s for s in urlstate.qp("series").split(",") if s in options]
    if not wanted:
        first = options[:1] + [o for o in options if o.startswith(options[0].split(":")[0] + ":")][1:2]
        wanted = first
    series = st.multiselect("Series (run:mode); the first is the baseline", options, default=wanted, key="series")
    alpha = st.select_slider("alpha", [0.01, 0.05, 0.1], value=float(urlstate.qp("alpha", "0.05")) if urlstate.qp("alpha", "0.05") in ("0.01", "0.05", "0.1") else 0.05)
    urlstate.set_qp(series=",".join(series), alpha=alpha)
    if len(series) < 2:
        st.info("Pick at least two series.")
        return
    frames = []
    for s in series:
        run_id, mode = s.split(":", 1)
        df = data.rewards(url, int(run_id), (mode,))
        df["series"] = s
        frames.append(df)
    all_rows = pd.concat(frames)
    st.altair_chart(charts.compare_chart(all_rows), width="stretch")
    table = verdicts(frames, alpha)
    st.dataframe(table, hide_index=True, width="stretch")
    widgets.csv_download(table, "compare", key="dl_cmp")
    urlstate.show_share_link("compare")


def verdicts(frames: list[pd.DataFrame], alpha: float) -> pd.DataFrame:
    base = frames[0]
    rows = []
    for other in frames[1:]:
        for metric in ("tokens_per_s", "latency_s"):
            w = welch(base[metric].tolist(), other[metric].tolist(), alpha)
            row = {"baseline": base["series"].iloc[0] if len(base) else "", "series": other["series"].iloc[0] if len(other) else "",
                   "metric": metric, "n baseline": len(base), "n series": len(other)}
            if w is None:
                row.update({"verdict": "too few requests (need 2+ each)"})
            else:
                row.update({"mean baseline": w.mean_a, "mean series": w.mean_b, "difference": w.diff,
                            f"CI low ({1 - alpha:.0%})": w.ci_low, f"CI high ({1 - alpha:.0%})": w.ci_high,
                            "p-value": w.p_value, "verdict": w.verdict})
            rows.append(row)
    return pd.DataFrame(rows)


render()
