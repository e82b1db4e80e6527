"""A quality run's view (lm-eval through a server, engine.imports.lm_eval): its scores per task, what each request
asked of the server, and each document's score beside its answer (plain text in a table, never rendered)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app import data, tables


def view(url: str, info) -> bool:
    """True where the run is a quality run (the page shows this instead of load figures)."""
    quality = (info.config or {}).get("quality")
    if not isinstance(quality, dict):
        return False
    st.subheader("Answer quality")
    scores = [
        {"task": task, "metric": metric, "value": value}
        for task, metrics in (quality.get("scores") or {}).items()
        for metric, value in metrics.items()
    ]
    tables.show(pd.DataFrame(scores), name="quality-scores")
    st.caption(
        f"Drafter asked for per request: {quality.get('drafter', 'not said')}; "
        "python -m engine lm-eval compares each drafter with the first on the same documents."
    )
    per_doc = quality.get("per_sample") or {}
    rows = [
        {"document": r.prompt_id, **per_doc.get(r.prompt_id, {}), "answer": r.output_text}
        for r in data.store().requests(info.id)
    ]
    if rows:
        tables.show(pd.DataFrame(rows), name="quality-answers", widths={"answer": "large"})
    return True
