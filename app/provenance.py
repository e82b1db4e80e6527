"""What a run was and where it ran, as a tracker shows it: when and how long, the machine and its CPU (every speed
figure is this CPU's), the library versions and git commit, the whole stored config; and per mode the latency a
server user reads first, time to first token and time per output token."""

from __future__ import annotations

from types import SimpleNamespace

import streamlit as st

from app import data, tables
from engine.analysis.load import TPOT, level_table
from engine.bench import fast
from engine.decode.card import card_line


def duration_text(info) -> str:
    start, end = info.created_at, info.finished_at
    if start is None:
        return ""
    began = f"created {start:%Y-%m-%d %H:%M} UTC"
    if end is None:
        return began + (" · not finished" if info.status not in ("queued", "running") else "")
    seconds = max(0.0, (end - start).total_seconds())
    minutes, rest = divmod(int(round(seconds)), 60)
    took = f"{minutes} min {rest} s" if minutes else f"{rest} s"
    return f"{began} · finished {end:%H:%M} · took {took} (queue wait included)"


def cpu_text(env: dict) -> str:
    """The CPU with its cores and speed flags, or a sentence saying it was not recorded."""
    if not env.get("cpu"):
        return "CPU not recorded (this run predates the environment record)"
    flags = ", ".join(env.get("cpu_flags") or []) or "no AVX2 or newer"
    return f"CPU {env['cpu']}, {env.get('cores', '?')} cores ({flags})"


def path_text(info) -> str:
    """The dtype and forward path a run's figures were measured on, and what --fast chose where it was asked."""
    bench = info.config.get("bench") or {}
    compiled = info.config.get("compile") or {}
    if compiled and not compiled.get("compiled"):
        path = "eager (compile failed)"
    else:
        path = fast.path_of(SimpleNamespace(**{"cache": "dynamic", "compile": False, "freeze": False, **bench}))
    text = f"{bench.get('dtype', '?')} {path}"
    chosen = info.config.get("fast")
    if chosen:
        text += f" (--fast {chosen['asked']}: " + ("chosen from " + chosen["from"] if chosen["chose"] else "kept") + ")"
    return text


def machine_text(env: dict) -> str:
    """The CPU, its cores and the instruction sets that change a forward's cost; the versions; the commit."""
    if not env:
        return "machine: not recorded (this run predates the environment record)"
    parts = [cpu_text(env)] if env.get("cpu") else []
    versions = [f"{name} {env[name]}" for name in ("torch", "transformers", "python") if env.get(name)]
    if versions:
        parts.append(", ".join(versions))
    sha = env.get("git_sha")
    parts.append(f"git {sha[:12]}" if sha else "git: not a checkout")
    return " · ".join(parts)


def panel(url: str, info) -> None:
    """The run's provenance in two lines of text and its config in full, folded."""
    st.text(duration_text(info))
    st.text(machine_text(info.config.get("environment") or {}))
    for role, card in (info.config.get("models") or {"target": {}}).items():
        st.text(f"{role}: {card_line(card)}")
    if info.config.get("bench"):
        st.text("path: " + path_text(info))
    with st.expander("Full config, as stored with the run"):
        st.json(info.config, expanded=2)


def latency(url: str, info) -> None:
    """TTFT and TPOT per mode, from the one definition (engine.analysis.load). A load level's own table has them
    already; a served watch has no requests."""
    if "load" in info.config:
        return
    requests = data.served_requests(url, info.id)
    if requests.empty or requests["ttft_s"].isna().all():
        return
    table = level_table(requests)
    shown = table[["mode", "n", "ttft_p50_s", "ttft_p95_s", "tpot_p50_s", "latency_p50_s", "latency_p95_s"]]
    st.subheader("Time to first token and per output token")
    tables.show(
        shown,
        name="latency",
        labels={
            "ttft_p50_s": "TTFT p50 (s)",
            "ttft_p95_s": "TTFT p95 (s)",
            "tpot_p50_s": "TPOT p50 (s)",
            "latency_p50_s": "latency p50 (s)",
            "latency_p95_s": "latency p95 (s)",
        },
        formats={c: "%.4f" for c in shown.columns if c.endswith("_s")},
    )
    st.caption(
        f"TTFT: the prefill and the first token, one request at a time; {TPOT}. Percentiles are numpy's linear "
        "interpolation, as every latency here."
    )


def sampling_line(b) -> str:
    """How a sampled run's outputs were checked, beside its settings."""
    kept = (
        [f"top-p {b.top_p:g}"] * (b.top_p < 1)
        + [f"top-k {b.top_k}"] * (b.top_k > 0)
        + [f"min-p {b.min_p:g}"] * (b.min_p > 0)
    )
    return (
        f"Sampled at temperature {b.temperature:g}{' (' + ', '.join(kept) + ')' if kept else ''}, each prompt with one "
        f"seed from --seed {b.seed} in every mode. Speculative sampling keeps the target's distribution exactly, and "
        "with the same seed its output equals target-only's token for token, so 'identical' is checked as for greedy "
        "runs (a bf16 run may drift as greedy ones do); tests/test_sampling.py holds the chi-square test of the "
        "distribution."
    )
