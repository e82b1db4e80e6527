"""Sweeps: a load sweep as one picture. Which engine and speculation setting is fastest at my load, within my
latency target, on this CPU: throughput against load, latency against throughput with the frontier, the best
setting at each load (by how much, with the interval from paired blocks), and where each setting stops meeting
the SLO typed here. Several sweeps (an engine each) draw together; two models or two CPUs never share a chart."""

from __future__ import annotations

import streamlit as st

from app import across, data, sweep_charts, tables, urlstate, widgets
from app.charts import show
from engine.analysis.sweeps import best_at_each_load, best_within, frontier, slo_table


def chosen_sweeps(options: dict[int, tuple[str, str]], url: str) -> list[int]:
    """The sweeps in the link (by their first runs' ids), else the newest sitting: the newest sweep of several
    levels with every other engine's sweep measured beside it (engine.analysis.sweeps.sitting)."""
    asked = [urlstate.whole(i) for i in urlstate.qp("sweeps").split(",")]
    by_key = {key: i for i, (key, _) in options.items()}
    return [i for i in asked if i in options] or [by_key[k] for k in across.sweep_sitting(url) if k in by_key]


def slos() -> dict[str, float]:
    c1, c2, c3 = st.columns(3)
    out = {}
    for col, key, label in (
        (c1, "ttft_p95", "TTFT p95 within (ms, 0: no target)"),
        (c2, "ttft_p50", "TTFT p50 within (ms)"),
        (c3, "tpot_p50", "TPOT p50 within (ms)"),
    ):
        default = urlstate.whole(urlstate.qp(key, "0"), 0, 10**7) or 0
        value = col.number_input(label, min_value=0, max_value=10**7, value=default, step=50, key=f"slo_{key}")
        urlstate.set_qp(**{key: int(value) or None})
        if value:
            out[key] = float(value)
    return out


def render() -> None:
    url = data.db_url()
    st.title("Sweeps")
    options = across.sweep_labels(url)
    if not options:
        st.info("No runs yet: a sweep is one `python -m engine engines load` (or side-by-side) invocation.")
        st.code("python -m engine engines load --url http://127.0.0.1:8000 --concurrency 1,2,4,8", language="bash")
        return
    picked = st.multiselect(
        "Sweeps (one per engine, say)",
        list(options),
        default=chosen_sweeps(options, url),
        format_func=lambda i: options[i][1],
        key="sweeps",
    )
    urlstate.set_qp(sweeps=",".join(str(i) for i in picked))
    if not picked:
        st.caption("Pick one sweep or more.")
        return
    frame = across.sweep_points(url)
    frame = frame[frame["sweep"].isin([options[i][0] for i in picked])]
    runs_by_id = data.runs_by_id(url, tuple(sorted(frame["run_id"].unique().tolist())))
    target = slos()
    latency = st.radio(
        "Latency axis", list(sweep_charts.LATENCIES), format_func=sweep_charts.LATENCIES.get, horizontal=True,
        key="sweep_latency",
    )  # fmt: skip
    for (model, cpu, cache, work, kind), g in frame.groupby(["model", "cpu", "cache", "work", "load_kind"], sort=True):
        st.subheader(f"{model} · {cpu} · {work} · cache: {cache} · by {kind}")
        show(sweep_charts.throughput_chart(g, cpu))
        show(sweep_charts.latency_chart(g, frontier(g, latency), latency, cpu))
        for slo, gg in g[g["goodput_req_s"].notna()].groupby("goodput_slo"):
            show(sweep_charts.goodput_chart(gg, cpu, slo or "no SLO"))
            st.caption(f"Goodput counts the requests within {slo or 'no SLO'}, the SLO the runs were measured against "
                       "(the SLO typed on this page ranks the tables below).")  # fmt: skip
        st.caption(
            f"n = {int(g['n'].sum())} answered requests over {g['run_id'].nunique()} levels; "
            + cached_words(g)
            + "; weights: "
            + ", ".join(sorted(set(g["weights"])))
            + ". Click a point to open its level's run."
        )
        if g["failed"].any():
            st.warning("Answered nothing (failed, not drawn as 0): " + ", ".join(
                f"{r.setting} at {r.load_label}" for r in g[g["failed"]].itertuples()))  # fmt: skip
    st.subheader("The leading setting at each load, and whether its lead is outside the noise")
    best = best_at_each_load(frame, runs_by_id, latencies=lambda run_id, v: across.variant_latencies(url, run_id, v))
    tables.show(best, name="sweep_best", formats=FORMATS, widths=WIDTHS)
    st.caption(
        "verdict: best only where the 95% interval of the leader's ratio to the runner-up lies above 1 (paired "
        "blocks where both ran on the same prompts in one level, else a bootstrap); tied otherwise, its interval "
        "shown. At a fixed arrival rate the arrivals set throughput: settings are ranked by median end-to-end "
        "latency. x runner-up is the interval's own centre. unequal terms: what else differs (weights, cores)."
    )
    if target:
        said = ", ".join(f"{k.replace('_', ' ').upper()} ≤ {v:g} ms" for k, v in target.items())
        st.subheader(f"Within the SLO: {said}")
        tables.show(best_within(frame, target), name="sweep_within", formats=FORMATS, widths=WIDTHS)
        tables.show(slo_table(frame, target), name="sweep_slo", formats=FORMATS, widths=WIDTHS)
    widgets.csv_download(frame, "sweep-points", key="dl_sweep")
    urlstate.show_share_link("sweeps")


def cached_words(g) -> str:
    """The cached share of prompt tokens beside throughput: what a prefix cache served, per engine."""
    parts = []
    for engine, e in g.groupby("engine"):
        share = e["cached_share"].dropna()
        parts.append(f"{engine} {share.mean():.0%}" if len(share) else f"{engine} not reported")
    return "prompt tokens served from a prefix cache: " + ", ".join(parts)


FORMATS = {
    "tok/s": "%.1f",
    "x runner-up": "%.3fx",
    "tok/s there": "%.1f",
    "TTFT p95 (ms)": "%.0f",
    "TPOT p50 (ms)": "%.1f",
}
WIDTHS = {
    "model": 110,
    "cpu": 120,
    "cache": 90,
    "work": 130,
    "verdict": 90,
    "leader": 170,
    "interval (95%)": 100,
    "runner-up": 170,
    "leading within the SLO": 170,
    "setting": 180,
}


render()
