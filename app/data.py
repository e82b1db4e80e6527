"""The dashboard's one data module: every read goes through here, cached briefly.

SQL lives in db/queries.py with bound parameters; this module only adds caching
and hands back DataFrames and plain entities.
"""

from __future__ import annotations

import os
import socket

import pandas as pd
import streamlit as st

from db import distills, queries, tracker
from db.migrate import ensure_schema
from db.store import Store, StoreError, resolve_url
from engine.bench import report
from engine.bench.autostart import live_workers
from engine.bench.config import stored

TTL = 5  # seconds: a running benchmark shows up within one refresh


def db_url() -> str:
    return resolve_url(os.environ.get("PHOENIX_DB"))


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


@st.cache_data(ttl=TTL, show_spinner=False)
def runs(
    url: str,
    name: str = "",
    model: str = "",
    status: str = "",
    tag: str = "",
    archived: bool = False,
    limit: int | None = 500,
    offset: int = 0,
    sort: str = "id",
    descending: bool = True,
) -> pd.DataFrame:
    """One page of runs, newest first by default; a dead worker's run reads as interrupted (computed in SQL,
    nothing written). Aggregates are computed for the page's runs only, so 10,000 runs cost one page."""
    df = queries.runs_frame(_store(url), name, model, status, tag, archived, limit, offset, sort, descending)
    if df.empty:
        return df
    df["tags"] = df["tags"].fillna("")
    rates = queries.run_mode_rates(_store(url), df["id"].tolist())
    df["modes"] = df["config"].map(lambda c: ",".join((c or {}).get("bench", {}).get("modes", [])))  # no parse per row
    prompts = rates.groupby("run_id")["prompts"].max() if not rates.empty else pd.Series(dtype=float)
    df["prompts"] = df["id"].map(prompts).fillna(0).astype(int)
    df["best_speedup"] = df["id"].map(_best_speedup(rates))
    return df.drop(columns=["config"])


@st.cache_data(ttl=TTL, show_spinner=False)
def runs_total(
    url: str, name: str = "", model: str = "", status: str = "", tag: str = "", archived: bool = False
) -> int:
    return queries.runs_count(_store(url), name, model, status, tag, archived)


@st.cache_data(ttl=TTL, show_spinner=False)
def warmup_count(url: str, run_id: int) -> int:
    return queries.warmup_count(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def request_count(url: str, run_id: int) -> int:
    return _store(url).count_requests(run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def tags(url: str) -> list[str]:
    return tracker.all_tags(_store(url))


@st.cache_data(ttl=TTL, show_spinner=False)
def baseline(url: str, target: str) -> int | None:
    return tracker.baseline_of(_store(url), target)


def _best_speedup(rates: pd.DataFrame) -> dict:
    out = {}
    for run_id, g in rates.groupby("run_id") if not rates.empty else []:
        base = g.loc[g["mode"] == "target", "tokens_per_s"]
        others = g.loc[g["mode"] != "target", "tokens_per_s"]
        if len(base) and len(others) and base.iloc[0]:
            out[run_id] = float(others.max() / base.iloc[0])
    return out


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
def spec_bench_positions(url: str, run_id: int) -> pd.DataFrame:
    return report.spec_bench_positions(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def positions(url: str, run_id: int) -> pd.DataFrame:
    return queries.positions(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def request_sample(url: str, run_id: int) -> pd.DataFrame:
    return queries.request_sample(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def arm_totals(url: str, run_id: int) -> pd.DataFrame:
    """Sums per (mode, k), the time split's data; the results table is derived from the same cached frame."""
    return queries.arm_totals(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def distill_for_run(url: str, run_id: int):
    return distills.for_run(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def policy_requests(url: str, run_id: int) -> pd.DataFrame:
    return queries.policy_frame(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def bandit(url: str, run_id: int) -> dict[str, pd.DataFrame]:
    return queries.bandit_history(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def identity(url: str, run_id: int):
    return queries.identity(_store(url), run_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def requests(url: str, run_id: int, mode: str, k: int | None, identical: str, prompt: str) -> pd.DataFrame:
    return queries.requests_frame(_store(url), run_id, mode, k, identical, prompt)


@st.cache_data(ttl=TTL, show_spinner=False)
def request_detail(url: str, request_id: int):
    return queries.request_detail(_store(url), request_id)


@st.cache_data(ttl=TTL, show_spinner=False)
def rewards(url: str, run_id: int, modes: tuple[str, ...]) -> pd.DataFrame:
    return queries.rewards(_store(url), run_id, list(modes))


@st.cache_data(ttl=TTL, show_spinner=False)
def queue_state(url: str, run_id: int):
    return queries.queue_state(_store(url), run_id)


def workers(url: str) -> list[str]:
    """Worker ids (host:pid) serving this database: those registered on this host, and any other whose run has a
    live heartbeat (a worker on another machine shows only while it runs something)."""
    here = [f"{socket.gethostname()}:{pid}" for pid in live_workers(url)]
    return sorted(set(here) | set(queue_state(url, 0).running_workers))
