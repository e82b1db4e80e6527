"""Phoenix dashboard entry point: builds the navigation, checks the database once, runs the page."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from app import data  # noqa: E402

st.set_page_config(page_title="Phoenix", page_icon="🔥", layout="wide")
page = st.navigation(
    [
        # The default page is served at "/"; the hidden twin answers "/runs", the address links and users type.
        st.Page("views/runs.py", title="Runs", url_path="home", default=True),
        st.Page("views/runs.py", title="Runs", url_path="runs", visibility="hidden"),
        st.Page("views/run.py", title="Run", url_path="run"),
        st.Page("views/sweeps.py", title="Sweeps", url_path="sweeps"),
        st.Page("views/fleet.py", title="Fleet", url_path="fleet"),
        st.Page("views/breakeven.py", title="Break-even", url_path="breakeven"),
        st.Page("views/compare.py", title="Compare", url_path="compare"),
        st.Page("views/policies.py", title="Policies", url_path="policies"),
        st.Page("views/requests.py", title="Requests", url_path="requests"),
        st.Page("views/regressions.py", title="Regressions", url_path="regressions"),
        st.Page("views/new_run.py", title="New run", url_path="new"),
    ]
)
problem = data.schema_problem()
if problem:  # one clear line on every page instead of a traceback; literal, since it quotes the URL
    st.error("The database cannot be used:")
    st.code(problem, language=None, wrap_lines=True)
    st.stop()
page.run()
