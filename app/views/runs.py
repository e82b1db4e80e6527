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
# Two views of one table, each whole on a 1280 px screen (15 columns never were): what a run showed, and how it ran
RESULTS = ("status", "best_speedup", "best_mode", "best_interval")  # the figure people sort by, where it is seen
SETUP = ("target", "draft", "modes", "prompts", "tags", "created_at", "archived")
VIEWS = {
    "results": ["status", "best_speedup", "best_mode", "best_interval", "requests"],
    "setup": ["pair", "modes", "prompts", "tags", "created_at"],
}


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
    baseline = st.number_input(
        "Baseline run: each run's best mode against its best mode, Δ% of tokens/s (0: none)",
        0,
        (1 << 53) - 1,  # the widget's own ceiling
        min(urlstate.qp_int("baseline") or 0, (1 << 53) - 1),
        key="f_baseline",
    )
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
        baseline=int(baseline) or None,
    )
    if total == 0 and not any((name, model, status, tag)) and data.runs_total(url, RunFilter(archived=True)) == 0:
        widgets.empty_state()
        return
    table(url, filters, sort, descending, int(page), int(baseline) or None)
    with st.expander("Quick demo"):  # reachable from home once runs exist too
        widgets.demo_buttons("more")
    urlstate.show_share_link("runs")


@st.fragment(run_every="3s")
def table(url: str, filters: RunFilter, sort: str, descending: bool, page: int, baseline: int | None = None) -> None:
    df = data.runs(url, filters, limit=PAGE_SIZE, offset=(page - 1) * PAGE_SIZE, sort=sort, descending=descending)
    if df.empty:
        st.warning("No run matches these filters.")
        return
    for r in df[df["status"].isin(["running", "queued"])].itertuples():
        frac = r.progress_done / r.progress_total if r.progress_total else 0.0
        st.progress(min(frac, 1.0), text=f"run #{r.id}: {r.status}, {r.progress_done}/{r.progress_total} requests")
    view = df[["id", "name", *RESULTS, *SETUP]].copy()
    view.insert(1, "open", [urlstate.link("run", run=i) for i in view["id"]])
    view.insert(
        view.columns.get_loc("best_interval") + 1,
        "requests",
        [f"{d}/{t}" for d, t in zip(df["progress_done"], df["progress_total"])],
    )
    view["created_at"] = view["created_at"].map(lambda t: t.strftime("%Y-%m-%d %H:%M") if hasattr(t, "strftime") else t)
    view["pair"] = [f"{t} / {d}" if isinstance(d, str) and d else str(t) for t, d in zip(view["target"], view["draft"])]
    view["status"] = [f"{st_} (archived)" if a else st_ for st_, a in zip(view["status"], view["archived"])]
    wanted = urlstate.qp("columns", "results")
    columns = st.segmented_control(
        "Columns",
        list(VIEWS),
        default=wanted if wanted in VIEWS else "results",
        key="f_columns",
        help="the CSV below holds every column",
    )
    urlstate.set_qp(columns=None if columns in (None, "results") else columns)  # the view is part of the link
    shown = (
        ["id", "open", "name", *VIEWS[columns or "results"]] if columns != "setup" else ["id", "name", *VIEWS["setup"]]
    )
    if baseline is not None:
        deltas = data.baseline_deltas(url, baseline, tuple(zip(df["id"].tolist(), df["best_mode"].fillna("").tolist())))
        view = view.merge(deltas, on="id", how="left")
        if columns != "setup":  # in place of the interval and counts: every column stays on a 1280 px screen
            shown = ["id", "open", "name", "best_speedup", "best_mode", *[c for c in deltas.columns if c != "id"]]
    tables.show(
        view[shown],
        name="runs",
        formats={"best_speedup": "%.2fx"},
        labels={
            "best_speedup": "best x reference",
            "best_mode": "best mode",
            "best_interval": "best: 95% CI, n",
            "created_at": "created",
            "pair": "target / draft",
        },
        config={"open": st.column_config.LinkColumn("open", display_text="Run page")},
        # long names, modes and interval notes are cut in their cells (the Run page has them whole): every column
        # of a view stays on a 1280 px screen
        widths={
            "name": 130,
            "best_mode": 160,  # a load level's best mode names engine, setting, level: llamacpp-ngram-simple-n4-m8_c8
            "Δ 95% CI": 80,
            "vs baseline": 100,
            "best_interval": 140,
            "requests": 70,
            "pair": 150,
            "modes": 120,
            "prompts": 100,
            "tags": 60,
        },
    )
    st.caption(SPEEDUP + "; each run's best mode other than its reference.")
    widgets.csv_download(view.drop(columns=["open", "pair"]), "runs", key="dl_runs")


render()
