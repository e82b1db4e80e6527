"""Altair charts for the Run, Break-even and Compare pages. Pure: DataFrames in, charts out."""

from __future__ import annotations

import altair as alt
import pandas as pd

from engine.analysis.breakeven import fit_a, predicted_speedup, rates, trials
from engine.analysis.fit import reached_of
from engine.analysis.stats import FEW, wilson
from engine.modes import Mode

MIN_HEIGHT = 160  # px: no chart on a page is a sliver
COUNT_AXIS = dict(tickMinStep=1, format="d")  # axes that count decisions: whole numbers only


def show(chart, width: str = "stretch") -> None:
    """Every chart is drawn here: legend, axis and facet labels whole (Vega-Lite cuts them at 160 px or less,
    and bandit:category_thompson and phoenix-eagle3-auto_live are longer)."""
    import streamlit as st

    whole = (
        chart.configure_legend(labelLimit=0, titleLimit=0)
        .configure_axis(labelLimit=0, titleLimit=0)
        .configure_header(labelLimit=0)
        .configure_title(limit=0)
    )
    st.altair_chart(whole, width=width)


def unit_top(df: pd.DataFrame, *columns: str) -> float:
    """The top of a rate axis: 1, or higher when a value is (a bad counter must show, never be clipped away)."""
    values = [float(df[c].max()) for c in columns if c in df and df[c].notna().any()]
    return max([1.0, *values])


ACCEPTANCE_NOTE = (
    "Unconditional: drafts whose first i tokens were all accepted, over all drafts (vLLM's definition). Conditional: "
    "accepted at i given accepted up to i-1. Bars are Wilson 95% intervals over n, the passes a point is a share of; "
    f"hollow points rest on fewer than {FEW} passes. The fitted a is a per-token acceptance: the model says the first "
    "i drafts all survive with probability a^i. The KPI acceptance (accepted / proposed) averages every drafted "
    "position, so at draft length k it is about (a + a^2 + ... + a^k) / k, lower than a: a = 0.6 at k = 4 gives 33%."
)


def arm_label(mode: str, k: int) -> str:
    return Mode.of(mode).arm_label(k)


def acceptance_frame(pos: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, float]]:
    """Per arm and position: unconditional and conditional rates, each with its n (the passes it is a share of)
    and Wilson's 95% interval, and the fitted a^(i+1)."""
    rows, fits = [], {}
    keys = ["mode", "k"] + (["arm"] if "arm" in pos else [])  # an arm column names its own curves (per source)
    for key, g in pos.groupby(keys, sort=True):
        mode, k = key[0], key[1]
        g = g.sort_values("position")
        proposed, accepted = g["proposed"].astype(int).tolist(), g["accepted"].astype(int).tolist()
        reached = reached_of(g)
        uncond, cond = rates(proposed, accepted, reached)
        drafts, bases = trials(proposed, accepted, reached)
        a = fit_a(proposed, accepted, reached)
        arm = str(key[2]) if len(keys) > 2 else arm_label(mode, int(k))
        if a is not None:
            fits[arm] = a
        for i, (u, c, p, acc, base) in enumerate(zip(uncond, cond, proposed, accepted, bases)):
            row = {"arm": arm, "position": i + 1, "proposed": p, "accepted": acc}
            for kind, rate, n in (("unconditional (vLLM)", u, drafts), ("conditional", c, base)):
                low, high = wilson(acc, n) or (float("nan"), float("nan"))
                rows.append({**row, "kind": kind, "rate": rate, "n": n, "low": low, "high": high})
            if a is not None:
                rows.append(
                    {
                        **row,
                        "kind": "fit a^(i+1)",
                        "rate": a ** (i + 1),
                        "n": float("nan"),
                        "low": float("nan"),
                        "high": float("nan"),
                    }
                )
    return pd.DataFrame(rows), fits


