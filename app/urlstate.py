"""The view's state in the URL, and every link the dashboard builds.

A shared link reopens the same view: each page keeps its choices in
``st.query_params`` and links carry them, never a secret.
"""

from __future__ import annotations

import os
from urllib.parse import quote, urlencode

import streamlit as st

FILTER_MAX = 200  # free-text filters: a LIKE pattern past SQLite's limit (50,000 bytes) is an error, not a filter


def qp(name: str, default: str = "") -> str:
    return st.query_params.get(name, default)


def qp_filter(name: str) -> str:
    """A free-text filter from the URL, cut to FILTER_MAX characters (the text inputs take no more either)."""
    return qp(name)[:FILTER_MAX]


ID_MAX = 2**63 - 1  # the databases' integer ceiling: larger ids would overflow the bound parameter


def whole(text: str, lo: int = 0, hi: int = ID_MAX) -> int | None:
    """ASCII digits in lo..hi, else None. str.isdigit alone lets '²' and '٣' through, and int() refuses the first."""
    text = text.strip()
    if not (text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if lo <= value <= hi else None


def qp_int(name: str, lo: int = 1, hi: int = ID_MAX) -> int | None:
    return whole(st.query_params.get(name, ""), lo, hi)


def set_qp(**values) -> None:
    for key, value in values.items():
        if value in (None, "", []):
            if key in st.query_params:
                del st.query_params[key]
        else:
            st.query_params[key] = str(value)


def _query(params: dict) -> str:
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")}, safe=":,")  # readable run:mode lists
    return f"?{query}" if query else ""


def link(page: str, **params) -> str:
    """A link to a page of this dashboard with the given state, relative to the page it is on: every page sits at
    the app's root (/run, /compare), so it works on any port and behind a proxy's path prefix."""
    return f"./{page}{_query(params)}"


def public_base() -> str | None:
    """Where people reach this dashboard, for links that leave it (PHOENIX_PUBLIC_URL); None when unset."""
    base = os.environ.get("PHOENIX_PUBLIC_URL", "").strip().rstrip("/")
    return base or None


def share_link(page: str) -> str:
    """The URL the browser is on (scheme, host, port and any proxy path, as Streamlit saw it), with this view's
    state; PHOENIX_PUBLIC_URL where set, so a team shares the address it reaches."""
    params = {k: v for k, v in st.query_params.to_dict().items() if k != "token"}  # links never carry a secret
    base = public_base()
    if base:
        return f"{base}/{page}{_query(params)}"
    here = st.context.url  # None outside a browser session (AppTest)
    if here:
        return f"{here.split('?')[0].split('#')[0]}{_query(params)}"
    return link(page, **params)


def show_share_link(page: str) -> None:
    with st.expander("Copy link to this view"):
        st.code(share_link(page), language=None)


def sentry_web() -> str | None:
    base = os.environ.get("PHOENIX_SENTRY_WEB", "").strip().rstrip("/")
    return base or None


def trace_url(trace_id: str | None) -> str | None:
    base = sentry_web()
    return f"{base}/explore/traces/trace/{trace_id}" if (base and trace_id) else None


def traces_of_run(run_id: int) -> str | None:
    base = sentry_web()
    return f"{base}/explore/traces/?query={quote(f'run_id:{run_id}')}&statsPeriod=30d" if base else None
