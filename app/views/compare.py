"""Compare: runs or modes side by side, with Welch's t-test and a plain verdict."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import charts, data, likeness, tables, urlstate, widgets
from engine import runspec
from engine.analysis.compare import TOKENS_PER_S, compare
from engine.analysis.speedup import RATIO_OF_MEANS, SPEEDUP, speedups
from engine.analysis.stats import cross_run_drift
from engine.bench.leaderboard import OVERALL, in_column
from engine.modes import Mode, reference_mode

MAX_SERIES = 12  # series on one Compare page


def _series_options(url: str, runs: pd.DataFrame) -> list[str]:
    """Modes of the 50 newest unarchived runs, and of any run the link names (archived runs keep their links). A
    Spec-Bench run also offers each mode on one column group: ``run:mode@column``."""
    linked = [urlstate.whole(s.split(":", 1)[0], 1) for s in urlstate.qp("series").split(",") if ":" in s]
    ids = list(dict.fromkeys([int(i) for i in runs["id"].head(50)] + [i for i in linked if i and data.run(url, i)]))
    out = []
    for run_id in ids:
        modes = [m.mode for m in data.summaries(url, run_id)]
        out += [f"{run_id}:{m}" for m in modes]
        columns = [c for c in data.spec_bench(url, run_id)["column"].unique() if c != OVERALL]
        out += [f"{run_id}:{m}@{c}" for m in modes for c in columns]
    return out


def parse_series(text: str) -> tuple[int, str, str]:
    """``run:mode`` or ``run:mode@column`` as (run id, mode, column), the column OVERALL when none is named."""
    run_id, rest = text.split(":", 1)
    mode, _, column = rest.partition("@")
    return int(run_id), mode, column or OVERALL


def render() -> None:
    url = data.db_url()
    st.title("Compare")
    runs = data.runs(url)
    if runs.empty:
        widgets.empty_state()
        return
    options = _series_options(url, runs)
    wanted = list(dict.fromkeys(s for s in urlstate.qp("series").split(",") if s in options))
    if len(wanted) > MAX_SERIES:  # a long link would take a minute to draw and say nothing readable
        st.warning(f"This link names {len(wanted)} series; Compare draws at most {MAX_SERIES}, the first ones.")
        wanted = wanted[:MAX_SERIES]
    if not wanted:
        first = options[:1] + [o for o in options if o.startswith(options[0].split(":")[0] + ":")][1:2]
        wanted = first
    series = st.multiselect(
        "Series (run:mode, or run:mode@column for one Spec-Bench column group); the first is the baseline",
        options,
        default=wanted,
        key="series",
        max_selections=MAX_SERIES,
        format_func=lambda s: label(url, s),
    )
    alpha = st.select_slider(
        "alpha",
        [0.01, 0.05, 0.1],
        value=float(urlstate.qp("alpha", "0.05")) if urlstate.qp("alpha", "0.05") in ("0.01", "0.05", "0.1") else 0.05,
    )
    urlstate.set_qp(series=",".join(series), alpha=alpha)
    if len(series) < 2:
        st.info("Pick at least two series.")
        return
    frames = []
    for s in series:
        run_id, mode, column = parse_series(s)
        df = in_column(data.rewards(url, run_id, (mode,)), column).copy()
        df["series"] = label(url, s)
        df["acceptance"] = (df["accepted"] / df["proposed"]).where(df["proposed"] > 0)
        frames.append(df)
    all_rows = pd.concat(frames)
    charts.show(charts.compare_chart(all_rows), width="stretch")
    st.subheader("Each series against its own run's reference")
    tables.show(speedup_table(url, series), name="compare_speedups", formats={"x reference": "%.2fx"})
    st.caption(SPEEDUP + ". Series from different runs each pair with their own run's reference.")
    st.subheader(f"Series against the baseline, {label(url, series[0])}")
    refused = not_comparable(url, series)
    if refused:
        st.error(
            "No verdict across different work (engine.runspec): "
            + "; ".join(f"{label(url, s)}: {why}" for s, why in refused.items())
            + ". Their distributions are drawn above; no ratio or test is given."
        )
    kept = [f for s, f in zip(series, frames) if s not in refused]
    table = verdicts(kept, alpha) if len(kept) > 1 else pd.DataFrame()
    tables.show(
        shown_verdicts(table),
        name="compare",
        formats={"mean baseline": "%.3f", "mean series": "%.3f", "p-value": "%.4f"},
    )
    st.caption(
        f"{TOKENS_PER_S}. 'ratio of means' is {RATIO_OF_MEANS.split(': ', 1)[1]}: its interval is computed on the "
        "log scale, and the verdict is Welch's test of the difference."
    )
    widgets.csv_download(table, "compare", key="dl_cmp")
    curves(url, series)
    st.subheader("Settings that differ")
    diff = likeness.config_diff({s: (data.run(url, parse_series(s)[0]), parse_series(s)[1]) for s in series})
    unlike = likeness.unlike(diff)
    if unlike:
        st.warning(likeness.unlike_warning(unlike) + " The table below has the values.")
    disturbed(url, series)
    modes = {parse_series(s)[1] for s in series}
    if diff.empty and len(modes) == 1:
        st.warning(
            "These series are repeats: the same recorded settings and the same mode. A difference between them "
            "is the machine's noise, not a finding; a 'significant' verdict here says the machine was disturbed."
        )
    elif diff.empty:
        st.caption("The runs' recorded settings are identical apart from the mode.")
    else:
        tables.show(diff.drop(columns="key"))
    urlstate.show_share_link("compare")


def not_comparable(url: str, series: list[str]) -> dict[str, str]:
    """The series that measured other work than the baseline (the first), each with the field that differs."""
    base_id, base_mode, _ = parse_series(series[0])
    base = runspec.of(data.run(url, base_id), base_mode)
    out = {}
    for s in series[1:]:
        run_id, mode, _ = parse_series(s)
        why = runspec.comparable(base, runspec.of(data.run(url, run_id), mode))
        if why:
            out[s] = why
    return out


def label(url: str, series: str) -> str:
    """A series as people read it: run:mode with the drafter it used (the URL keeps run:mode)."""
    run_id, mode, _ = parse_series(series)
    return f"{series} ({likeness.drafter_of(data.run(url, run_id), mode)})"


def curves(url: str, series: list[str]) -> None:
    """Per-position acceptance of every series on one chart: unconditional, conditional and the a^(i+1) fit."""
    parts, fits = [], {}
    for s in series:
        run_id, mode, column = parse_series(s)
        if column == OVERALL:
            pos = data.positions(url, run_id)
        else:
            pos = data.spec_bench_positions(url, run_id)
            pos = pos[pos["column"] == column].assign(k=Mode.of(mode).k or 0)
        frame, fit = charts.acceptance_frame(pos[pos["mode"] == mode])
        if not frame.empty:
            # one curve per (series, arm): a bandit series holds one arm per k it chose
            single = frame["arm"].nunique() == 1
            name = {a: label(url, s) if single else f"{label(url, s)} {a}" for a in frame["arm"].unique()}
            parts.append(frame.assign(arm=frame["arm"].map(name)))
            fits.update({name[a]: value for a, value in fit.items() if a in name})
    if not parts:
        return
    st.subheader("Per-position acceptance")
    charts.show(charts.acceptance_chart(pd.concat(parts)), width="stretch")
    st.caption(charts.ACCEPTANCE_NOTE + " Fitted a: " + ", ".join(f"{s} {a:.3f}" for s, a in fits.items()))


def disturbed(url: str, series: list[str]) -> None:
    """Series from two runs: the same target on the same prompts must run at about one speed in both, or a
    'significant' difference is the machine's."""
    runs = list(dict.fromkeys(parse_series(s)[0] for s in series))
    base = data.rewards(url, runs[0], ("target",))
    first = data.run(url, runs[0])
    for other in runs[1:]:
        info = data.run(url, other)
        if first is None or info is None or not data.same_work(first, info):
            continue  # other work: the settings table says how it differs
        d = cross_run_drift(base, data.rewards(url, other, ("target",)))
        if d is not None and d.disturbed:
            st.warning(
                f"Run #{runs[0]}'s target-only ran at {d.ratio:.2f}x the speed of run #{other}'s on the same "
                f"{d.n} prompts: the machine was disturbed in one of them (the slower), so differences between "
                "their series here are noise, not a finding."
            )


