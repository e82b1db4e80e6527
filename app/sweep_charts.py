"""The Sweeps page's charts: a load sweep's throughput against load, latency against throughput with its frontier, and
goodput against load; and a managed engine's concurrency sweep on its Run page. Pure: DataFrames in, Altair charts
out. Every chart names its units, its CPU and its n (in each point's tooltip), and each point opens its level's run."""

from __future__ import annotations

import altair as alt
import pandas as pd

from app.charts import MIN_HEIGHT

LATENCIES = {"ttft_p95_s": "TTFT p95", "ttft_p50_s": "TTFT p50", "tpot_p50_s": "TPOT p50"}


# Tableau 20 without its greys (the frontier's band is grey): 18 colours, none repeated within a chart up to 18
# settings; past that the settings are listed in the table instead of guessed at by colour
PALETTE = [
    "#4c78a8", "#f58518", "#e45756", "#72b7b2", "#54a24b", "#eeca3b", "#b279a2", "#ff9da6", "#9d755d",
    "#9ecae9", "#ffbf79", "#ff9d98", "#88d27a", "#83bcb6", "#d6a5c9", "#fcbfd2", "#d8b5a5", "#b7a97b",
]  # fmt: skip


LEGEND_ROW_PX = 16  # one compact legend row: the chart grows with its legend past about fifteen settings


def _base(frame: pd.DataFrame, title: str) -> alt.Chart:
    df = frame.copy()
    df["open"] = "./run?run=" + df["run_id"].astype(int).astype(str)
    df["load_s"] = df["load_label"] if "load_label" in df else df["load"].map(lambda v: f"{v:g}")
    finite = df.loc[df["load"] != float("inf"), "load"]
    df["load"] = df["load"].where(df["load"] != float("inf"), (finite.max() if len(finite) else 1) * 2)
    height = max(MIN_HEIGHT, 300, LEGEND_ROW_PX * (df["setting"].nunique() + 4))
    text, _, cpu = title.partition(" · ")  # the CPU on a line of its own: a title past the chart's width is cut
    return alt.Chart(df, title=alt.TitleParams(text, subtitle=cpu or None), height=height)


def _color() -> alt.Color:
    # compact rows: at the default size a legend on the right was cut at the chart's height past about ten settings
    legend = alt.Legend(symbolLimit=0, labelLimit=0, labelFontSize=10, symbolSize=40, rowPadding=1)
    return alt.Color("setting:N", title="setting (sweep)", scale=alt.Scale(range=PALETTE), legend=legend)


def _load_axis(frame: pd.DataFrame) -> alt.X:
    kind = frame["load_kind"].iloc[0]
    unbounded = (frame["load"] == float("inf")).any()
    title = kind + (" (unbounded: drawn at twice the highest rate)" if unbounded else "")
    return alt.X("load:Q", title=title, scale=alt.Scale(type="log", base=2))


def _tooltip() -> list:
    return [
        "setting",
        alt.Tooltip("load_s:N", title="load"),
        alt.Tooltip("throughput_tok_s:Q", format=".1f", title="output tok/s"),
        alt.Tooltip("ttft_p50_s:Q", format=".3f", title="TTFT p50 (s)"),
        alt.Tooltip("ttft_p95_s:Q", format=".3f", title="TTFT p95 (s)"),
        alt.Tooltip("tpot_p50_s:Q", format=".4f", title="TPOT p50 (s)"),
        alt.Tooltip("n:Q", title="n (answered)"),
        alt.Tooltip("cached_share:Q", format=".0%", title="prompt tokens cached"),
        alt.Tooltip("cache:N", title="cache scenario"),
        alt.Tooltip("run_id:Q", title="run"),
    ]


def throughput_chart(frame: pd.DataFrame, cpu: str) -> alt.Chart:
    """Output tok/s against load, a line per engine and setting; speculation off solid, on dashed, so the two of
    one engine read as a pair."""
    return (
        _base(frame.dropna(subset=["throughput_tok_s"]), f"Output throughput against load · {cpu}")
        .mark_line(point=True)
        .encode(
            x=_load_axis(frame),
            y=alt.Y("throughput_tok_s:Q", title="output tokens/s"),
            color=_color(),
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
            color=_color(),
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


def goodput_chart(frame: pd.DataFrame, cpu: str, slo: str) -> alt.Chart:
    """Requests/s meeting every SLO against load; ``slo`` names the SLO the runs counted goodput against."""
    return (
        _base(frame.dropna(subset=["goodput_req_s"]), f"Goodput against load, within {slo} · {cpu}")
        .mark_line(point=True)
        .encode(
            x=_load_axis(frame),
            y=alt.Y("goodput_req_s:Q", title=f"goodput (requests/s within {slo})"),
            color=_color(),
            strokeDash=alt.StrokeDash("speculation:N", sort=["off", "on"]),
            href="open:N",
            tooltip=_tooltip(),
        )
    )


def sweep_frame(levels: list[dict]) -> pd.DataFrame:
    rows = []
    for lv in levels:
        rows.append(
            {"concurrency": lv["concurrency"], "metric": "throughput (tok/s)", "value": lv["throughput_tokens_per_s"]}
        )
        if lv.get("acceptance") is not None:
            rows.append({"concurrency": lv["concurrency"], "metric": "acceptance", "value": lv["acceptance"]})
            rows.append(
                {
                    "concurrency": lv["concurrency"],
                    "metric": "mean acceptance length",
                    "value": lv["mean_acceptance_length"],
                }
            )
    return pd.DataFrame(rows, columns=["concurrency", "metric", "value"])


def sweep_chart(df: pd.DataFrame) -> alt.FacetChart:
    """A vLLM concurrency sweep: throughput and acceptance by level, each on its own scale."""
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=alt.X("concurrency:O", title="concurrency"),
            y=alt.Y("value:Q", title=None),
            tooltip=["concurrency", "metric", alt.Tooltip("value:Q", format=".3f")],
        )
        .properties(height=220, width=260)
        .facet(column=alt.Column("metric:N", title=None))
        .resolve_scale(y="independent")
    )
