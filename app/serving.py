"""The Run page's parts for Phoenix's own server: a live serve run (the server's loop over time: throughput, batch
and k, k against batch size, the cost profile it tunes from) and a load level (its variants side by side: throughput,
TTFT, time per output token, latency percentiles, acceptance). Every figure is engine.analysis.load's."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st

from app import charts, data, tables
from engine.analysis.load import THROUGHPUT, TPOT, k_by_batch, level_method, level_table, over_time, short_command
from engine.analysis.speedup import SPEEDUP, speedups
from engine.analysis.sweeps import slo_words
from engine.modes import reference_mode

LEVEL_COLUMNS = {
    "mode": "mode",
    "n": "n",
    "failed": "failed",
    "throughput_tok_s": "throughput tok/s",
    "throughput_x_reference": "throughput x reference (ratio of totals)",
    "speedup": "speedup (median per prompt)",
    "ttft_p50_s": "TTFT p50 (s)",
    "ttft_p95_s": "TTFT p95 (s)",
    "tpot_p50_s": "TPOT p50 (s)",
    "latency_p50_s": "latency p50 (s)",
    "latency_p95_s": "latency p95 (s)",
    "acceptance": "acceptance",
    "batch_mean": "mean batch",
    "identical": "identical to reference",
}


def load_words(cfg: dict) -> str:
    """A level as its sweep set it: a concurrency, or an arrival rate (Poisson or bursty) with its cap."""
    rate = cfg.get("request_rate")
    if rate is None:
        return f"concurrency {cfg.get('level')}"
    load = cfg.get("load") or {}
    shape = (
        "Poisson"
        if float(load.get("burstiness") or 1.0) == 1.0
        else f"gamma arrivals (burstiness {load.get('burstiness')})"
    )
    said = "every request at once (unbounded rate)" if rate == "inf" else f"{rate} requests/s, {shape}"
    return f"{said}, at most {cfg.get('level')} in flight"


def level(url: str, info) -> None:
    """A load level (`engines load`): every variant at this concurrency, side by side."""
    if "load" not in info.config:
        return
    requests = data.served_requests(url, info.id)
    if requests.empty:
        return
    ref = reference_mode(requests["mode"].unique())
    table = level_table(requests, info.config.get("wall_s"), ref)
    rewards = data.prompt_rewards(url, info.id)
    spread = speedups(rewards, ref) if ref and not rewards.empty else {}
    table["speedup"] = table["mode"].map(lambda m: spread[m].text() if m in spread else "")
    st.subheader(f"Under load: {load_words(info.config)}, every variant against {ref or 'nothing'}")
    st.caption(f"{THROUGHPUT}; {TPOT}. {SPEEDUP}")
    tables.show(table[list(LEVEL_COLUMNS)].rename(columns=LEVEL_COLUMNS))
    figures = info.config.get("figures") or {}
    terms = [
        f"{v}: {f['goodput']:.2f} req/s within {slo_words(f.get('slos_ms'))}" for v, f in figures.items()
        if isinstance(f, dict) and f.get("goodput") is not None
    ]  # fmt: skip
    if terms:
        st.caption("Goodput (requests/s meeting every SLO, vLLM's definition): " + "; ".join(terms) + ".")
    shares = {v: f.get("cached_share") for v, f in figures.items() if isinstance(f, dict)}
    cached = "; ".join(f"{v}: {c:.0%}" for v, c in shares.items() if c is not None) or "not reported"
    scenario = info.config.get("cache_scenario") or "not controlled (before the cold protocol)"
    st.caption(f"Cache scenario: {scenario}; prompt tokens served from the server's prefix cache: {cached}.")
    st.caption("How it ran: " + level_method(info.config) + ".")
    servers = info.config.get("servers") or []
    if servers:  # commands as code: verbatim, never read as Markdown
        st.code(
            "\n".join(
                f"# {sv.get('variant') or sv.get('spec_type')}\n{short_command(sv['command'])}" for sv in servers
            ),
            language=None,
        )


def live(url: str, info) -> None:
    """A run Phoenix's server records while it serves (`serve`): its loop over time and what the tuner chose."""
    if "phoenix_serve" not in info.config:
        return
    steps = data.serve_steps(url, info.id)
    cfg = info.config["phoenix_serve"]
    st.subheader(f"Phoenix serving: drafter {info.config.get('drafter')}, max batch {cfg.get('max_batch')}")
    spill = data.spill_waiting(url, info.id)
    if spill:  # the recorder held what the store refused: say so until it is written (never a silent gap)
        st.warning(
            f"{spill[1]} answered requests of this run are not in the database yet: the server could not record "
            "them and kept them in a spill file beside it. The next `python -m engine serve` on this database "
            "writes them into this run and removes the file."
        )
        st.code(spill[0], language=None)
    if steps.empty:
        st.info("No step yet: the server is waiting for requests.")
        return
    windows = over_time(steps)
    last = windows.iloc[-1]
    cols = st.columns(4)
    cols[0].metric("steps", f"{len(steps):,}")
    cols[1].metric("decode tok/s (last 5 s)", f"{last['tokens_per_s']:.1f}")
    cols[2].metric("batch (last 5 s)", f"{last['batch']:.1f}")
    cols[3].metric("k (last 5 s)", "n/a" if pd.isna(last["k"]) else f"{last['k']:.1f}")
    charts.show(over_time_chart(windows), width="stretch")
    by_batch = k_by_batch(steps)
    st.markdown("**What the tuner chose at each batch size** (n = steps)")
    st.caption(
        "Its k maximizes expected tokens/s from the forward's cost at this batch and width (profiled at start-up, "
        "refined by every step) and each position's measured acceptance; 'estimate x off' is its own estimate of "
        "that k over speculation off; 'rows held off' is the share of rows it drafted for that their own recent "
        "acceptance held at k = 0 (below the break-even of their k at that batch; each request's response lists "
        "each such decision with its figures under speculation.switched_off)."
    )
    tables.show(
        by_batch.rename(
            columns={
                "k_mean": "mean k",
                "off_share": "share k = 0",
                "estimate_x_off": "estimate x off",
                "rows_held_off": "rows held off",
            }
        )
    )
    prefix_panel(data.prefix_cache(url, info.id))
    for warning in info.config.get("cost_profile_warnings") or []:
        st.warning(warning)
    profile = pd.DataFrame(info.config.get("cost_profile") or [])
    if not profile.empty:
        st.markdown("**Forward cost at start-up** (ms, rows x tokens per row)")
        grid = profile.assign(ms=profile["seconds"] * 1000).pivot(index="batch", columns="tokens", values="ms")
        tables.show(grid.reset_index().rename(columns=lambda c: f"{c} tokens" if isinstance(c, int) else c), formats={})


