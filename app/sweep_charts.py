"""The Sweeps page's charts: a load sweep's throughput against load, latency against throughput with its
frontier, and goodput against load. Pure: DataFrames in, Altair charts out. Every chart names its units, its CPU
and its n (in each point's tooltip), and each point opens its level's run."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts import MIN_HEIGHT

LATENCIES = {"ttft_p95_s": "TTFT p95", "ttft_p50_s": "TTFT p50", "tpot_p50_s": "TPOT p50"}


def _base(frame: pd.DataFrame, title: str) -> alt.Chart:
    df = frame.copy()
    df["open"] = "./run?run=" + df["run_id"].astype(int).astype(str)
    df["load_s"] = df["load"].map(lambda v: "inf" if v == float("inf") else f"{v:g}")
    df["load"] = df["load"].where(df["load"] != float("inf"), df.loc[df["load"] != float("inf"), "load"].max() * 2)
    return alt.Chart(df, title=title, height=max(MIN_HEIGHT, 300))


def _tooltip() -> list:
    return [
        "setting",
        alt.Tooltip("load_s:N", title="load"),
        alt.Tooltip("throughput_tok_s:Q", format=".1f", title="output tok/s"),
        alt.Tooltip("ttft_p50_s:Q", format=".3f", title="TTFT p50 (s)"),
        alt.Tooltip("ttft_p95_s:Q", format=".3f", title="TTFT p95 (s)"),
        alt.Tooltip("tpot_p50_s:Q", format=".4f", title="TPOT p50 (s)"),
        alt.Tooltip("n:Q", title="n (answered)"),
        alt.Tooltip("run_id:Q", title="run"),
    ]


def throughput_chart(frame: pd.DataFrame, cpu: str) -> alt.Chart:
    """Output tok/s against load, a line per engine and setting; speculation off solid, on dashed, so the two of
    one engine read as a pair."""
    kind = frame["load_kind"].iloc[0]
    return (
        _base(frame, f"Output throughput against load · {cpu}")
        .mark_line(point=True)
        .encode(
            x=alt.X("load:Q", title=kind, scale=alt.Scale(type="log", base=2)),
            y=alt.Y("throughput_tok_s:Q", title="output tokens/s"),
            color=alt.Color("setting:N", title="engine · setting (sweep)"),
            strokeDash=alt.StrokeDash("speculation:N", title="speculation", sort=["off", "on"]),
            href="open:N",
            tooltip=_tooltip(),
        )
    )


def latency_chart(frame: pd.DataFrame, frontier: pd.DataFrame, latency: str, cpu: str) -> alt.Chart:
    """``latency`` against output tok/s, a line per setting in load order, and the frontier (no point beats one of
    it on both) as a grey band."""
    label = LATENCIES[latency]
    lines = (
        _base(frame, f"{label} against throughput, the frontier in grey · {cpu}")
        .mark_line(point=True)
        .encode(
            x=alt.X("throughput_tok_s:Q", title="output tokens/s"),
            y=alt.Y(f"{latency}:Q", title=f"{label} (s)"),
            color=alt.Color("setting:N", title="engine · setting (sweep)"),
            strokeDash=alt.StrokeDash("speculation:N", sort=["off", "on"]),
            order="load:Q",
            href="open:N",
            tooltip=_tooltip(),
        )
    )
    edge = (
        alt.Chart(frontier)
        .mark_line(color="#bbbbbb", strokeWidth=8, opacity=0.5)
        .encode(x="throughput_tok_s:Q", y=f"{latency}:Q")
    )
    return edge + lines


def goodput_chart(frame: pd.DataFrame, cpu: str) -> alt.Chart:
    kind = frame["load_kind"].iloc[0]
    return (
        _base(frame.dropna(subset=["goodput_req_s"]), f"Goodput against load (requests/s meeting every SLO) · {cpu}")
        .mark_line(point=True)
        .encode(
            x=alt.X("load:Q", title=kind, scale=alt.Scale(type="log", base=2)),
            y=alt.Y("goodput_req_s:Q", title="goodput (requests/s)"),
            color=alt.Color("setting:N", title="engine · setting (sweep)"),
            strokeDash=alt.StrokeDash("speculation:N", sort=["off", "on"]),
            href="open:N",
            tooltip=_tooltip(),
        )
    )
