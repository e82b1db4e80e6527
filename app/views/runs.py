"""Runs: every benchmark run, filterable, with live progress for running ones."""
from __future__ import annotations

import streamlit as st

from app import data, urlstate, widgets

STATUSES = ["", "queued", "running", "done", "failed", "cancelled", "interrupted"]


def render() -> None:
    url = data.db_url()
    st.title("Runs")
    c1, c2, c3 = st.columns(3)
    name = c1.text_input("Name contains", value=urlstate.qp("name"), key="f_name")
    model = c2.text_input("Model contains", value=urlstate.qp("model"), key="f_model")
    status_now = urlstate.qp("status")
    status = c3.selectbox("Status", STATUSES, index=STATUSES.index(status_now) if status_now in STATUSES else 0, key="f_status")
    urlstate.set_qp(name=name, model=model, status=status)
    if data.runs(url).empty:
        widgets.empty_state()
        return
    table(url, name, model, status)
    urlstate.show_share_link("runs")


@st.fragment(run_every="3s")
def table(url: str, name: str, model: str, status: str) -> None:
    df = data.runs(url, name, model, status)
    if df.empty:
        st.warning("No run matches these filters.")
        return
    for r in df[df["status"].isin(["running", "queued"])].itertuples():
        frac = r.progress_done / r.progress_total if r.progress_total else 0.0
        st.progress(min(frac, 1.0), text=f"run #{r.id}: {r.status}, {r.progress_done}/{r.progress_total} requests")
    view = df[["id", "name", "status", "target", "draft", "modes", "prompts", "best_speedup", "progress_done",
               "progress_total", "created_at"]].copy()
    view.insert(1, "open", [urlstate.link("run", run=i) for i in view["id"]])
    st.dataframe(view, hide_index=True, width="stretch", column_config={
        "open": st.column_config.LinkColumn("open", display_text="Run page"),
        "best_speedup": st.column_config.NumberColumn("best speedup", format="%.2fx"),
    })
    widgets.csv_download(view.drop(columns=["open"]), "runs", key="dl_runs")


render()
