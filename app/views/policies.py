"""Policies: each draft-length policy against the best fixed arm in hindsight, from one run."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from app import charts, data, oracle, tables, urlstate, widgets
from engine.analysis.regret import best_fixed, is_bandit, policy_table, regret_curves
from engine.analysis.speedup import RATIO_OF_MEANS, SPEEDUP, speedups

HOW = (
    "Run several policies and fixed arms over the same prompts, for example\n"
    "python -m engine bench --limit 60 --modes target,model_2,model_4,model_6,model_8,"
    "bandit:epsilon_greedy,bandit:model_based,bandit:model_based:pass,bandit:ucb1,bandit:thompson,bandit:ema_hysteresis\n"
    "A policy that picks the drafter as well as k: --modes target,ngram_4,suffix_16,bandit "
    "--drafter-arms target,ngram_4,suffix_16"
)


def newest_with_bandit(runs) -> int | None:
    for r in runs.itertuples() if not runs.empty else []:
        if any(is_bandit(m) for m in str(r.modes or "").split(",") if m):
            return int(r.id)
    return None


def render() -> None:
    url = data.db_url()
    st.title("Policies")
    if "run" not in st.query_params:  # the newest run with a bandit, not the newest run (a server's has none)
        with_bandit = newest_with_bandit(data.runs(url))
        if with_bandit is not None:
            st.query_params["run"] = str(with_bandit)
    run_id = widgets.run_picker(url)
    if run_id is None:
        return
    frame = data.policy_requests(url, run_id)
    if not frame["mode"].map(is_bandit).any():
        st.info("This run has no bandit mode. " + HOW.split("\n")[0])
        st.code(HOW.split("\n")[1], language="bash")
        st.caption(HOW.split("\n")[2])
        return
    paired = speedups(data.prompt_rewards(url, run_id))
    best = best_fixed(frame, paired)
    if best is None:
        st.warning(
            "Regret needs the single arms in the same run (target, model_<k>, ngram_<k>, suffix_<k> or "
            "eagle3_<k> modes): without them the best arm in hindsight is unknown."
        )
        st.code(HOW.split("\n")[1], language="bash")
        return
    alpha = 0.05
    table = policy_table(frame, best, alpha, paired)
    n_prompts = frame["prompt_id"].nunique()
    st.caption(
        f"Best fixed arm in hindsight (the highest speedup): {best} · {n_prompts} prompts. {SPEEDUP}. 'share of "
        f"best fixed' is a {RATIO_OF_MEANS.split(': ', 1)[0]}: the mode's mean tokens/s over {best}'s, with its "
        f"95% interval on the log scale and Welch's t-test of the difference (alpha {alpha}); 'not significant' "
        "means the run cannot tell the two apart. tokens/s is the mean of per-request tokens/sec, the policies' "
        "reward."
    )
    shown = shown_policies(table)
    view = st.segmented_control(
        "Columns", list(POLICY_VIEWS), default="verdict", key="pol_columns", help="the CSV below holds every column"
    )
    tables.show(
        shown[["mode", "n", *POLICY_VIEWS[view or "verdict"]]],  # each view whole on a 1280 px screen
        name="policies",
        formats={"tokens/s": "%.2f", "p-value": "%.4f", "mean k": "%.2f", "explored": "%.0f%%", "fallback": "%.0f%%"},
        labels={"x reference, 95% CI": "x reference (95% CI, n)"},
        widths={
            "mode": 150,
            "x reference, 95% CI": 200,
            "share of best fixed (95% CI)": 175,
        },  # notes cut, not verdicts
    )
    widgets.csv_download(table, f"run{run_id}-policies", key="dl_pol")
    oracle.panel(url, run_id, policies_only=True)
    curves = regret_curves(frame, best)
    st.subheader("Cumulative regret")
    charts.show(regret_chart(curves), width="stretch")
    drafter_arms = curves["arm"].map(lambda a: not str(a).startswith("k=")).any()
    st.subheader("Chosen arm over time" if drafter_arms else "Chosen k over time")
    charts.show(arm_chart(curves) if drafter_arms else k_chart(curves), width="content")
    st.subheader("Tokens/sec per policy")
    charts.show(tps_chart(frame), width="stretch")
    urlstate.show_share_link("policies")


POLICY_VIEWS = {  # 11 columns never fit 1280 px: what to decide by, and how each policy chose
    "verdict": ["x reference, 95% CI", "share of best fixed (95% CI)", "p-value", "verdict"],
    "how it chose": ["tokens/s", "mean k", "explored", "fallback", "arms chosen"],
}


def shown_policies(table: pd.DataFrame) -> pd.DataFrame:
    """The columns a decision rests on first, each interval in one cell, so a 1280 px screen shows the verdict;
    the CSV keeps every column apart."""

    def share(r) -> str:
        if r["share of best fixed"] is None or r["share of best fixed"] != r["share of best fixed"]:
            return ""
        ci = r["share CI low"]
        spread = "" if ci is None or ci != ci else f" ({ci:.2f}-{r['share CI high']:.2f})"
        return f"{r['share of best fixed']:.3f}{spread}"

    return pd.DataFrame(
        {
            "mode": table["mode"],
            "n": table["n"],
            "x reference, 95% CI": table["x reference, 95% CI"],
            "share of best fixed (95% CI)": [share(r) for _, r in table.iterrows()],
            "p-value": table["p-value"],
            "verdict": table["verdict"],
            "tokens/s": table["tokens/s"],
            "mean k": table["mean k"],
            "explored": table["explored"] * 100,
            "fallback": table["fallback"] * 100,
            "arms chosen": table["arms chosen"],
        }
    )


def regret_chart(curves: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(curves)
        .mark_line()
        .encode(
            x=alt.X("decision:Q", title="decision", axis=alt.Axis(tickMinStep=1, format="d")),
            y=alt.Y("cumulative regret:Q", title="cumulative regret (tok/s x requests)"),
            color="mode:N",
            tooltip=["mode", "decision", "k", alt.Tooltip("regret:Q", format=".2f")],
        )
        .properties(height=300)
    )


def k_chart(curves: pd.DataFrame) -> alt.FacetChart:
    """One strip per policy, so eight policies do not hide each other."""
    return (
        alt.Chart(curves)
        .mark_point(filled=True, size=30)
        .encode(
            x=alt.X("decision:Q", axis=alt.Axis(tickMinStep=1, format="d")),
            y=alt.Y(
                "k:Q", title="k", scale=alt.Scale(domain=[0, int(curves["k"].max() or 1)]), axis=alt.Axis(tickMinStep=1)
            ),
            color=alt.Color(
                "explored:N",
                scale=alt.Scale(domain=[False, True], range=["#54a24b", "#f58518"]),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=["mode", "decision", "k", "explored", "fallback", "prompt_id"],
        )
        .properties(height=90, width=520)  # with the policy names beside it: an 820 px column
        .facet(row=alt.Row("mode:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")))
    )


def arm_chart(curves: pd.DataFrame) -> alt.FacetChart:
    """A drafter-choosing policy: which (drafter, k) arm each decision took."""
    return (
        alt.Chart(curves)
        .mark_point(filled=True, size=30)
        .encode(
            x=alt.X("decision:Q", axis=alt.Axis(tickMinStep=1, format="d")),
            y=alt.Y("arm:N", title="arm"),
            color=alt.Color(
                "explored:N",
                scale=alt.Scale(domain=[False, True], range=["#54a24b", "#f58518"]),
                legend=alt.Legend(orient="bottom"),
            ),
            tooltip=["mode", "decision", "arm", "k", "explored", "prompt_id"],
        )
        .properties(width=480)  # the arm names on its axis and the policy names beside it fit 820 px
        .facet(row=alt.Row("mode:N", title=None, header=alt.Header(labelAngle=0, labelAlign="left")))
    )


def tps_chart(frame: pd.DataFrame) -> alt.Chart:
    return (
        alt.Chart(frame)
        .mark_boxplot(extent="min-max")
        .encode(
            x=alt.X("mode:N", sort="-y"),
            y=alt.Y("tokens_per_s:Q", title="tokens/sec"),
            color="mode:N",
        )
        .properties(height=300)
    )


render()
