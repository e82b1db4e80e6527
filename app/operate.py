"""Who may start or cancel runs. Viewing is always read-only and open."""
from __future__ import annotations

import hmac
import os

import streamlit as st

LOCAL = ("127.0.0.1", "localhost", "::1")


def token_field(key: str) -> str:
    if os.environ.get("PHOENIX_OPERATOR_TOKEN"):
        return st.text_input("Operator token", type="password", key=key)
    return ""


def permission(given: str) -> str | None:
    """None when the action is allowed, else the reason it is not."""
    token = os.environ.get("PHOENIX_OPERATOR_TOKEN", "")
    if token:
        if given and hmac.compare_digest(given.encode(), token.encode()):
            return None
        return "Enter the operator token (PHOENIX_OPERATOR_TOKEN) to start or cancel runs."
    address = (st.get_option("server.address") or "127.0.0.1").strip()
    if address in LOCAL:
        return None
    return ("This dashboard is reachable beyond localhost: set PHOENIX_OPERATOR_TOKEN on the server to allow "
            "starting and cancelling runs.")
