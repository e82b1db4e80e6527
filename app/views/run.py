"""Run: KPIs per mode and the charts that explain them."""

from __future__ import annotations

import streamlit as st

from app import (
    actions,
    charts,
    data,
    oracle,
    provenance,
    quality,
    served,
    serving,
    specbench,
    tracking,
    urlstate,
    widgets,
)
from app import run_notes as notes
from app.cost import cost_line
from engine.analysis.fit import fit_run
from engine.analysis.speedup import SPEEDUP
from engine.analysis.stats import FEW
from engine.modes import Mode, reference_mode
from engine.paths import DATA_DIR
from engine.queue.autostart import worker_pid


def render() -> None:
    url = data.db_url()
    st.title("Run")
    data.run.clear()  # one row by key: the picker's label, the header, controls and banners agree with the status now
    run_id = widgets.run_picker(url)
    if run_id is None:
        return
    info = data.run(url, run_id)
    if info.config_error:  # shown, not swallowed: the page falls back to the stored dict
        st.warning(
            "This run's stored settings do not parse in this version of Phoenix; figures that need them are left out:"
        )
        st.code(info.config_error, language=None, wrap_lines=True)
    tracking.show_note(info)
    if "run_notice" in st.session_state:
        st.info(st.session_state.pop("run_notice"))
    run_actions(info)
    tracking.panel(info)
    if info.status in ("running", "queued"):
        live(url, run_id, info.status)
    else:
        body(url, run_id)
    urlstate.show_share_link("run")


@st.fragment(run_every="3s")
def live(url: str, run_id: int, status: str) -> None:
    data.run.clear()
    if data.run(url, run_id).status != status:
        # every read starts over: the picker's label, the controls, the banners and the per-mode counts change too
        # ("done · 24/24" once sat beside a mode at n = 7 until a reload)
        data.changed()
        st.rerun()
    body(url, run_id)


def run_actions(info) -> None:
    """Cancel a queued or running run; resume an interrupted, failed or cancelled one; run a bench run again."""
    if info.bench is not None and not data.read_only():
        st.page_link("views/new_run.py", label="Run again with these settings", query_params={"from": str(info.id)})
    can_cancel = info.status in ("queued", "running")
    can_resume = info.status in ("interrupted", "failed", "cancelled")
    if not (can_cancel or can_resume) or data.read_only():
        return
    with st.expander("Cancel" if can_cancel else "Resume"):
        token = actions.token_field("run_token")
        label = f"Cancel run #{info.id}" if can_cancel else f"Resume run #{info.id}"
        if st.button(label, key="run_action"):
            denied = actions.permission(token)
            if denied:
                st.error(denied)
                return
            if can_cancel:
                notice = notes.cancel_notice(info.id, actions.cancel_run(info.id))
            else:
                ok = actions.resume_run(info.id)
                resumed = f"Run #{info.id} queued to resume; done prompts are skipped."
                notice = resumed if ok else "This run cannot be resumed."
            # the page was drawn for the old status: draw it again for the new one, so it polls until the run ends
            # (after a Resume it once stayed on "queued 3/8" while the run finished 8/8)
            st.session_state["run_notice"] = notice
            data.run.clear()
            data.runs.clear()
            st.rerun()


