"""The Run page's lines around its figures: what a Cancel did, the intervals behind the KPIs, the break-even
diagnosis, a busy machine's warning, the compile line, a distillation's links and the run's traces."""

from __future__ import annotations

import streamlit as st

from app import data, urlstate
from engine.analysis.breakeven import diagnose, measured_speedups, verdict
from engine.analysis.stats import load_drift
from engine.modes import Mode


def cancel_notice(run_id: int, status: str | None) -> str:
    """What a Cancel did, in words: a running run's worker stops at its next request (the status still says running
    until it does); a queued one is cancelled at once. Never 'Run #4: running' as if nothing happened."""
    if status == "running":
        return (
            f"Run #{run_id}: cancel asked; its worker stops it after the request it is on, and the status then says "
            "cancelled. Rows already written are kept."
        )
    if status == "cancelled":
        return f"Run #{run_id} cancelled before it started."
    return f"Run #{run_id} had already ended ({status or 'not found'}); nothing to cancel."


def kpi_intervals(m, base: str | None = "target") -> str:
    """The intervals behind the KPI row, in words: what a reader needs before acting on a speedup."""
    parts = []
    if m.mode != base and m.speedup is not None and m.speedup.median is not None:
        s = m.speedup
        parts.append(f"x target {s.interval_text()}, IQR {s.p25:.2f}-{s.p75:.2f}x")
    if m.acceptance_ci is not None:
        lo, hi = m.acceptance_ci
        parts.append(f"acceptance {m.accepted:,} of {m.proposed:,} drafted tokens, 95% CI {lo:.1%}-{hi:.1%} (Wilson)")
    if m.mode == base:
        return "the reference: every x target on this page is a ratio against these requests, prompt by prompt"
    return " · ".join(parts) or "no interval: nothing drafted and no target-only requests to compare with"


def diagnosis(fit, summaries, drafter: str = "model") -> str:
    """The break-even diagnosis covers the modes of the run's --drafter (its fixed modes and bandits); modes of
    other drafters that drafted get their own line instead of 'no drafting data'."""
    if fit.a is not None:
        return verdict(fit.a, fit.best_speedup, fit.c, fit.k_best_measured, measured_speedups(summaries))
    others = [m for m in summaries if m.proposed and not Mode.of(m.mode).drafts_with(drafter)]
    if not others:
        return diagnose(None, None, None, None)
    parts = [
        f"{m.mode}: acceptance {m.acceptance:.0%}, {m.tokens_per_pass:.2f} tokens per pass"
        + (f", {m.speedup.median:.2f}x target-only (n={m.speedup.n})" if m.speedup and m.speedup.median else "")
        for m in others
    ]
    return (
        f"Drafting without a mode of the run's --drafter ({drafter}): " + "; ".join(parts) + ". The break-even fit "
        "(a, c) covers that drafter's modes; for these the per-mode table and the per-position curves are the evidence."
    )


def drift_warning(url: str, run_id: int) -> None:
    cross = data.cross_run(url, run_id)
    if cross is not None and cross[1].disturbed:
        other, d = cross
        slower = run_id if d.ratio < 1 else other
        st.warning(
            f"The machine was busy in run #{slower}: this run's target-only ran at {d.ratio:.2f}x the speed of run "
            f"#{other}'s on the same {d.n} prompts, with the same target and settings. Absolute tokens/s here "
            "are unreliable, and a comparison between the two runs measures the machine, not the drafters."
        )
    drift = load_drift(data.rewards(url, run_id, ("target",))["tokens_per_s"].tolist())
    if drift is not None and drift.busy:
        st.warning(
            f"The machine was busy during this run: target-only took {drift.later_p50_ms:.1f} ms per token at "
            f"the median and {drift.later_p95_ms:.1f} ms at p95 after its first {drift.early_n} requests, "
            f"against {drift.early_ms:.1f} ms in them. Absolute tokens/s here are unreliable; speedups pair "
            "each prompt's requests, which ran close together, so they suffer less. Rerun on a quiet machine."
        )


def compile_line(stats: dict | None) -> None:
    """--compile: the compile time apart from every figure, and recompiles, which inside a measured request are a
    bug and are shown as one."""
    if not stats:
        return
    if not stats.get("compiled"):
        st.warning("Compile failed on this platform; the run went on eager:")
        st.text(str(stats.get("error")))
        return
    frozen = ", weights frozen" if stats.get("frozen") else ""
    text = (
        f"Compiled (static cache{frozen}): warm-up {stats['warmup_s']:.1f} s before any clock, "
        f"{stats['graphs']} graphs, "
        f"{stats['graph_breaks']} graph breaks, {stats['recompiles']} recompiles after the warm-up."
    )
    (st.error if stats["recompiles"] else st.caption)(text)


def distill_link(url: str, run_id: int) -> None:
    """A distillation's before and after runs point at each other."""
    job = data.distill_for_run(url, run_id)
    if job is None:
        return
    role, other = ("before", job.after_run_id) if job.before_run_id == run_id else ("after", job.before_run_id)
    st.text(
        f"This run is the {role} evaluation of distillation #{job.id} "
        f"({job.config.get('distill', {}).get('draft', '?')} → {job.out_dir})."
    )
    links = []
    if other:  # only our own integers go into these links
        links.append(
            f"[Open the {'after' if role == 'before' else 'before'} run #{other}]({urlstate.link('run', run=other)})"
        )
        first = str(job.config.get("distill", {}).get("eval_ks", "4")).split(",")[0].strip()
        k = int(first) if first.isdecimal() and first.isascii() else 4
        if job.before_run_id and job.after_run_id:
            series = f"{job.before_run_id}:model_{k},{job.after_run_id}:model_{k}"
            links.append(f"[compare model_{k} before and after]({urlstate.link('compare', series=series)})")
    if links:
        st.markdown(" · ".join(links))
    if job.losses:
        st.caption(f"LoRA loss over {len(job.losses)} steps: {job.losses[0]:.3f} → {job.losses[-1]:.3f}")


def sentry_explorer(run_id: int) -> None:
    url = urlstate.traces_of_run(run_id)
    if url:
        st.markdown(f"[Traces of this run in Sentry]({url})")
