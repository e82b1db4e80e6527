"""Fleet: replicas `fleet start` ran behind vllm-router. The router's policy, each replica's load and prefix-cache hit
rate over time, what each answered, and the load runs measured through the router beside the plan's prediction for
them (`fleet plan --validate`). A replica's own run opens from its row."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from app import charts, data, provenance, tables, urlstate
from engine.analysis import fleet as F


def pick(found: list[F.Fleet]) -> F.Fleet:
    names = [f"{f.name} · {f.policy} · {len(f.replicas)} replica(s)" for f in found]
    asked = urlstate.qp("fleet")
    index = next((i for i, f in enumerate(found) if f.name == asked), 0)
    chosen = st.selectbox("Fleet", range(len(found)), index=index, format_func=names.__getitem__, key="fleet_pick")
    urlstate.set_qp(fleet=found[chosen].name)
    return found[chosen]


FULL = 320  # each chart at full size: the two once shared 160 px and could not be read


def over_time(url: str, fleet: F.Fleet, cpu: str) -> None:
    steps = {r.name: data.serve_steps(url, r.id) for r in fleet.replicas}
    requests = {r.name: data.served_requests(url, r.id) for r in fleet.replicas}
    load = F.load_over_time(steps)
    if not load.empty:
        chart = (
            alt.Chart(load, title=f"Requests running per replica (mean per 5 s of its loop) · {cpu}")
            .mark_line(point=True)
            .encode(
                x=alt.X("seconds:Q", title="seconds since the replica's loop started"),
                y=alt.Y("running:Q", title="requests running (mean batch)"),
                color=alt.Color("replica:N"),
                tooltip=["replica", "seconds", alt.Tooltip("running:Q", format=".2f")],
            )
            .properties(height=FULL)
        )
        charts.show(chart, width="stretch")
    hits = F.hit_rate_over_time(requests)
    if not hits.empty:
        chart = (
            alt.Chart(hits, title=f"Prefix-cache hit rate so far, per replica · {cpu}")
            .mark_line()
            .encode(
                x=alt.X("request:Q", title="requests answered by the replica (n)"),
                y=alt.Y(
                    "hit rate so far:Q", title="share of requests with a prefix hit", scale=alt.Scale(domain=[0, 1])
                ),
                color=alt.Color("replica:N"),
                tooltip=["replica", "request", alt.Tooltip("hit rate so far:Q", format=".2f")],
            )
            .properties(height=FULL)
        )
        charts.show(chart, width="stretch")
    else:
        st.caption("No request of these replicas recorded its prefix-cache tokens (a fleet run without the cache).")


def render() -> None:
    url = data.db_url()
    st.title("Fleet")
    runs = data.all_runs(url)
    found = F.fleets(runs)
    if not found:
        st.info("No fleet yet: `fleet start` runs replicas behind vllm-router, each recording its own live run.")
        st.code(
            "python -m engine fleet start --replicas 2 --router cache_aware --target smollm2 --draft none "
            "--drafter ngram",
            language="bash",
        )
        return
    fleet = pick(found)
    env = (fleet.replicas[0].config or {}).get("environment") or {}
    cpu = provenance.cpu_text(env)
    st.text(  # stored strings (a replica's --router, its target) are text, never Markdown: no link or image drawn
        f"Router {fleet.policy} at {fleet.url or 'not recorded'} · {len(fleet.replicas)} replica(s) of "
        f"{fleet.target} · {cpu}"
    )
    rows = [F.replica_row(r, data.served_requests(url, r.id), data.prefix_rows(url, r.id)) for r in fleet.replicas]
    tables.show(pd.DataFrame(rows), name="fleet_replicas", formats=FORMATS)
    st.caption("Each replica is its own live run: open it on the Run page by its number.")
    over_time(url, fleet, cpu)
    measured = F.through_router(runs, fleet)
    st.subheader("Load runs through the router")
    if not measured:
        st.caption("No `engines load --url` run was sent to this router's address.")
    else:
        tables.show(
            pd.DataFrame([{"run": r.id, "name": r.name, "status": r.status} for r in measured]), name="fleet_loads"
        )
        plan = F.plan_against_measured(measured)
        if plan.empty:
            st.caption("No plan was validated against these runs yet: `python -m engine fleet plan --source "
                       "REPLICA_RUN --validate LOADRUN:REPLICAS`.")  # fmt: skip
        else:
            st.markdown("**The plan's prediction against the measurement** (`fleet plan --validate`)")
            tables.show(plan, name="fleet_plan", formats=PLAN_FORMATS)
    urlstate.show_share_link("fleet")


FORMATS = {"prefix hit rate": "%.2f", "prompt tokens from cache": "%.2f", "TTFT p50 (ms)": "%.0f"}
PLAN_FORMATS = {
    "tok/s measured": "%.1f",
    "tok/s predicted": "%.1f",
    "tok/s error": "%.2f",
    "TTFT p50 measured (ms)": "%.0f",
    "TTFT p50 predicted (ms)": "%.0f",
    "TTFT error": "%.2f",
    "tok/s naive": "%.1f",
    "tok/s naive error": "%.2f",
    "TTFT naive (ms)": "%.0f",
    "TTFT naive error": "%.2f",
    "cached share predicted": "%.2f",
    "cached share measured": "%.2f",
    "rate": "%.2f",
}


render()
