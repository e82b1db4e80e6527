"""Pieces several pages show: the run picker, the empty state, the identity banner, downloads."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from app import actions, data, form, tables
from app.urlstate import qp_int, set_qp
from engine.paths import ROOT


def refused(message: str, where=None) -> None:
    """An error whose message may quote user input: a fixed headline in the alert, the message itself as
    literal text, because alerts render Markdown and user text must never be interpreted."""
    box = (where or st).container()
    box.error("Not accepted:")
    box.code(message, language=None, wrap_lines=True)


def run_picker(url: str, key: str = "run") -> int | None:
    """Unarchived runs, newest first; a link to an archived run still opens it."""
    runs = data.runs(url)
    asked = key in st.query_params
    current = qp_int(key)
    if current is not None and current not in set(runs["id"] if not runs.empty else []):
        extra = data.run(url, current)
        if extra is not None:
            runs = pd.concat(
                [
                    runs,
                    pd.DataFrame(
                        [
                            {
                                "id": extra.id,
                                "name": extra.name,
                                "status": extra.status,
                                "tags": ",".join(extra.tags),
                                "archived": extra.archived,
                            }
                        ]
                    ),
                ]
            )
    if runs.empty:
        empty_state()
        return None
    ids = runs["id"].tolist()
    fresh = data.run(url, current) if current in ids else None  # the list is cached: the open run's status is read now
    said = status_word(fresh) if fresh is not None else None
    labels = {
        r.id: f"#{r.id} {r.name} [{said if said is not None and r.id == current else r.status}]"
        + "".join(f" #{t}" for t in str(r.tags or "").split(",") if t)
        + (" (archived)" if r.archived else "")
        for r in runs.itertuples()
    }
    if asked and current not in ids:
        # Never show another run in its place: the link's reader would take it for the one that was shared.
        st.error(
            f"Run #{current} was not found in this database." if current else "This link's run id is not a run id."
        )
    index = ids.index(current) if current in ids else (None if asked else 0)
    chosen = st.selectbox(
        "Run", ids, index=index, format_func=lambda i: labels[i], key=f"pick_{key}", placeholder="Choose a run"
    )
    if chosen is not None:
        set_qp(**{key: chosen})
    return chosen


def empty_state() -> None:
    st.info(
        "No runs yet. Phoenix records every request of a benchmark run here: per-position acceptance, "
        "tokens/sec per draft length, where the time goes, and whether outputs match the target alone."
    )
    demo_buttons("empty")
    st.markdown("Or from a shell, in the foreground:")
    st.code("python -m engine bench --limit 5 --max-new-tokens 64 --modes target,model_4,bandit", language="bash")


def demo_buttons(key: str, token: str = "") -> None:
    """The quick demo, and while SmolLM2 is not fetched, the way to it: a demo that fetches it first."""
    locked = data.read_only()
    if locked:
        st.caption(locked)
        return
    choices = [(actions.demo_config(), f"{key}_demo", "primary", "")]
    if form.real_pair_present():  # the embedded pair stays one click away: seconds, offline, the README's promise
        choices.append((actions.demo_config(real=False), f"{key}_demo_embedded", "secondary", ""))
    else:
        choices.append(
            (
                actions.demo_config(real=True),
                f"{key}_demo_real",
                "secondary",
                " (fetches SmolLM2-135M first: 93 MB, about 30 s)",
            )
        )
    for cfg, button_key, kind, note in choices:
        clicked = st.button(
            f"Quick demo: {cfg.name}, {cfg.limit} prompts, {cfg.max_new_tokens} tokens{note}", key=button_key, type=kind
        )
        st.caption(actions.demo_length(cfg))  # its length, said before it starts
        if clicked:
            denied = actions.permission(token)
            if denied:
                st.error(denied)
            else:
                run, _, _ = actions.queue_run(cfg)
                # to the run itself: the page it was queued from would go on saying "No runs yet" beside it
                st.switch_page("views/run.py", query_params={"run": str(run.id)})


def queued(run, worker: str, log) -> None:
    st.success(f"Run #{run.id} queued ({run.progress_total} requests).")
    # a page link, not a URL: it opens the Run page in this tab, on whatever port and path the dashboard has
    st.page_link("views/run.py", label=f"Watch run #{run.id} live", query_params={"run": str(run.id)})
    if worker == "disabled":
        st.caption("Worker autostart is off (PHOENIX_AUTOSTART_WORKER=0): your own workers will pick it up.")
    else:
        st.caption(
            f"Background worker for this database {worker}; its log is "
            f"{Path(log).relative_to(ROOT) if Path(log).is_relative_to(ROOT) else log}."
        )


def shadow_rate(info) -> float:
    """The share of outputs a run re-decodes target-only: a lab run's --shadow-rate or a server's."""
    if info.bench is not None:
        return float(getattr(info.bench, "shadow_rate", 0.0) or 0.0)
    return float((info.config.get("phoenix_serve") or {}).get("shadow_rate") or 0.0)


def identity_banner(url: str, run_id: int, info=None) -> None:
    """Identity against target-only. A run still waiting or running says what it waits for instead of warning."""
    same, checked, bad = data.identity(url, run_id)
    if checked == 0 and info is not None and info.status in ("queued", "running"):
        has_target = info.bench is not None and "target" in info.bench.modes
        rate = shadow_rate(info)
        st.info(
            "No output checked yet: "
            + (
                "each output is checked against the target-only request on the same prompt as soon as both are done."
                if has_target
                else f"without a target mode, {rate:.0%} of outputs are re-decoded target-only as the run goes."
                if rate
                else "this run checks none (no target mode, shadow rate 0); a shadow rate above 0 (serve or bench "
                "--shadow-rate 0.1) re-decodes that share target-only."
            )
        )
    elif checked == 0 and info is not None and info.bench is not None and "target" in info.bench.modes:
        st.warning(  # it has a target mode: telling it to add one (as a cancelled run once was told) is wrong
            f"No output of this run was checked against target-only decoding: it ended ({info.status}) before any "
            "prompt had both its target-only and a speculative output. Resume it to check them."
        )
    elif checked == 0:
        st.warning(
            "No output of this run was checked against target-only decoding (add `target` mode or a shadow rate)."
        )
    elif bad.empty:
        st.success(f"Identity: {same}/{checked} checked outputs are identical to target-only decoding.")
    else:
        st.error(
            f"DIVERGENCE: {checked - same} of {checked} checked outputs differ from target-only decoding. "
            "Greedy speculation should never change the text; in bf16/fp16, and in quantized engines such as "
            "llama.cpp's Q4_1, batched verification can flip near-tie argmaxes."
        )
        # a server returns text, not tokens, and an untraced request has no trace id: blank, not Python's None
        tables.show(bad)
        csv_download(bad, f"run{run_id}-divergences", key="dl_div")


def csv_download(df: pd.DataFrame, name: str, key: str) -> None:
    st.download_button(
        "Download CSV", df.to_csv(index=False).encode(), file_name=f"{name}.csv", mime="text/csv", key=key
    )


def status_word(info) -> str:
    """A run's status as the picker says it: a run whose cancel was asked for says so until its worker stops it
    (it read [running] after Cancel)."""
    if getattr(info, "cancel_requested", False) and info.status in ("running", "queued"):
        return "cancel requested"
    return info.status
