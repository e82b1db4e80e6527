"""A run's results, read from the store: every figure the CLI, the Run page and the docs quote.

Speedups are paired: each request's tokens/s over target-only's on the same prompt in the same run, summarised
as the median with its IQR and n (``engine.analysis.speedup``).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from db.entities import ModeSummary, RunInfo
from db.store import Store
from engine.analysis.oracle import oracle_table
from engine.analysis.pass_cost import pass_costs
from engine.analysis.sources import source_passes
from engine.analysis.sources import source_positions as summed_source_positions
from engine.analysis.speedup import Spread, speedups
from engine.analysis.stats import wilson
from engine.bench.leaderboard import leaderboard, per_position
from engine.measure import draft_share
from engine.modes import reference_mode

REPORT_FORMATS = ("table", "md", "csv")
REPORT_BY = ("mode", "column", "pass", "oracle", "source")  # the results table, Spec-Bench's per-column
# leaderboard, a serving engine's pass costs, the per-prompt oracle, a hybrid's passes by source


def summaries(store: Store, run_id: int, totals=None) -> list[ModeSummary]:
    """The results table's rows, each with its speedup against the run's reference mode (None without one)."""
    rows = store.mode_summaries(run_id, totals=totals)
    base = reference_mode(m.mode for m in rows)
    paired = speedups(store.prompt_rewards(run_id), base) if base else {}
    for m in rows:
        m.speedup = paired.get(m.mode)
        m.acceptance_ci = wilson(m.accepted, m.proposed)
    return rows


def _f(value, fmt: str, empty: str = "n/a") -> str:
    return empty if value is None or value != value else format(value, fmt)


def _speed(s: Spread | None, iqr: bool = True) -> str:
    if s is None or s.median is None:
        return "n/a"
    return f"{s.median:.2f}x ({s.p25:.2f}-{s.p75:.2f})" if iqr else f"{s.median:.2f}x"


def format_table(rows: list[ModeSummary]) -> str:
    base = reference_mode(m.mode for m in rows) or "reference"
    head = (
        f"{'mode':<14}{'n':>5}{'failed':>7}{'p50 (s)':>9}{'p95 (s)':>9}{'tok/s':>8}{'accept':>8}{'acc len':>8}"
        f"{'draft %':>8}{'identical':>11}  x {base} (IQR)"
    )
    lines = [head, "-" * len(head)]
    for m in rows:
        share = draft_share(m.draft_s, m.verify_s)
        ident = f"{m.identical_n}/{m.checked_n}" if m.checked_n else "n/a"
        lines.append(
            f"{m.mode:<14}{m.n:>5}{m.failed:>7}{m.p50_latency_s:>9.3f}{m.p95_latency_s:>9.3f}{m.tokens_per_s:>8.2f}"
            f"{_f(m.acceptance, '.1%'):>8}{_f(m.mean_acceptance_length, '.2f'):>8}{share:>8.0%}{ident:>11}"
            f"  {_speed(m.speedup)}"
        )
    return "\n".join(lines)


def markdown(info: RunInfo, rows: list[ModeSummary], link: str | None = None) -> str:
    """The run as a Markdown table with its settings line; ``link`` is the Run page's address."""
    b = info.bench
    setting = (
        (
            f"target {info.target}, draft {info.draft or 'none'}, "
            + (f"bandits draft with {b.bandit_drafter()}, " if b.bandit_drafter() else "")
            + f"{b.dtype} on {b.device}, "
            f"prompts {b.prompts} ({b.prompt_format}), {b.max_new_tokens} new tokens"
        )
        if b
        else served_setting(info)
    )
    title = f"[run #{info.id}]({link})" if link else f"run #{info.id}"
    date = info.created_at.strftime("%Y-%m-%d") if info.created_at else "?"
    lines = [
        f"**{info.name}**, {title}, {date}: {setting}.",
        "",
        f"| mode | n | tok/s | x {reference_mode(m.mode for m in rows) or 'reference'}, median (IQR) | acceptance "
        "| mean acceptance length | draft share | identical |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in rows:
        share = draft_share(m.draft_s, m.verify_s)
        ident = f"{m.identical_n}/{m.checked_n}" if m.checked_n else "n/a"
        lines.append(
            f"| {m.mode} | {m.n} | {m.tokens_per_s:.1f} | {_speed(m.speedup)} | {_f(m.acceptance, '.1%', '')} "
            f"| {_f(m.mean_acceptance_length, '.2f', '')} | {share:.0%} | {ident} |"
        )
    return "\n".join(lines)


def served_setting(info: RunInfo) -> str:
    """The settings line of a run a serving engine answered (`engines sweep`, `engines side-by-side`)."""
    served = info.config.get("engine") or {}
    cfg = info.config.get("serve_engines") or info.config.get("serve") or {}
    load = info.config.get("load")
    if load:  # a load level (`engines load`)
        return (
            f"engine {load.get('engine')}, model {Path(info.target).name}, prompts {load.get('prompts')} "
            f"({'chat' if load.get('chat') else 'raw'}), {load.get('max_new_tokens')} new tokens, "
            f"concurrency {info.config.get('level')}"
        )
    if "phoenix_serve" in info.config:  # Phoenix's server's own live run
        s = info.config["phoenix_serve"]
        return (
            f"Phoenix's server, drafter {info.config.get('drafter')}, max batch {s.get('max_batch')}, {s.get('dtype')}"
        )
    if not served:
        return ""
    parts = [f"engine {served.get('engine')} {served.get('version') or ''}".strip(), f"model {info.target}"]
    if cfg:
        parts.append(
            f"prompts {cfg.get('prompts')} ({'chat' if cfg.get('chat') else 'raw'}), "
            f"{cfg.get('max_new_tokens')} new tokens"
        )
    return ", ".join(parts)


def spec_bench(store: Store, run_id: int) -> pd.DataFrame:
    """Spec-Bench runs: the leaderboard's table (engine.bench.leaderboard), empty for other prompts."""
    return leaderboard(store.category_requests(run_id))


def pass_table(store: Store, run_id: int) -> pd.DataFrame:
    """Per drafting mode of a run: tokens per pass, the pass's cost in reference tokens, the model's speedup and
    the acceptance it would need (engine.analysis.pass_cost), from the requests the run answered."""
    rows = [r for r in store.requests(run_id) if not r.warmup]
    frame = pd.DataFrame(
        [
            {
                "mode": r.mode,
                "prompt_id": r.prompt_id,
                "output_tokens": r.output_tokens,
                "latency_s": r.latency_s,
                "passes": r.passes,
                "proposed": r.proposed,
                "accepted": r.accepted,
                "error": r.error,
                "k": r.k,
            }
            for r in rows
        ]
    )
    ref = reference_mode(frame["mode"].unique()) if not frame.empty else None
    if ref is None:
        return pd.DataFrame()
    return pass_costs(frame, ref, frame.groupby("mode")["k"].max().to_dict())


def oracle(store: Store, run_id: int) -> pd.DataFrame:
    """The per-prompt oracle and every mode's share of it (engine.analysis.oracle); empty below two fixed modes."""
    return oracle_table(store.prompt_rewards(run_id))


def sources(store: Store, run_id: int) -> pd.DataFrame:
    """A hybrid's passes by the source that drafted them (engine.analysis.sources); empty without one."""
    return source_passes(store.source_counts(run_id))


def source_positions(store: Store, run_id: int) -> pd.DataFrame:
    """A hybrid's per-position counts by source, in the shape every acceptance curve is drawn from."""
    return summed_source_positions(store.source_counts(run_id))


def oracle_markdown(table: pd.DataFrame) -> str:
    """The oracle table as Markdown, for the docs."""
    if table.empty:
        return ""
    lines = [
        "| mode | n | x reference | share of oracle, median (IQR) | oracle picks |",
        "|---|---:|---:|---:|---:|",
    ]
    for _, r in table.iterrows():
        share = r["share of oracle"]
        shown = (
            "1"
            if r["mode"] == "oracle"
            else "n/a"
            if pd.isna(share)
            else f"{share:.3f} ({r['share p25']:.3f}-{r['share p75']:.3f})"
        )
        picks = "" if pd.isna(r["oracle picks"]) else str(int(r["oracle picks"]))
        lines.append(f"| {r['mode']} | {r['n']} | {_f(r['x reference'], '.2f')}x | {shown} | {picks} |")
    return "\n".join(lines)


def spec_bench_positions(store: Store, run_id: int) -> pd.DataFrame:
    return per_position(store.category_positions(run_id))


def csv_rows(rows: list[ModeSummary]) -> list[dict]:
    return [
        {
            "mode": m.mode,
            "n": m.n,
            "tokens_per_s": m.tokens_per_s,
            "speedup_median": m.speedup.median if m.speedup else None,
            "speedup_p25": m.speedup.p25 if m.speedup else None,
            "speedup_p75": m.speedup.p75 if m.speedup else None,
            "acceptance": m.acceptance,
            "mean_acceptance_length": m.mean_acceptance_length,
            "tokens_per_pass": m.tokens_per_pass,
            "failed": m.failed,
            "p50_latency_s": m.p50_latency_s,
            "p95_latency_s": m.p95_latency_s,
            "identical": m.identical_n,
            "checked": m.checked_n,
        }
        for m in rows
    ]


def report(store: Store, run_id: int) -> str:
    return format_table(summaries(store, run_id))
