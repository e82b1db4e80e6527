"""Runs: every benchmark run, filtered, sorted and paged in SQL, with live progress for running ones."""

from __future__ import annotations

import math

import streamlit as st

from app import data, tables, urlstate, widgets
from db.entities import RunFilter
from db.queries import RUN_SORTS
from engine.analysis.speedup import SPEEDUP

STATUSES = ["", "queued", "running", "done", "failed", "cancelled", "interrupted"]
PAGE_SIZE = 50


def _choice(options: list[str], wanted: str) -> int:
    return options.index(wanted) if wanted in options else 0


def render() -> None:
    url = data.db_url()
    st.title("Runs")
    c1, c2, c3, c4 = st.columns(4)
    name = c1.text_input("Name contains", value=urlstate.qp_filter("name"), key="f_name", max_chars=urlstate.FILTER_MAX)
    model = c2.text_input(
        "Model contains", value=urlstate.qp_filter("model"), key="f_model", max_chars=urlstate.FILTER_MAX
    )
    status = c3.selectbox("Status", STATUSES, index=_choice(STATUSES, urlstate.qp("status")), key="f_status")
    tags = [""] + data.tags(url)
    tag = c4.selectbox("Tag", tags, index=_choice(tags, urlstate.qp("tag")), key="f_tag")
    s1, s2, s3 = st.columns([2, 1, 1])
    sorts = list(RUN_SORTS) + [data.SPEEDUP_SORT]
    sort = s1.selectbox(
        "Sort by",
        sorts,
        index=_choice(sorts, urlstate.qp("sort", "id")),
        key="f_sort",
        format_func=lambda s: s.replace("_", " "),
    )
    descending = s2.toggle("Descending", value=urlstate.qp("asc") != "1", key="f_desc")
    archived = s3.toggle("Show archived", value=urlstate.qp("archived") == "1", key="f_archived")
    filters = RunFilter(name=name, model=model, status=status, tag=tag, archived=archived)
    total = data.runs_total(url, filters)
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = st.number_input(
        f"Page (of {pages}; {total:,} runs)", 1, pages, min(urlstate.qp_int("page") or 1, pages), key="f_page"
    )
    urlstate.set_qp(
        name=name,
        model=model,
        status=status,
        tag=tag,
        archived="1" if archived else None,
        sort=None if sort == "id" else sort,
        asc=None if descending else "1",
        page=None if page == 1 else page,
    )
    if total == 0 and not any((name, model, status, tag)) and data.runs_total(url, RunFilter(archived=True)) == 0:
        widgets.empty_state()
        return
    table(url, filters, sort, descending, int(page))
    with st.expander("Quick demo"):  # reachable from home once runs exist too
        widgets.demo_buttons("more")
    urlstate.show_share_link("runs")


@st.fragment(run_every="3s")
def table(url: str, filters: RunFilter, sort: str, descending: bool, page: int) -> None:
    df = data.runs(url, filters, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE, sort=sort, descending=descending)
    if df.empty:
        st.warning("No run matches these filters.")
        return
    for r in df[df["status"].isin(["running", "queued"])].itertuples():
        frac = r.progress_done / r.progress_total if r.progress_total else 0.0
        st.progress(min(frac, 1.0), text=f"run #{r.id}: {r.status}, {r.progress_done}/{r.progress_total} requests")
    view = df[
        [
            "id",
            "name",
            "status",
            "best_speedup",  # the figure people sort by sits where a 1280 px screen shows it
            "best_mode",
            "best_interval",
            "target",
            "draft",
            "modes",
            "prompts",
            "tags",
            "created_at",
            "archived",
        ]
    ].copy()
    view.insert(1, "open", [urlstate.link("run", run=i) for i in view["id"]])
    view.insert(
        len(view.columns) - 2, "requests", [f"{d}/{t}" for d, t in zip(df["progress_done"], df["progress_total"])]
    )
    view["created_at"] = view["created_at"].map(lambda t: t.strftime("%Y-%m-%d %H:%M") if hasattr(t, "strftime") else t)
    tables.show(
        view,
        name="runs",
        formats={"best_speedup": "%.2fx"},
        labels={"best_speedup": "best x reference", "best_mode": "best mode", "best_interval": "best: 95% CI, n"},
        config={"open": st.column_config.LinkColumn("open", display_text="Run page")},
        # long names and interval notes are cut in their cells (the Run page has them whole), not the verdict
        widths={"name": 200, "best_interval": 150},
    )
    st.caption(SPEEDUP + "; each run's best mode other than its reference.")
    widgets.csv_download(view.drop(columns=["open"]), "runs", key="dl_runs")


render()