def prefix_panel(p) -> None:
    """What the prefix cache did for this run's requests (engine.analysis.prefix: one definition)."""
    if p is None:
        return
    st.markdown("**Prefix cache**")
    cols = st.columns(3)
    cols[0].metric("requests with a hit", f"{p.hit_rate:.0%}", help=f"{p.hits} of {p.requests}")
    served = f"{p.cached_tokens:,} of {p.prompt_tokens:,}"
    cols[1].metric("prompt tokens from the cache", f"{p.token_share:.0%}", help=served)
    ratio = p.ttft_ratio
    cols[2].metric("median TTFT, hit / miss", "n/a" if ratio is None else f"{ratio:.2f}x")
    if p.ttft_hit_s is not None and p.ttft_miss_s is not None:
        st.caption(
            f"Median time to first token {p.ttft_hit_s * 1000:.0f} ms with a hit (n = {p.hits}) against "
            f"{p.ttft_miss_s * 1000:.0f} ms without (n = {p.requests - p.hits}): the cache saved "
            f"{(p.ttft_miss_s - p.ttft_hit_s) * 1000:.0f} ms at the median. Requests differ in their prompts, so this "
            "compares two groups, not one prompt twice; the same workload with --prefix-cache-gb 0 is the paired test."
        )


def over_time_chart(windows: pd.DataFrame) -> alt.VConcatChart:
    long = windows.melt(id_vars=["t_s"], value_vars=["tokens_per_s", "batch", "k"], var_name="series")
    long = long.dropna(subset=["value"])
    panels = []
    for series, title in (("tokens_per_s", "decode tok/s"), ("batch", "batch size"), ("k", "tuner's k")):
        part = long[long["series"] == series]
        panels.append(
            alt.Chart(part, height=110)
            .mark_line(point=True)
            .encode(
                x=alt.X("t_s:Q", title="seconds since the server started"),
                y=alt.Y("value:Q", title=title),
                tooltip=["t_s", "value"],
            )
        )
    return alt.vconcat(*panels)
