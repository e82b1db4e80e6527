"""The Streamlit dashboard: `main.py` builds the navigation, `data` is the one cached read module, `actions` the writes
a page triggers, `charts` the Altair charts, `urlstate` every link; pages live in `views/`.
"""
