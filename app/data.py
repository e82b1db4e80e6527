"""The dashboard's one data module: every read goes through here, cached briefly.

SQL lives in db (Store methods) with bound parameters; this module only adds caching
and hands back DataFrames and plain entities.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pandas as pd
import streamlit as st

from db.entities import RunFilter
from db.migrate import ensure_schema
from db.store import Store, StoreError, resolve_url
from engine import runspec
from engine.analysis import speedup
from engine.analysis.compare import compare
from engine.analysis.prefix import summary as prefix_summary
from engine.analysis.stats import cross_run_drift
from engine.bench import report
from engine.bench.config import stored
from engine.modes import reference_mode
from engine.paths import RESULTS_DB
from engine.queue.autostart import live_workers
from engine.record.spills import waiting

TTL = 5  # seconds: a running benchmark shows up within one refresh


def changed() -> None:
    """A page wrote to the store: every cached read starts over (one call, so no read can be forgotten in a list
    of caches to clear; the reads are cheap next to the write that prompted this)."""
    st.cache_data.clear()


def db_url() -> str:
    return resolve_url(os.environ.get("PHOENIX_DB"))


def read_only() -> str | None:
    """Why this dashboard writes nothing into its database (no demo, form, tracker edit, cancel or resume), or
    None. The committed results database is read-only here: every run in it stands behind a figure in the docs."""
    if os.environ.get("PHOENIX_READ_ONLY", "").strip() not in ("", "0"):
        return "This dashboard is read-only (PHOENIX_READ_ONLY is set): it starts, edits and deletes nothing."
    url = db_url()
    if url.startswith("sqlite:///") and Path(url.removeprefix("sqlite:///")).resolve() == RESULTS_DB.resolve():
        return (
            "This is the committed results database (benchmarks/results.db): every run in it stands behind a "
            "figure in the docs, so this dashboard writes nothing into it. Start runs from a dashboard on your own "
            "database (the default, without PHOENIX_DB)."
        )
    return None


@st.cache_resource(show_spinner=False)
def _store(url: str) -> Store:
    ensure_schema(url)
    return Store(url, bench_parser=stored)


def store() -> Store:
    return _store(db_url())


def schema_problem() -> str | None:
    """None when the database is usable, else the one line that says what to do."""
    try:
        store()
        return None
    except StoreError as exc:
        _store.clear()
        return str(exc)


SPEEDUP_SORT = "best_speedup"  # the Runs list's one sort that is not a column of runs: computed, then paged


@st.cache_data(ttl=TTL, show_spinner=False)
def runs(
    url: str,
    where: RunFilter = RunFilter(),
    limit: int | None = 500,
    offset: int = 0,
    sort: str = "id",
    descending: bool = True,
) -> pd.DataFrame:
    """One page of runs, newest first by default; a dead worker's run reads as interrupted (computed in SQL,
    nothing written). Aggregates are computed for the page's runs only, so 10,000 runs cost one page, except when
    sorted by best speedup, which ranks every filtered run (medians only) before paging."""
    by_speedup = sort == SPEEDUP_SORT
    df = _store(url).runs_frame(
        where,
        None if by_speedup else limit,
        0 if by_speedup else offset,
        "id" if by_speedup else sort,
        descending,
    )
    if df.empty:
        return df
    if by_speedup:
        ranked = speedup.best_per_run(_store(url).prompt_rewards_of_runs(df["id"].tolist()))
        df = df.merge(ranked, left_on="id", right_on="run_id", how="left").drop(columns=["run_id"])
        df = df.sort_values("best_speedup", ascending=not descending, na_position="last", kind="stable")
        df = df.iloc[offset : offset + limit if limit else None].drop(columns=["best_mode", "best_speedup"])
    df["tags"] = df["tags"].fillna("")
    rates = _store(url).run_mode_rates(df["id"].tolist())
    df["modes"] = df["config"].map(lambda c: ",".join((c or {}).get("bench", {}).get("modes", [])))  # no parse per row
    prompts = rates.groupby("run_id")["prompts"].max() if not rates.empty else pd.Series(dtype=float)
    df["prompts"] = df["id"].map(prompts).fillna(0).astype(int)
    best = _best_speedups(_store(url), df["id"].tolist())
    for col in ("best_mode", "best_speedup", "best_interval"):
        df[col] = df["id"].map({i: row[col] for i, row in best.items()})
    return df.drop(columns=["config"]).reset_index(drop=True)


def _best_speedups(store: Store, run_ids: list[int]) -> dict[int, dict]:
    """Each run's best mode by speedup, with the figure as the Run page shows it (engine.analysis.speedup)."""
    rewards = store.prompt_rewards_of_runs(run_ids)
    out = {}
    for run_id, g in rewards.groupby("run_id") if not rewards.empty else []:
        ref = reference_mode(g["mode"].unique())
        g = g.drop(columns=["run_id"])
        top = speedup.best(speedup.speedups(g, ref, interval=False), ref)
        if top is not None:
            mode = top[0]
            s = speedup.speedups(g[g["mode"].isin([ref, mode])], ref)[mode]  # the interval for the best mode only
            out[int(run_id)] = {"best_mode": mode, "best_speedup": s.median, "best_interval": s.ci_text()}
    return out


