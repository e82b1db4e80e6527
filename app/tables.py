"""Every table a page shows goes through ``show``: headers in words, numbers in their format, a missing value as a
dash (never Python's None, which Streamlit's grid paints for a null), and a name the browser walk finds it by.

The grid draws on a canvas, so a null cannot be styled away: a column holding one is shown as text, each value
formatted here. A column without one stays numeric and sorts as numbers."""

from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from engine.errors import PhoenixError
from engine.modes import Mode

MISSING = "–"
FLOAT = "%.3f"  # a float column's format where the page names none: full float precision is noise on a screen
RAW = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+")  # a Python name: how a header must not read
WORDS = {  # names whose plain reading is not just the name with spaces
    "prompt_id": "prompt",
    "created_at": "created",
    "finished_at": "finished",
    "progress_done": "requests done",
    "progress_total": "requests in all",
    "tokens_per_s": "tokens/s",
    "target_tokens_per_s": "target tokens/s",
    "throughput_tok_s": "throughput (tok/s)",
    "p_value": "Welch p",
    "diverged_at": "diverged at token",
    "trace_id": "trace",
    "output_sha256": "output sha256",
    "mean_accepted": "mean accepted tokens",
    "ci_low": "95% CI low",
    "ci_high": "95% CI high",
}


def is_mode(text: str) -> bool:
    """A mode's name (model_4, bandit:epsilon_greedy) is the field's word, not a raw identifier."""
    try:
        Mode.parse(text)
    except (PhoenixError, ValueError):
        return False
    return True


def is_raw(text: str) -> bool:
    return bool(RAW.fullmatch(text)) and not is_mode(text)


def header(name: str) -> str:
    """A column's header: its plain words, the unit of a ``_s`` column in brackets."""
    if name in WORDS:
        return WORDS[name]
    if not is_raw(name):
        return name
    if name.endswith("_s"):
        return f"{name[:-2].replace('_', ' ')} (s)"
    return name.replace("_", " ")


def missing(values: pd.Series) -> pd.Series:
    return values.isna() | values.map(lambda v: isinstance(v, str) and not v.strip())


def as_text(value, fmt: str | None) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)) or (isinstance(value, str) and not value):
        return MISSING
    if fmt and isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt % value
    return str(value)


def prepared(
    df: pd.DataFrame,
    formats: dict | None = None,
    labels: dict | None = None,
    config: dict | None = None,
    widths: dict | None = None,
):
    """(the frame to draw, its column config): what ``show`` hands Streamlit, apart so tests can read it."""
    formats, labels, config, widths = formats or {}, labels or {}, dict(config or {}), widths or {}
    shown = df.copy()
    out = {}
    for col in df.columns:
        if col in config:  # the caller's own column type (a link): its label is the caller's too
            out[col] = config[col]
            continue
        label = labels.get(col) or header(str(col))
        values = df[col]
        fmt = formats.get(col) or (FLOAT if pd.api.types.is_float_dtype(values) else None)
        numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
        if numeric and not missing(values).any():
            out[col] = st.column_config.NumberColumn(label, format=fmt, width=widths.get(col))
        elif pd.api.types.is_bool_dtype(values) or pd.api.types.is_datetime64_any_dtype(values):
            if missing(values).any():
                shown[col] = [as_text(v, None) for v in values]
            out[col] = st.column_config.Column(label, width=widths.get(col))
        else:
            shown[col] = [as_text(v, fmt) for v in values]
            out[col] = st.column_config.TextColumn(label, width=widths.get(col))
    return shown, out


def show(
    df: pd.DataFrame,
    name: str | None = None,
    formats: dict | None = None,
    labels: dict | None = None,
    config: dict | None = None,
    widths: dict | None = None,
    where=None,
    **kwargs,
) -> None:
    """Draw ``df`` full width. ``name`` puts it in a container the browser walk checks fits the page; ``widths``
    are pixels (or small/medium/large) for columns whose text would push the rest off screen."""
    shown, column_config = prepared(df, formats, labels, config, widths)
    box = (where or st).container(key=f"table_{name}") if name else (where or st)
    box.dataframe(shown, hide_index=True, width="stretch", column_config=column_config, **kwargs)
