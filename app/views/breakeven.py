"""Break-even: speedup = E(a,k) / (1 + c k), by hand or fitted to a run."""

from __future__ import annotations

import math

import streamlit as st

from app import charts, data, provenance, tables, urlstate, widgets
from engine.analysis.breakeven import (
    breakeven_c,
    expected_tokens,
    measured_speedups,
    optimum_k,
    optimum_note,
    predicted_speedup,
    verdict,
)
from engine.analysis.fit import fit_run
from engine.analysis.speedup import SPEEDUP
from engine.errors import PhoenixError
from engine.modes import K_MAX, Mode

MODEL = (
    "the break-even model's prediction E / (1 + c·k): a ratio of mean step rates, not the measured speedup "
    "(the diamonds, when fitted to a run)"
)


def speedups_of(url: str, run_id: int | None) -> list[tuple[str, float]]:
    """The run's measured speedups per mode, as its Run page's verdict reads them (one verdict for both pages)."""
    if run_id is None:
        return []
    return measured_speedups(data.summaries(url, run_id))


def _float_qp(name: str, default: float) -> float:
    try:
        value = float(urlstate.qp(name, str(default)))
    except ValueError:
        return default
    return min(max(value, 0.0), 1.0) if math.isfinite(value) else default


def fittable_run(runs) -> int | None:
    """The newest run with what a fit needs: target-only requests and a mode that drafts."""
    for r in runs.itertuples() if not runs.empty else []:
        modes = [m for m in str(r.modes or "").split(",") if m]
        if "target" in modes and any(drafts(m) for m in modes):
            return int(r.id)
    return None


def drafts(mode: str) -> bool:
    try:
        m = Mode.parse(mode)
    except PhoenixError:
        return False
    return m.is_bandit or bool(m.k)


def render() -> None:
    url = data.db_url()
    st.title("Break-even")
    st.markdown(
        "Expected tokens per verification pass: **E(a,k) = 1 + a + … + a^k**. A pass costs **1 + c·k** target "
        "steps, so **speedup = E / (1 + c·k)**. The optimum k is interior: more drafts add less and less."
    )
    by_hand = ("a" in st.query_params or "c" in st.query_params) and "run" not in st.query_params
    default = None if by_hand else fittable_run(data.runs(url))
    if "run" not in st.query_params and default is not None:
        st.query_params["run"] = str(default)  # opens on the newest run it can fit, not on made-up values
    use_run = st.toggle("Fit from a run", value="run" in st.query_params, key="fit_toggle")
    measured, fit, fit_run_id = None, None, None
    a, c = _float_qp("a", 0.7), _float_qp("c", 0.1)
    if use_run:
        run_id = widgets.run_picker(url)
        if run_id is not None:
            fit_run_id = run_id
            info = data.run(url, run_id)
            bench = info.bench
            fit = fit_run(
                data.positions(url, run_id),
                data.arm_totals(url, run_id),
                data.prompt_rewards(url, run_id),
                bench.drafter if bench else "model",
                drafter_arms=bool(bench and bench.drafter_arms),
            )
            if fit.a is None or fit.c is None:
                st.warning(
                    "This run has no model-drafter data and target-only timing to fit (it needs `target` "
                    "and a model_<k> or bandit mode)."
                )
            else:
                a, c, measured = fit.a, fit.c, fit.measured
                st.caption(
                    f"Fitted a = {a:.3f} from per-position counts; c = {c:.3f} from draft seconds per drafted "
                    f"token over one target step ({fit.target_step_s * 1000:.1f} ms), measured on "
                    f"{provenance.cpu_text(info.config.get('environment') or {})}, {provenance.path_text(info)}. "
                    "c and the verify cost belong to that CPU and path: on another they differ."
                )
    else:
        urlstate.set_qp(run=None)
    col1, col2, col3 = st.columns(3)
    a = col1.slider("a: per-token acceptance", 0.0, 1.0, float(round(a, 3)), 0.01, disabled=measured is not None)
    c = col2.slider(
        "c: draft cost per token / target step", 0.0, 1.0, float(round(c, 3)), 0.01, disabled=measured is not None
    )
    k = col3.slider("k: draft length", 1, K_MAX, urlstate.whole(urlstate.qp("k", "4"), 1, K_MAX) or 4)
    if measured is None:
        urlstate.set_qp(a=f"{a:.2f}", c=f"{c:.2f}", k=k)
    elif fit is not None and fit.a is not None and fit.c is not None:
        a, c = fit.a, fit.c  # the fit's own values, not the sliders' rounding: one optimum, one figure on the page
    k_opt = optimum_k(a, c, K_MAX)
    m1, m2, m3, m4 = st.columns(4)
    m1.metric(f"E(a,{k}), tokens per pass", f"{expected_tokens(a, k):.2f}")
    m2.metric(f"model's speedup at k={k}", f"{predicted_speedup(a, c, k):.2f}x", help=MODEL)
    m3.metric(f"optimum k (model: {predicted_speedup(a, c, k_opt):.2f}x)", f"{k_opt}", help=MODEL)
    m4.metric(f"break-even c at k={k}", f"{breakeven_c(a, k):.3f}")
    charts.show(charts.breakeven_chart(a, c, K_MAX, measured), width="stretch")
    if fit is not None and fit.a is not None and fit.c is not None:
        st.caption(optimum_note(fit.a, fit.c, fit.measured, K_MAX))
    if fit is not None and fit.a is not None:
        st.info(verdict(fit.a, fit.best_speedup, fit.c, fit.k_best_measured, speedups_of(url, fit_run_id)))
        st.caption(
            "Diamonds: the run's speedup per k (" + SPEEDUP.split(": ", 1)[1] + "; every request that "
            "drafted k). The curves are the model's prediction, a ratio of mean step rates. The solid curve "
            "counts a k+1-token verification as one target step; the dashed one uses the verify cost V(k+1) "
            "this run measured per arm (verify seconds per pass over the target-only step; column 'verify "
            "cost'). Where diamonds sit below the dashed curve too, the rest is drafting or Python overhead."
        )
        tables.show(fit.measured, formats={"measured speedup": "%.2fx", "verify cost": "%.2f"})
        widgets.csv_download(fit.measured, "breakeven-measured", key="dl_be")
    urlstate.show_share_link("breakeven")


render()