@st.cache_data(ttl=TTL, show_spinner=False)
def runs_total(url: str, where: RunFilter = RunFilter()) -> int:
    return _store(url).runs_count(where)


@st.cache_data(ttl=TTL, show_spinner=False)
def warmup_count(url: str, run_id: int) -> int:
    return _store(url).warmup_count(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def request_count(url: str, run_id: int) -> int:
    return _store(url).count_requests(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def tags(url: str) -> list[str]:
    return _store(url).all_tags()


@st.cache_data(ttl=TTL, show_spinner=False)
def baseline(url: str, target: str) -> int | None:
    return _store(url).baseline_of(target)


@st.cache_data(ttl=TTL, show_spinner=False)
def run(url: str, run_id: int):
    return _store(url).get_run(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def summaries(url: str, run_id: int):
    return report.summaries(_store(url), run_id, totals=arm_totals(url, run_id))


@st.cache_data(ttl=TTL, show_spinner=False)
def spec_bench(url: str, run_id: int) -> pd.DataFrame:
    """Spec-Bench runs: the leaderboard's rows per mode and column group (empty for other prompts)."""
    return report.spec_bench(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def oracle(url: str, run_id: int) -> pd.DataFrame:
    """The per-prompt oracle and every mode's share of it (engine.analysis.oracle)."""
    return report.oracle(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def sources(url: str, run_id: int) -> pd.DataFrame:
    """A hybrid's passes by source (engine.analysis.sources)."""
    return report.sources(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def source_positions(url: str, run_id: int) -> pd.DataFrame:
    return report.source_positions(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def spec_bench_positions(url: str, run_id: int) -> pd.DataFrame:
    return report.spec_bench_positions(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def prompt_rewards(url: str, run_id: int) -> pd.DataFrame:
    """What every speedup of a run is computed from (engine.analysis.speedup)."""
    return _store(url).prompt_rewards(run_id)


# settings under which one prompt is one work (a sampled run draws other tokens than a greedy one)
SAME_WORK = ("max_new_tokens", "dtype", "prompt_format", "device", "temperature", "top_p", "top_k", "min_p")


def same_work(a, b) -> bool:
    """Two runs whose target-only requests on one prompt measured the same work."""
    if a.target != b.target or a.bench is None or b.bench is None:
        return False
    return all(getattr(a.bench, k) == getattr(b.bench, k) for k in SAME_WORK)


@st.cache_data(ttl=TTL, show_spinner=False)
def cross_run(url: str, run_id: int) -> tuple[int, object] | None:
    """This run's target-only against the newest other run of the same target and work (same settings, shared
    prompts): (that run's id, engine.analysis.stats.CrossDrift), or None where no such run exists."""
    info = run(url, run_id)
    if info is None or info.bench is None:
        return None
    mine = rewards(url, run_id, ("target",))
    for other_id in _store(url).same_target_runs(run_id, info.target):
        other = run(url, other_id)
        if other is None or other.bench is None:
            continue
        if not same_work(info, other):
            continue
        drift = cross_run_drift(mine, rewards(url, other_id, ("target",)))
        if drift is not None:
            return other_id, drift
    return None


@st.cache_data(ttl=TTL, show_spinner=False)
def prompt_text(url: str, run_id: int, prompt_id: str) -> str | None:
    return _store(url).prompt_text(run_id, prompt_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def served_requests(url: str, run_id: int) -> pd.DataFrame:
    return _store(url).served_requests(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def all_runs(url: str) -> list:
    """The newest runs as entities (the Fleet page groups served runs by the fleet they name)."""
    return _store(url).list_runs(limit=2000)  # the newest 2,000: fleets are recent, and a read is bounded


@st.cache_data(ttl=TTL, show_spinner=False)
def prefix_rows(url: str, run_id: int) -> list:
    return _store(url).prefix_rows(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def serve_steps(url: str, run_id: int) -> pd.DataFrame:
    return _store(url).serve_steps_frame(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def spill_waiting(url: str, run_id: int) -> tuple[str, int] | None:
    """A served run's rows its server could not record, held in a spill file beside the database: (path, requests)."""
    found = waiting(_store(url), run_id)
    return (str(found[0]), found[1]) if found else None


@st.cache_data(ttl=TTL, show_spinner=False)
def prefix_cache(url: str, run_id: int):
    """A served run's prefix cache: hit rate, tokens served, TTFT with a hit against without (None: no cache)."""
    return prefix_summary(_store(url).prefix_rows(run_id))


@st.cache_data(ttl=TTL, show_spinner=False)
def intervals(url: str, run_id: int):
    return _store(url).intervals(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def positions(url: str, run_id: int) -> pd.DataFrame:
    return _store(url).positions(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def request_sample(url: str, run_id: int) -> pd.DataFrame:
    return _store(url).request_sample(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def arm_totals(url: str, run_id: int) -> pd.DataFrame:
    """Sums per (mode, k), the time split's data; the results table is derived from the same cached frame."""
    return _store(url).arm_totals(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def distill_for_run(url: str, run_id: int):
    return _store(url).distill_for_run(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def policy_requests(url: str, run_id: int) -> pd.DataFrame:
    return _store(url).policy_frame(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def bandit(url: str, run_id: int) -> dict[str, pd.DataFrame]:
    return _store(url).bandit_history(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def identity(url: str, run_id: int):
    return _store(url).identity(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def requests(url: str, run_id: int, mode: str, k: int | None, identical: str, prompt: str) -> pd.DataFrame:
    return _store(url).requests_frame(run_id, mode, k, identical, prompt)


@st.cache_data(ttl=TTL, show_spinner=False)
def request_detail(url: str, request_id: int):
    return _store(url).request_detail(request_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def rewards(url: str, run_id: int, modes: tuple[str, ...]) -> pd.DataFrame:
    return _store(url).rewards(run_id, list(modes))


@st.cache_data(ttl=TTL, show_spinner=False)
def queue_state(url: str, run_id: int):
    return _store(url).queue_state(run_id)


def workers(url: str) -> list[str]:
    """Worker ids (host:pid) serving this database: those registered on this host, and any other whose run has a
    live heartbeat (a worker on another machine shows only while it runs something)."""
    here = [f"{socket.gethostname()}:{pid}" for pid in live_workers(url)]
    return sorted(set(here) | set(queue_state(url, 0).running_workers))


def runs_by_id(url: str, ids: tuple[int, ...]) -> dict:
    return {i: run(url, i) for i in ids}


@st.cache_data(ttl=TTL, show_spinner=False)
def baseline_deltas(url: str, baseline: int, runs: tuple[tuple[int, str], ...]) -> pd.DataFrame:
    """Each (run, its best mode) against the baseline run's best mode: the ratio of mean tokens/s as a Δ%, its 95%
    interval on the log scale, and whether the difference is outside the noise (Welch's test; engine.analysis.compare,
    the one builder of comparison rows). Only across runs that measured the same work (engine.runspec.comparable):
    any other row says which field differs and gives no delta."""
    store = _store(url)
    base_mode = next((m for i, m in runs if i == baseline), None) or best_mode(url, baseline)
    base = store.rewards(baseline, [base_mode])["tokens_per_s"].tolist() if base_mode else []
    base_info = run(url, baseline)
    base_spec = runspec.of(base_info, base_mode) if base_info is not None and base_mode else None
    rows = []
    for run_id, mode in runs:
        info = run(url, run_id)
        differs = runspec.comparable(base_spec, runspec.of(info, mode)) if base_spec and info and mode else None
        c = (
            None
            if differs
            else (compare(base, store.rewards(run_id, [mode])["tokens_per_s"].tolist()) if mode and base else None)
        )
        said = "the baseline" if run_id == baseline else (
            f"not comparable ({differs})" if differs
            else "no figure" if c is None or c.ratio is None
            else "within the noise" if c.verdict != "significant" else "faster" if c.ratio > 1 else "slower"
        )  # fmt: skip
        rows.append(
            {
                "id": run_id,
                f"Δ% tok/s vs #{baseline}": None if c is None or c.ratio is None else 100 * (c.ratio - 1),
                "Δ 95% CI": "" if c is None or c.ratio_low is None else
                f"{100 * (c.ratio_low - 1):+.0f}..{100 * (c.ratio_high - 1):+.0f}%",
                "vs baseline": said,
            }
        )  # fmt: skip
    return pd.DataFrame(rows)


def best_mode(url: str, run_id: int) -> str | None:
    """A run's best mode other than its reference (by the paired speedup), else its first."""
    found = summaries(url, run_id)
    drafting = [m for m in found if m.speedup is not None and m.speedup.median is not None]
    best = max(drafting, key=lambda m: m.speedup.median, default=None)
    return best.mode if best is not None else (found[0].mode if found else None)
