"""The Run page's parts for runs a serving engine answered: a concurrency sweep, each server's own counters, and
a watch of a live server's counters over time (its intervals, db: watch_intervals)."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from app import charts, data, sweep_charts, tables
from engine.engines.counters import level_notes


def watch(url: str, info) -> bool:
    """A `engines watch` run: its intervals as a table and acceptance over time; True when this run is one."""
    if "serve_watch" not in info.config:
        return False
    intervals = data.intervals(url, info.id)
    served_by = (info.config.get("engine") or {}).get("engine") or "server"
    st.subheader(f"Watching {served_by}: its spec-decode counters, interval by interval")
    if not intervals:
        st.info("No interval recorded yet.")
        return True
    frame = pd.DataFrame(
        [
            {
                "interval": iv.seq,
                "seconds": iv.seconds,
                "drafts": iv.drafts,
                "draft tokens": iv.draft_tokens,
                "accepted": iv.accepted,
                "acceptance": iv.acceptance,
                "generated tok/s": iv.tokens_per_s,
                "per position (accepted / drafts)": " ".join(f"{a / iv.drafts:.2f}" for a in iv.per_position[:16])
                if iv.drafts
                else "",
            }
            for iv in intervals
        ]
    )
    drafts = sum(iv.drafts for iv in intervals)
    tokens = sum(iv.draft_tokens for iv in intervals)
    accepted = sum(iv.accepted for iv in intervals)
    c = st.columns(3)
    c[0].metric("intervals", f"{len(intervals)}")
    c[1].metric("acceptance", f"{accepted / tokens:.1%}" if tokens else "n/a", help="accepted / draft tokens")
    c[2].metric(
        "mean acceptance length", f"{1 + accepted / drafts:.2f}" if drafts else "n/a", help="1 + accepted / drafts"
    )
    chart = (
        alt.Chart(frame.dropna(subset=["acceptance"]))
        .mark_line(point=True)
        .encode(
            x=alt.X("interval:Q", axis=alt.Axis(**charts.COUNT_AXIS)),
            y=alt.Y("acceptance:Q", scale=alt.Scale(domain=[0, charts.unit_top(frame, "acceptance")])),
            tooltip=["interval", alt.Tooltip("acceptance:Q", format=".3f"), "drafts", "draft tokens"],
        )
    )
    charts.show(chart.properties(height=charts.MIN_HEIGHT), width="stretch")
    tables.show(frame)
    st.caption(
        "Deltas of the server's own counters over each interval, vLLM's definitions: acceptance is accepted "
        "/ draft tokens, per position the drafts whose first i+1 tokens were all accepted over all drafts."
    )
    return True


def server_counters(info) -> None:
    """`engines side-by-side`: each server's own spec-decode counters over the run, per-position curve included."""
    levels = info.config.get("server_counters")
    if not levels:
        return
    st.subheader("Each server's own counters")
    table = pd.DataFrame(
        [
            {
                "server": lv.get("variant") or lv.get("spec_type"),
                "drafts": lv["drafts"],
                "draft tokens": lv["draft_tokens"],
                "accepted": lv["accepted"],
                "acceptance": lv["acceptance"],
                "mean acceptance length": lv["mean_acceptance_length"],
                "per position (accepted / drafts)": " ".join(f"{r:.2f}" for r in lv["per_position"][:16]),
            }
            for lv in levels
        ]
    )
    tables.show(table)
    st.caption(
        "From each llama-server's /metrics before and after the run (vLLM's definitions). The per-request "
        "rows above carry each response's own `draft_n` and `draft_n_accepted`."
    )


def sweep(info) -> None:
    server_counters(info)
    levels = info.config.get("vllm_levels")
    if not levels:
        return
    served = info.config.get("engine") or {"engine": "vllm"}
    st.subheader(f"Concurrency sweep ({served['engine']} server counters)")
    # st.text: the version and command line come from the server and the user's flags
    st.text(
        f"engine {served['engine']} · version {served.get('version') or 'not reported'}"
        + (f" · started as: {served['command']}" if served.get("command") else "")
    )
    charts.show(sweep_charts.sweep_chart(sweep_charts.sweep_frame(levels)), width="content")
    per_request = [lv for lv in levels if lv.get("requests_with_draft_counts")]
    if per_request:
        st.caption(
            "Per request, from each response's timings (`draft_n`, `draft_n_accepted`), against the counters: "
            + "; ".join(
                f"concurrency {lv['concurrency']}: {lv['request_draft_tokens']} drafted and "
                f"{lv['request_accepted']} accepted, counters {lv['draft_tokens']:.0f} and "
                f"{lv['accepted']:.0f}"
                for lv in per_request
            )
        )
    st.caption(
        "Acceptance per level from the server's spec-decode counters scraped before and after the level: "
        "accepted / draft tokens; mean acceptance length 1 + accepted / drafts. Requests per level: "
        + ", ".join(
            f"{lv['concurrency']}: {lv['requests']}" + (f" ({lv['failed']} failed)" if lv.get("failed") else "")
            for lv in levels
        )
    )
    for lv in levels:
        for note in level_notes(lv):
            st.warning(f"Concurrency {int(lv['concurrency'])}: {note}")