def body(url: str, run_id: int) -> None:
    info = data.run(url, run_id)
    b = info.bench
    # st.text: model paths and names are user text, and st.text never interprets Markdown.
    setting = (
        (f" · bandits draft with {b.bandit_drafter()}" if b.bandit_drafter() else "")
        + f" · max new tokens {b.max_new_tokens} · prompts {b.prompt_format} · {b.dtype}"
        if b is not None
        else ""
    )
    warm = data.warmup_count(url, run_id)
    # a live server's run has no total to reach: "7/0 requests" once read as a broken count
    done = f"{info.progress_done}/{info.progress_total}" if info.progress_total else f"{info.progress_done}"
    st.text(
        f"#{info.id} · {info.status} · target {info.target} · draft {info.draft or 'none'}{setting} · {done} requests"
        + (
            f" · plus {warm} warm-up request{'s' if warm != 1 else ''} (one per mode: stored, left out of every figure)"
            if warm
            else ""
        )
    )
    if b is not None and b.temperature > 0:
        st.caption(provenance.sampling_line(b))
    if info.status == "running" and not info.progress_done and b is not None and warm < len(b.modes):
        st.info(  # the first minutes of a run are its warm-ups: said as such, not shown as a stalled 0/N
            f"Warming up: one untimed request per mode before the first measured one ({warm} of {len(b.modes)} "
            "done); they are stored and left out of every figure."
        )
    provenance.panel(url, info)
    if info.status in ("running", "queued") and info.progress_total:
        st.progress(min(info.progress_done / info.progress_total, 1.0))
    if info.status == "queued":
        queue_panel(url, info)
    if info.status == "running" and info.config.get("preparing"):
        st.info("Preparing the models:")
        st.text(str(info.config["preparing"]))
    if info.error:
        st.error("Run failed with this error:")
        st.code(info.error, language=None)
    widgets.identity_banner(url, run_id, info)
    notes.drift_warning(url, run_id)
    notes.compile_line(info.config.get("compile"))
    notes.distill_link(url, run_id)
    notes.sentry_explorer(run_id)
    serving.live(url, info)  # Phoenix's own server: its loop over time, what the tuner chose
    if served.watch(url, info):  # a live server's counters over time: intervals, not requests
        return
    if quality.view(url, info):  # answer quality (lm-eval): scores and answers, no timings
        return
    summaries = data.summaries(url, run_id)
    if not summaries:
        st.info("No requests recorded yet.")
        return
    kpis(summaries)
    cost_line(info, summaries)
    provenance.latency(url, info)
    serving.level(url, info)  # a load level: its variants side by side
    tracking.baseline_table(url, info, [m.mode for m in summaries])
    specbench.columns(url, run_id)
    oracle.panel(url, run_id)
    served.sweep(info)
    pos, split, sample = data.positions(url, run_id), data.arm_totals(url, run_id), data.request_sample(url, run_id)
    drafter = info.bench.drafter if info.bench else str(info.config.get("drafter") or "model")  # a server's own
    fit = fit_run(
        pos, split, data.prompt_rewards(url, run_id), drafter, drafter_arms=bool(info.bench and info.bench.drafter_arms)
    )
    st.info(notes.diagnosis(fit, summaries, drafter))
    st.subheader("Per-position acceptance")
    if pos.empty and any(m.proposed for m in summaries):  # llama.cpp's answers: totals only (its run #102 said none)
        st.caption(
            "This engine's answers give drafted and accepted totals per request, not per position, so no curve is "
            "drawn here; its server-wide per-position counters are in the level's table above."
        )
    elif pos.empty:
        st.caption("No drafted tokens in this run.")
    else:
        frame, fits = charts.acceptance_frame(pos)
        charts.show(charts.acceptance_chart(frame), width="stretch")
        fitted = ", ".join(f"{arm} a={a:.3f}" for arm, a in fits.items())
        st.caption(charts.ACCEPTANCE_NOTE + " Fitted a per arm: " + fitted)
        widgets.csv_download(frame, f"run{run_id}-acceptance", key="dl_acc")
    oracle.sources(url, run_id)
    draft_lengths(info, pos, split)
    st.subheader("Tokens/sec per arm")
    charts.show(charts.tokens_per_arm_chart(sample, urlstate.trace_url), width="stretch")
    st.subheader("Where the time goes")
    timed = split[["prefill_s", "draft_prefill_s", "draft_s", "verify_s"]].fillna(0.0).to_numpy().sum() > 0
    if timed:
        charts.show(charts.time_split_chart(split), width="stretch")
        widgets.csv_download(split, f"run{run_id}-time-split", key="dl_split")
    else:  # another engine's answers carry no split of their time: an empty chart with one tick said nothing
        st.caption("No time split: this engine's answers do not say how long drafting, verifying and prefill took.")
    bandit(data.bandit(url, run_id))
    st.subheader("Latency distribution")
    charts.show(charts.latency_chart(sample), width="stretch")
    widgets.csv_download(sample, f"run{run_id}-requests", key="dl_sample")


ADD_WORKER = "PHOENIX_DB=<this database> .venv/bin/python -m engine worker"


def queue_panel(url: str, info) -> None:
    """Where a queued run stands: its place, what runs before it, who serves the queue, and an ETA from the
    target's own measured requests."""
    q, serving = data.queue_state(url, info.id), data.workers(url)
    ahead = q.position - 1
    st.info(
        f"Queued: number {q.position} in the queue ({ahead} run{'s' * (ahead != 1)} ahead, "
        f"{q.queued_ahead_requests:,} requests); {q.running} run{'s' * (q.running != 1)} in progress "
        f"({q.running_left_requests:,} requests left). Live workers: {len(serving)}"
        + (f" ({', '.join(serving)})" if serving else " (a worker that is starting shows here within a minute)")
        + "."
    )
    eta = q.eta_s(info.progress_total, len(serving))
    if eta is not None:
        st.caption(
            f"ETA: done in about {eta / 60:.0f} min ({eta:,.0f} s): its own requests at {q.mean_request_s:.2f} s "
            f"each (the mean of this target's latest {q.measured_n} measured requests), after every request ahead "
            f"at its own run's target's time, shared among {len(serving)} worker{'s' * (len(serving) != 1)}."
        )
    elif q.mean_request_s is None:
        st.caption("No ETA yet: no request of this target has been measured in this database.")
    elif q.ahead_s is None:
        st.caption("No ETA yet: a run ahead has a target with no measured request in this database.")
    starting = worker_pid(DATA_DIR, url) if not serving else None
    if starting is not None:  # autostarted, not yet registered: "no worker serves it" would be untrue
        st.info(f"A worker is starting for this database (pid {starting}); the run begins once it has loaded.")
    elif not serving:
        st.warning("No worker serves this database now, so nothing will run. Start one in a terminal:")
    else:
        st.caption(
            "Another worker adds capacity (workers share one queue; on a machine with few cores two workers "
            "slow each other and each other's timings, so add them on other machines with PostgreSQL):"
        )
    st.code(ADD_WORKER, language="bash")


