"""Reads across runs, cached as app.data's are: every load sweep's points and labels, the sitting the Sweeps page
opens on, a level's latencies, and every regression series judged. SQL stays in db; figures in engine.analysis."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app.data import TTL, _store
from engine.analysis import sweeps as sweep_analysis
from engine.analysis.regressions import series_of, series_verdicts
from engine.bench import report


@st.cache_data(ttl=TTL, show_spinner=False)
def regression_verdicts(url: str) -> pd.DataFrame:
    """Every series of this database's runs judged by the PyTorch HUD's rule (engine.analysis.regressions), the
    worst first: one row per series and figure."""
    store = _store(url)
    specs: dict = {}
    series = series_of(store.list_runs(), lambda run_id: report.summaries(store, run_id), specs)
    rows = []
    for v in series_verdicts(series, specs):
        spec = v.spec
        rows.append(
            {
                "verdict": v.verdict,
                "figure": v.figure,
                "model": spec.target.label(),
                "engine": spec.engine,
                "setting": f"{spec.speculation.text()} at {spec.load}",
                "prompts": f"{spec.prompts}, {spec.max_new_tokens} tokens, T={spec.temperature:g}",
                "cache": spec.cache,
                "path": " ".join(x for x in (spec.runner, spec.cores) if x),
                "CPU": spec.cpu,
                "newest / baseline": ", ".join("n/a" if r != r else f"{r:.2f}x" for r in v.ratios),
                "baseline": v.baseline,
                "points": len(v.points),
                "runs": ", ".join(f"#{i}" for i in v.run_ids),
            }
        )
    return pd.DataFrame(rows)


@st.cache_data(ttl=TTL, show_spinner=False)
def sweep_points(url: str) -> pd.DataFrame:
    """Every load sweep's points (engine.analysis.sweeps): one row per sweep, level and setting."""
    return sweep_analysis.points(sweep_analysis.sweeps(_store(url).list_runs()))


@st.cache_data(ttl=TTL, show_spinner=False)
def sweep_labels(url: str) -> dict[int, tuple[str, str]]:
    """Each sweep by its first run's id (what a link names it by): (its key in the points, its label), newest
    first."""
    found = sweep_analysis.sweeps(_store(url).list_runs())
    ordered = sorted(found.items(), key=lambda kv: -kv[1][0].id)
    return {runs[0].id: (key, sweep_analysis.label(runs)) for key, runs in ordered}


@st.cache_data(ttl=TTL, show_spinner=False)
def sweep_sitting(url: str) -> list[str]:
    """The sweeps the Sweeps page opens on (engine.analysis.sweeps.sitting)."""
    return sweep_analysis.sitting(sweep_analysis.sweeps(_store(url).list_runs()))


@st.cache_data(ttl=TTL, show_spinner=False)
def variant_latencies(url: str, run_id: int, variant: str) -> list[float]:
    """A load level's answered requests' end-to-end latencies for one variant (engine.analysis.sweeps)."""
    return sweep_analysis.variant_latencies(_store(url), run_id, variant)
