"""Regressions: every series of runs (the same model, engine, setting, prompts and CPU over time) judged as the
PyTorch HUD judges benchmarks: its newest two points against a baseline window of the points before them."""

from __future__ import annotations

import streamlit as st

from app import across, data, tables, urlstate
from engine.analysis.regressions import BASELINE_WINDOW, LINE, VERDICTS

RULE = (
    f"The rule (the PyTorch HUD's): a series' newest two points are compared with the median of up to "
    f"{BASELINE_WINDOW} points before them; a point is past the line where its throughput is below "
    f"{LINE[True]:.1f}x the baseline, or its median TTFT or TPOT above {LINE[False]:.1f}x. Two points in a row past "
    "the line: regression; the newest only: suspicious; neither: no regression; fewer than three points: "
    "insufficient data. A series is one RunSpec key (engine.runspec): the model and its weights, prompts, tokens, "
    "sampling, load point, cache scenario and CPU, and the setting (speculation, draft, forward path, engine, cores). "
    "A collapse to 0 tokens/s, or a level whose every request failed, is past the line, never dropped."
)


def render() -> None:
    url = data.db_url()
    st.title("Regressions")
    st.caption(RULE)
    table = across.regression_verdicts(url)
    if table.empty:
        st.info("No runs yet: a series needs finished runs of one configuration to judge.")
        return
    counts = table["verdict"].value_counts()
    cols = st.columns(len(VERDICTS))
    for col, verdict in zip(cols, VERDICTS):
        col.metric(verdict, int(counts.get(verdict, 0)))
    shown = st.multiselect(
        "Verdicts shown",
        list(VERDICTS),
        default=[v for v in urlstate.qp("verdict", ",".join(VERDICTS[:3])).split(",") if v in VERDICTS],
        key="reg_verdicts",
    )
    urlstate.set_qp(verdict=",".join(shown))
    view = table[table["verdict"].isin(shown)]
    tables.show(
        view,
        name="regressions",
        formats={"baseline": "%.4g"},
        widths={"setting": 160, "prompts": 200, "cache": 140, "path": 140, "CPU": 160, "runs": 120},
    )
    st.caption(
        f"{len(view)} of {len(table)} series-figures; runs are listed oldest first, the newest two judged. Open one "
        "on the Run page by its number."
    )


render()