def draft_lengths(info, pos, split) -> None:
    """Adaptive drafters (suffix, n-gram) draft fewer than k tokens on some passes: how many, and how often none."""
    drafter = info.bench.drafter if info.bench is not None else "model"
    adaptive = {m for m in split["mode"].unique() if Mode.of(m).drafter(drafter) in ("ngram", "suffix")}
    frame = charts.draft_length_frame(pos, split, adaptive) if adaptive and not pos.empty else None
    if frame is None or frame.empty:
        return
    st.subheader("Draft length per pass")
    charts.show(charts.draft_length_chart(frame), width="stretch")
    none = frame[frame["draft length"] == 0]
    st.caption(
        "Share of passes that proposed nothing: "
        + ", ".join(
            f"{r.arm} {r.share:.1%} ({r.passes:,} of {int(frame[frame['arm'] == r.arm]['passes'].sum()):,})"
            for r in none.itertuples()
        )
    )


def bandit(history: dict) -> None:
    if history["choices"].empty:
        return
    st.subheader("Bandit over time")
    modes = sorted(history["choices"]["mode"].unique())
    mode = modes[0]
    if len(modes) > 1:
        mode = st.selectbox("Policy mode", modes, key="bandit_mode")
        st.caption("Several policies ran here; the Policies page compares them against the best fixed arm.")
    shown = {name: frame[frame["mode"] == mode] for name, frame in history.items()}
    decisions = int(shown["signals"]["n"].sum())
    if decisions and int(shown["choices"]["explored_n"].sum()) == decisions:
        st.info(
            f"All {decisions} decisions so far explored: a policy first tries every arm (epsilon-greedy twice "
            "each) before it chooses, so the exploration signal sits at its start and each running estimate rests "
            "on a request or two. Runs with more prompts than that show the policy choosing."
        )
    if decisions > len(shown["signals"]):
        st.caption(
            f"{decisions:,} decisions drawn as {len(shown['signals']):,} windows; point size is decisions per window."
        )
    charts.show(charts.bandit_charts(shown, urlstate.trace_url), width="stretch")


def kpis(summaries) -> None:
    """Per mode, n first and every figure a decision rests on with its interval. Four short values to a row, so
    none is cut at 1280 px; the unit sits in the label or right after the number."""
    base = reference_mode(m.mode for m in summaries)
    st.caption(f"{SPEEDUP}. The reference of this run: {base or 'none (no speedup without one)'}.")
    for m in summaries:
        few = f" (fewer than {FEW}: read every figure as a hint)" if m.n < FEW else ""
        st.text(f"{m.mode} · n = {m.n} requests{few}")
        top, low = st.columns(4), st.columns(4)
        top[0].metric("tokens/sec", f"{m.tokens_per_s:.2f}")
        top[1].metric(
            "x target" if base == "target" else "x reference",
            "n/a" if m.speedup is None or m.speedup.median is None else f"{m.speedup.median:.2f}x",
            help=SPEEDUP,
        )
        top[2].metric(
            "acceptance",
            "n/a" if m.acceptance is None else f"{m.acceptance:.1%}",
            help="accepted / proposed drafted tokens, with Wilson's 95% interval",
        )
        top[3].metric("identical", f"{m.identical_n}/{m.checked_n}" if m.checked_n else "unchecked")
        low[0].metric("mean latency", f"{m.mean_latency_s:.3f} s")
        low[1].metric("p50 latency", f"{m.p50_latency_s:.3f} s")
        low[2].metric("p95 latency", f"{m.p95_latency_s:.3f} s")
        low[3].metric(
            "mean acceptance length",
            "n/a" if m.mean_acceptance_length is None else f"{m.mean_acceptance_length:.2f}",
            help="vLLM's: 1 + accepted / passes that drafted, the bonus token included",
        )
        st.caption(notes.kpi_intervals(m, base))


render()
