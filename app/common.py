"""Small helpers the pages share: state in the URL, links, run picking, downloads."""
from __future__ import annotations

import os
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from app import data


def guard() -> str:
    """Stop the page with one clear line when the database is unusable; else its URL."""
    problem = data.schema_problem()
    if problem:
        st.error(problem)
        st.stop()
    return data.db_url()


def code_span(text: object) -> str:
    """User text inside inline code in Markdown: backticks removed so it cannot break out."""
    return "`" + str(text).replace("`", "'") + "`"


def qp(name: str, default: str = "") -> str:
    return st.query_params.get(name, default)


def qp_int(name: str) -> int | None:
    try:
        return int(st.query_params.get(name, ""))
    except ValueError:
        return None


def set_qp(**values) -> None:
    for key, value in values.items():
        if value in (None, "", []):
            if key in st.query_params:
                del st.query_params[key]
        else:
            st.query_params[key] = str(value)


def public_base() -> str:
    return os.environ.get("PHOENIX_PUBLIC_URL", "http://localhost:8501").rstrip("/")


def share_link(page: str) -> str:
    params = {k: v for k, v in st.query_params.to_dict().items() if k != "token"}  # links never carry a secret
    query = urlencode(params)
    return f"{public_base()}/{page}" + (f"?{query}" if query else "")


def show_share_link(page: str) -> None:
    with st.expander("Copy link to this view"):
        st.code(share_link(page), language=None)


def sentry_web() -> str | None:
    base = os.environ.get("PHOENIX_SENTRY_WEB", "").strip().rstrip("/")
    return base or None


def trace_url(trace_id: str | None) -> str | None:
    base = sentry_web()
    return f"{base}/explore/traces/trace/{trace_id}" if (base and trace_id) else None


def run_picker(url: str, key: str = "run") -> int | None:
    runs = data.runs(url)
    if runs.empty:
        empty_state()
        return None
    ids = runs["id"].tolist()
    labels = {r.id: f"#{r.id} {r.name} [{r.status}]" for r in runs.itertuples()}
    current = qp_int(key)
    index = ids.index(current) if current in ids else 0
    chosen = st.selectbox("Run", ids, index=index, format_func=lambda i: labels[i], key=f"pick_{key}")
    set_qp(**{key: chosen})
    return chosen


def empty_state() -> None:
    st.info("No runs yet. Phoenix records every request of a benchmark run here: per-position acceptance, "
            "tokens/sec per draft length, where the time goes, and whether outputs match the target alone.")
    if st.button("Start a quick demo on the embedded pair (5 prompts, 64 tokens)", key="empty_demo", type="primary"):
        from app import operate
        from app.views.new_run import DEMO, queue

        denied = operate.permission("")
        if denied:
            st.error(denied)
        else:
            queue(data.db_url(), DEMO())
    st.markdown("Or from a shell, in the foreground:")
    st.code("python -m engine bench --limit 5 --max-new-tokens 64 --modes target,fixed_4,bandit", language="bash")


def identity_banner(url: str, run_id: int) -> None:
    same, checked, bad = data.identity(url, run_id)
    if checked == 0:
        st.warning("No output of this run was checked against target-only decoding (add `target` mode or a shadow rate).")
    elif bad.empty:
        st.success(f"Identity: {same}/{checked} checked outputs are identical to target-only decoding.")
    else:
        st.error(f"DIVERGENCE: {checked - same} of {checked} checked outputs differ from target-only decoding. "
                 "Greedy speculation should never change the text; in bf16/fp16 batched verification can flip near-tie argmaxes.")
        st.dataframe(bad, hide_index=True, width="stretch")
        csv_download(bad, f"run{run_id}-divergences", key="dl_div")


def csv_download(df: pd.DataFrame, name: str, key: str) -> None:
    st.download_button("Download CSV", df.to_csv(index=False).encode(), file_name=f"{name}.csv", mime="text/csv", key=key)
