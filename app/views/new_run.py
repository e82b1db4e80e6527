"""New run: until the background worker lands, the form builds the bench command."""
from __future__ import annotations

import shlex

import streamlit as st

from app import common


def render() -> None:
    common.guard()
    st.title("New run")
    with st.form("new_run"):
        modes = st.text_input("Modes", "target,fixed_4,bandit")
        limit = st.number_input("Prompts (held-out HumanEval)", 1, 50, 5)
        max_new = st.number_input("Max new tokens", 1, 1024, 64)
        name = st.text_input("Name", "demo")
        submitted = st.form_submit_button("Build command")
    if submitted:
        cmd = ["python", "-m", "engine", "bench", "--modes", modes, "--limit", str(limit), "--max-new-tokens", str(max_new), "--name", name]
        st.code(shlex.join(cmd), language="bash")
        st.caption("Run it in a shell at the project root; the run appears on the Runs page as requests land.")


if __name__ == "__main__":  # run as a page by st.navigation; importing renders nothing
    render()