def acceptance_chart(df: pd.DataFrame) -> alt.LayerChart:
    """Lines per (arm, kind); Wilson intervals as bars; points from fewer than FEW passes drawn hollow."""
    x = alt.X("position:O", title="draft position")
    top = unit_top(df, "rate", "high")
    y = alt.Y("rate:Q", title="acceptance rate", scale=alt.Scale(domain=[0, top]))
    tooltip = [
        "arm",
        "kind",
        "position",
        alt.Tooltip("rate:Q", format=".3f"),
        "accepted",
        "n",
        alt.Tooltip("low:Q", format=".3f", title="95% low"),
        alt.Tooltip("high:Q", format=".3f", title="95% high"),
    ]
    base = alt.Chart(df).encode(x=x, color=alt.Color("arm:N"))
    line = base.mark_line().encode(
        y=y,
        strokeDash=alt.StrokeDash(
            "kind:N", legend=alt.Legend(symbolType="stroke", symbolStrokeWidth=2, symbolSize=300)
        ),
    )  # the legend shows the dashes
    bars = (
        base.transform_filter("isValid(datum.low)")
        .mark_rule(opacity=0.5)
        .encode(y=alt.Y("low:Q", scale=alt.Scale(domain=[0, top])), y2="high:Q")
    )
    solid = base.transform_filter(f"datum.n >= {FEW}").mark_circle(size=45, opacity=1).encode(y=y, tooltip=tooltip)
    hollow = (
        base.transform_filter(f"isValid(datum.n) && datum.n < {FEW}")
        .mark_point(size=45, filled=False, strokeWidth=1.5)
        .encode(y=y, tooltip=tooltip)
    )
    return alt.layer(line, bars, solid, hollow).properties(height=320)


def _with_links(df: pd.DataFrame, trace_url) -> pd.DataFrame:
    df = df.copy()
    df["trace"] = [trace_url(t) or "" for t in df["trace_id"]]
    return df


def tokens_per_arm_chart(sample: pd.DataFrame, trace_url) -> alt.LayerChart:
    df = _with_links(sample, trace_url)
    df["arm"] = [arm_label(m, k) for m, k in zip(df["mode"], df["k"])]
    base = alt.Chart(df).encode(x=alt.X("arm:N", title="mode / arm"), y=alt.Y("tokens_per_s:Q", title="tokens/sec"))
    box = base.mark_boxplot(extent="min-max", opacity=0.35)
    strip = base.mark_circle(size=28, opacity=0.7).encode(
        color="mode:N",
        href="trace:N",
        tooltip=["mode", "k", "prompt_id", alt.Tooltip("tokens_per_s:Q", format=".2f"), "trace_id", "trace"],
    )
    return (box + strip).properties(height=320)


def time_split_chart(split: pd.DataFrame) -> alt.Chart:
    rows = []
    for r in split.itertuples():
        arm = arm_label(r.mode, int(r.k))
        prefill, draft_prefill = (
            0.0 if v is None or v != v else v for v in (r.prefill_s, r.draft_prefill_s)
        )  # NULL: not recorded
        total = prefill + draft_prefill + r.draft_s + r.verify_s
        for part, secs in (
            ("prefill", prefill),
            ("draft prefill", draft_prefill),
            ("draft", r.draft_s),
            ("verify", r.verify_s),
        ):
            rows.append(
                {
                    "arm": arm,
                    "part": part,
                    "seconds_per_request": secs / r.n,
                    "share_of_request_time": secs / total if total else 0.0,  # each part's, not the draft share
                    "n": r.n,
                }
            )
    return (
        alt.Chart(pd.DataFrame(rows))
        .mark_bar()
        .encode(
            y=alt.Y("arm:N", title="mode / arm"),
            x=alt.X("seconds_per_request:Q", title="seconds per request", stack="zero"),
            color=alt.Color(
                "part:N",
                scale=alt.Scale(
                    domain=["prefill", "draft prefill", "draft", "verify"],
                    range=["#bab0ac", "#ff9da6", "#e45756", "#4c78a8"],
                ),
            ),
            tooltip=[
                "arm",
                "part",
                alt.Tooltip("seconds_per_request:Q", format=".3f"),
                alt.Tooltip("share_of_request_time:Q", format=".0%", title="share of request time"),
                "n",
            ],
        )
        .properties(height=max(MIN_HEIGHT, 40 + 30 * len(split)))
    )


