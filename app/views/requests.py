"""Requests: every request of a run, filterable, with its per-position accepts and trace link."""

from __future__ import annotations

import streamlit as st

from app import data, tables, urlstate, widgets
from engine.modes import K_MAX

IDENTITY = ["", "yes", "no", "unchecked"]


def render() -> None:
    url = data.db_url()
    st.title("Requests")
    run_id = widgets.run_picker(url)
    if run_id is None:
        return
    widgets.identity_banner(url, run_id)
    modes = [""] + [m.mode for m in data.summaries(url, run_id)]
    c1, c2, c3, c4 = st.columns(4)
    mode_q = urlstate.qp("mode")
    mode = c1.selectbox("Mode", modes, index=modes.index(mode_q) if mode_q in modes else 0, key="r_mode")
    arm_text = c2.text_input("Arm k", value=urlstate.qp("arm"), key="r_arm")
    ident_q = urlstate.qp("identical")
    ident = c3.selectbox(
        "Identical", IDENTITY, index=IDENTITY.index(ident_q) if ident_q in IDENTITY else 0, key="r_ident"
    )
    search = c4.text_input(
        "Search prompt id / output", value=urlstate.qp_filter("q"), key="r_q", max_chars=urlstate.FILTER_MAX
    )
    arm = urlstate.whole(arm_text, 0, K_MAX)
    if arm_text.strip() and arm is None:
        st.warning(f"Arm k must be a whole number from 0 to {K_MAX}; the filter is ignored.")
    urlstate.set_qp(mode=mode, arm=arm, identical=ident, q=search)
    df = data.requests(url, run_id, mode, arm, ident, search)
    if urlstate.sentry_web():
        df.insert(1, "trace", [urlstate.trace_url(t) for t in df["trace_id"]])
        cfg = {"trace": st.column_config.LinkColumn("trace", display_text="Sentry trace")}
    else:
        st.caption(
            "Sentry is not configured (set PHOENIX_SENTRY_WEB to your org's URL, e.g. https://myorg.sentry.io); "
            "trace ids are shown so links work once it is."
        )
        cfg = {}
    tables.show(df, name="requests", formats={"latency_s": "%.3f", "tokens_per_s": "%.2f"}, config=cfg)
    st.caption(f"{len(df)} requests shown (at most 500; narrow the filters for more).")
    widgets.csv_download(df, f"run{run_id}-requests", key="dl_req")
    if not df.empty:
        detail(url, run_id, df)
    urlstate.show_share_link("requests")


def detail(url: str, run_id: int, df) -> None:
    ids = df["id"].tolist()
    wanted = urlstate.qp_int("request")
    chosen = st.selectbox(
        "Request", ids, index=ids.index(wanted) if wanted in ids else 0, key="r_pick", format_func=lambda i: f"#{i}"
    )
    urlstate.set_qp(request=chosen)
    info, pos = data.request_detail(url, chosen)
    if info is None:
        return
    st.text(
        f"{info['mode']} · k = {int(info['k'])} · prompt {info['prompt_id']} · "
        f"{info['accepted']}/{info['proposed']} drafted tokens accepted in {info['passes']} passes"
    )
    if info["identical"] is False:
        st.error(f"Output differs from target-only decoding from token {info['diverged_at']} on.")
    link = urlstate.trace_url(info["trace_id"])
    if link:
        st.link_button("Open Sentry trace", link)
    elif info["trace_id"]:
        st.caption(f"trace id: {info['trace_id']}")
    else:
        st.caption("No trace: Sentry was off when this request ran.")
    prompt = data.prompt_text(url, run_id, info["prompt_id"])
    st.markdown("Prompt")
    st.code(
        prompt if prompt is not None else "(not stored: this run was recorded before runs kept their prompts)",
        language="python",
    )
    st.markdown("Output")
    st.code(info["output_text"], language="python")
    if not pos.empty:
        tables.show(pos)


render()