def speedup_table(url: str, series: list[str]) -> pd.DataFrame:
    """Each series' speedup in its own run (on its column group's requests for run:mode@column), the number the
    Run page shows for run:mode."""
    rows = []
    for s in series:
        run_id, mode, column = parse_series(s)
        frame = in_column(data.prompt_rewards(url, run_id), column)
        ref = reference_mode(frame["mode"].unique()) if not frame.empty else None
        sp = speedups(frame, ref).get(mode) if ref else None
        rows.append(
            {
                "series": label(url, s),
                "reference": ref or "none",
                "x reference": sp.median if sp else None,
                "95% CI and n": sp.interval_text()
                if sp
                else ("no prompt of it paired with the reference" if ref else "no reference mode in this run"),
            }
        )
    return pd.DataFrame(rows)


def shown_verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """The verdict table as a 1280 px screen shows it whole: the baseline is the subheader's, each interval is one
    cell. The CSV keeps every column apart."""
    if table.empty:
        return table
    interval = [c for c in table.columns if c.startswith("ratio CI low")][0]
    level = interval.removeprefix("ratio CI low ")
    high = table[interval.replace("low", "high")]

    def ratio(r, lo, hi) -> str:
        if r is None or r != r:
            return ""
        return f"{r:.3f}" + ("" if lo is None or lo != lo else f" ({lo:.2f}-{hi:.2f})")

    return pd.DataFrame(
        {
            "series": table["series"],
            "metric": table["metric"].map(tables.header),
            "n (base / series)": [f"{a} / {b}" for a, b in zip(table["n baseline"], table["n series"])],
            "mean baseline": table["mean baseline"],
            "mean series": table["mean series"],
            f"ratio of means {level}": [ratio(*v) for v in zip(table["ratio of means"], table[interval], high)],
            "p-value": table["p-value"],
            "verdict": table["verdict"],
        }
    )


def verdicts(frames: list[pd.DataFrame], alpha: float) -> pd.DataFrame:
    """Each series against the first, per metric, from the one comparison builder."""
    base = frames[0]
    level = f"{1 - alpha:.0%}"
    rows = []
    for other in frames[1:]:
        for metric in ("tokens_per_s", "latency_s", "acceptance"):
            if metric == "acceptance" and not (base[metric].notna().any() and other[metric].notna().any()):
                continue  # acceptance compares two drafters; target-only drafts nothing
            c = compare(base[metric].dropna().tolist(), other[metric].dropna().tolist(), alpha)
            rows.append(
                {
                    "baseline": base["series"].iloc[0] if len(base) else "",
                    "series": other["series"].iloc[0] if len(other) else "",
                    "metric": metric,
                    "n baseline": c.n_base,
                    "n series": c.n,
                    "mean baseline": c.mean_base,
                    "mean series": c.mean,
                    "ratio of means": c.ratio,
                    f"ratio CI low ({level})": c.ratio_low,
                    f"ratio CI high ({level})": c.ratio_high,
                    "difference": c.difference,
                    "p-value": c.p_value,
                    "verdict": c.verdict,
                }
            )
    return pd.DataFrame(rows)


render()