def bandit_charts(history: dict[str, pd.DataFrame], trace_url) -> alt.VConcatChart:
    """Chosen k, the exploration signals and the running mean per arm over decisions, for one policy mode.
    Long runs arrive aggregated into windows (Store.bandit_history): point size is decisions per window."""
    choices = history["choices"].copy()
    choices["trace"] = [trace_url(t) or "" if n == 1 else "" for t, n in zip(choices["trace_id"], choices["n"])]
    choices["decision"] = [
        "explored" if 2 * e >= n else "exploited" for e, n in zip(choices["explored_n"], choices["n"])
    ]
    chosen = (
        alt.Chart(choices)
        .mark_circle()
        .encode(
            x=alt.X("t:Q", title="decision t", axis=alt.Axis(**COUNT_AXIS)),
            y=alt.Y("chosen_k:O", title="chosen k", sort="descending"),
            size=alt.Size("n:Q", title="decisions", legend=None),
            color=alt.Color(
                "decision:N", scale=alt.Scale(domain=["explored", "exploited"], range=["#f58518", "#54a24b"])
            ),
            href="trace:N",
            tooltip=["t", "chosen_k", "n", "explored_n", "decision", "trace_id"],
        )
        .properties(height=180)
    )
    signals = (
        history["signals"].melt(id_vars=["t", "n"], value_vars=["epsilon", "p_not_best"], var_name="signal").dropna()
    )
    signal = (
        alt.Chart(signals)
        .mark_line()
        .encode(
            x=alt.X("t:Q", axis=alt.Axis(**COUNT_AXIS)),
            y=alt.Y("value:Q", title="epsilon / P(not best)"),
            color=alt.Color("signal:N"),
            tooltip=["t", "signal", alt.Tooltip("value:Q", format=".3f"), "n"],
        )
        .properties(height=MIN_HEIGHT)
    )
    means = [
        {"t": r.t, "arm": f"k={a}" if str(a).isdigit() else str(a), "mean_reward": m}  # drafter arms: labels
        for r in history["means"].itertuples()
        for a, m in (r.arm_means or {}).items()
        if (r.arm_counts or {}).get(a, 0) > 0
    ]
    mean_chart = (
        alt.Chart(pd.DataFrame(means or [{"t": 0, "arm": "k=0", "mean_reward": 0.0}]))
        .mark_line()
        .encode(
            x=alt.X("t:Q", axis=alt.Axis(**COUNT_AXIS)),
            y=alt.Y("mean_reward:Q", title="running estimate (tokens/sec)"),
            color="arm:N",
            tooltip=["t", "arm", alt.Tooltip("mean_reward:Q", format=".2f")],
        )
        .properties(height=180)
    )
    # each panel colours its own field: one shared scale with the fixed domain explored/exploited left the
    # signal and running-estimate lines without a colour, so they drew nothing
    # a policy without such a signal (Thompson sampling, UCB1) gets no empty panel: run 80's drew an axis and nothing
    panels = (chosen, signal, mean_chart) if not signals.empty else (chosen, mean_chart)
    return alt.vconcat(*panels).resolve_scale(color="independent")


def latency_chart(sample: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(sample)
        .mark_boxplot(extent=1.5)
        .encode(
            x=alt.X("latency_s:Q", title="latency (s)"),
            y=alt.Y("mode:N", title="mode"),
            color="mode:N",
        )
        .properties(height=max(MIN_HEIGHT, 40 + 30 * sample["mode"].nunique()))
    )


def breakeven_chart(a: float, c: float, k_max: int, measured: pd.DataFrame | None = None) -> alt.LayerChart:
    curve = pd.DataFrame({"k": list(range(k_max + 1))})
    curve["predicted speedup"] = [predicted_speedup(a, c, k) for k in curve["k"]]
    line = (
        alt.Chart(curve)
        .mark_line(point=True)
        .encode(
            x=alt.X("k:Q", title="draft length k"),
            y=alt.Y("predicted speedup:Q", title="speedup vs target"),
            tooltip=["k", alt.Tooltip("predicted speedup:Q", format=".2f")],
        )
    )
    rule = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    layers = [line, rule]
    if measured is not None and not measured.empty:
        layers.append(
            alt.Chart(measured)
            .mark_point(size=90, shape="diamond", color="#e45756", filled=True)
            .encode(
                x="k:Q", y="measured speedup:Q", tooltip=["k", alt.Tooltip("measured speedup:Q", format=".2f"), "n"]
            )
        )
        with_v = measured.dropna(subset=["verify cost"]) if "verify cost" in measured else measured.iloc[0:0]
        if not with_v.empty:
            v = with_v.assign(
                **{
                    "predicted, measured V(k+1)": [
                        predicted_speedup(a, c, int(k), float(vc)) for k, vc in zip(with_v["k"], with_v["verify cost"])
                    ]
                }
            )
            layers.append(
                alt.Chart(v)
                .mark_line(point=True, strokeDash=[6, 3], color="#72b7b2")
                .encode(
                    x="k:Q",
                    y="predicted, measured V(k+1):Q",
                    tooltip=[
                        "k",
                        alt.Tooltip("verify cost:Q", format=".2f"),
                        alt.Tooltip("predicted, measured V(k+1):Q", format=".2f"),
                    ],
                )
            )
    return alt.layer(*layers).properties(height=320)


def compare_chart(df: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(df)
        .mark_boxplot(extent="min-max")
        .encode(  # series on the y axis, horizontal boxes: long run:mode names read whole instead of collapsing
            y=alt.Y("series:N", title=None, axis=alt.Axis(labelLimit=0)),
            x=alt.X("tokens_per_s:Q", title="tokens/sec"),
            color=alt.Color("series:N", legend=None),
        )
        .properties(height=max(MIN_HEIGHT, 44 * df["series"].nunique()))
    )


def draft_length_frame(pos: pd.DataFrame, totals: pd.DataFrame, adaptive: set[str]) -> pd.DataFrame:
    """Per arm of an adaptive drafter: how many passes drafted 0, 1, ..., k tokens. Passes that drafted L or more
    are the proposals at position L-1, so L exactly is proposed[L-1] - proposed[L]; none is passes - proposed[0]."""
    rows = []
    for t in totals[(totals["mode"].isin(adaptive)) & (totals["k"] > 0)].itertuples():
        g = pos[(pos["mode"] == t.mode) & (pos["k"] == t.k)].sort_values("position")
        at_least = g["proposed"].astype(int).tolist() + [0]
        counts = [int(t.passes) - (at_least[0] if len(at_least) > 1 else 0)] + [
            at_least[i] - at_least[i + 1] for i in range(len(at_least) - 1)
        ]
        counts += [0] * (int(t.k) + 1 - len(counts))
        for length, n in enumerate(counts):
            rows.append(
                {
                    "arm": arm_label(t.mode, int(t.k)),
                    "draft length": length,
                    "passes": n,
                    "share": n / t.passes if t.passes else 0.0,
                }
            )
    return pd.DataFrame(rows, columns=["arm", "draft length", "passes", "share"])


def draft_length_chart(df: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X("draft length:O", title="tokens drafted in a pass"),
            y=alt.Y("share:Q", title="share of passes", axis=alt.Axis(format="%")),
            color=alt.Color("arm:N"),
            xOffset="arm:N",
            tooltip=["arm", "draft length", "passes", alt.Tooltip("share:Q", format=".1%")],
        )
        .properties(height=260)
    )


def column_position_chart(df: pd.DataFrame) -> alt.FacetChart:
    """Acceptance per draft position, one panel per mode, one line per Spec-Bench column group."""
    return (
        alt.Chart(df)
        .mark_line(point=True)
        .transform_calculate(position="datum.position + 1")  # stored from 0; every chart counts from 1
        .encode(
            x=alt.X("position:O", title="draft position"),
            y=alt.Y(
                "acceptance:Q",
                title="acceptance, unconditional (accepted / proposed at the position, vLLM's)",
                scale=alt.Scale(domain=[0, unit_top(df, "acceptance")]),
            ),
            color=alt.Color("column:N", title="column group", legend=alt.Legend(orient="bottom", columns=3)),
            tooltip=["mode", "column", "position:O", alt.Tooltip("acceptance:Q", format=".3f"), "accepted", "proposed"],
        )
        .properties(height=180, width=300)  # two panels to a row and the legend below fit an 820 px column
        .facet(facet=alt.Facet("mode:N", title=None), columns=2)
    )
