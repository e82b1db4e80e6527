"""The Run page's tracker parts: the note, tags, archive, delete, the baseline pin and the comparison with it."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from markdown_it import MarkdownIt

from app import actions, data, likeness, tables, urlstate
from db.tracker import TrackerError
from engine import runspec
from engine.analysis.compare import TOKENS_PER_S, compare

# Raw HTML off and no links, images or autolinks: a note can format text but can load nothing from outside.
_NOTE = MarkdownIt("commonmark", {"html": False}).disable(["link", "image", "autolink"])


def note_html(text: str) -> str:
    return _NOTE.render(text)


def show_note(info) -> None:
    if info.tags:
        st.text("tags: " + ", ".join(info.tags))
    if info.archived:
        st.info("This run is archived: it is hidden from the lists; every row and link is kept.")
    if info.note:
        with st.container(border=True):
            st.html(note_html(info.note))


FLASH = "tracker_flash"  # what the last edit did, shown once after the rerun that redraws the page in its new state


def panel(info) -> None:
    """Tags, note, archive and delete, and the baseline pin; writes need the operator token where one is set."""
    if data.read_only():
        return
    flash = st.session_state.pop(FLASH, None)
    if flash:
        st.success(flash)
    with st.expander("Tags, note, archive, baseline", expanded=flash is not None):  # stay open after an edit
        with st.form("tracker"):
            # tags travel as a list: a comma is part of a tag, never a separator
            known = sorted(set(info.tags) | set(data.tags(data.db_url())))
            tags = st.multiselect(
                "Tags (pick, or type a new one)", known, default=info.tags, key="t_tags", accept_new_options=True
            )
            note = st.text_area("Note (Markdown; no HTML, links or images)", info.note or "", key="t_note")
            token = actions.token_field("t_token")
            saved = st.form_submit_button("Save tags and note")
        if saved and _allowed(token):
            _attempt(lambda: (actions.set_tags(info.id, tags), actions.set_note(info.id, note)), "Saved.", redraw=True)
        c1, c2, c3 = st.columns(3)
        if c1.button("Unarchive" if info.archived else "Archive", key="t_archive") and _allowed(token):
            _attempt(
                lambda: actions.set_archived(info.id, not info.archived),
                "Unarchived." if info.archived else "Archived.",
                redraw=True,
            )
        if c2.button("Pin as the baseline of its target", key="t_baseline") and _allowed(token):
            _attempt(
                lambda: actions.pin_baseline(info.id), f"Run #{info.id} is the baseline of its target.", redraw=True
            )
        delete(info, c3, token)


def delete(info, where, token: str) -> None:
    n = data.request_count(data.db_url(), info.id)
    confirm = where.checkbox(f"Delete run #{info.id} ({info.name}) and its {n:,} requests", key="t_delete_confirm")
    if where.button("Delete for good", key="t_delete", disabled=not confirm) and _allowed(token):
        _attempt(lambda: actions.delete_run(info.id), f"Run #{info.id} deleted with its {n:,} requests.")


def _allowed(token: str) -> bool:
    denied = actions.permission(token)
    if denied:
        st.error(denied)
    return denied is None


def _attempt(fn, done: str, redraw: bool = False) -> None:
    """``redraw``: rerun the page after the edit, so its banner, tags and picker show the new state at once (the
    message follows across the rerun); a deleted run has no page to redraw."""
    try:
        fn()
    except TrackerError as exc:
        st.error("Not done:")
        st.code(str(exc), language=None, wrap_lines=True)
        return
    if redraw:
        st.session_state[FLASH] = done
        st.rerun()
    st.success(done)


def baseline_table(url: str, info, modes: list[str]) -> None:
    """Each mode of this run against the pinned baseline of its target: x baseline with Welch's p-value."""
    base_id = data.baseline(url, info.target)
    if base_id is None or base_id == info.id:
        if base_id == info.id:
            st.caption("This run is the pinned baseline of its target.")
        return
    base_modes = [m.mode for m in data.summaries(url, base_id)]
    if not base_modes:
        return
    best = data.best_mode(url, base_id) or base_modes[0]  # the one rule both baseline views use
    base = {best: data.rewards(url, base_id, (best,))["tokens_per_s"].tolist()}
    base_spec = runspec.of(data.run(url, base_id), best)
    rows = []
    for mode in modes:
        differs = runspec.comparable(base_spec, runspec.of(info, mode))
        if differs:  # a delta across different work is no verdict: refused, naming the field
            rows.append({"mode": mode, "n": 0, "verdict": f"not comparable ({differs})"})
            continue
        c = compare(base[best], data.rewards(url, info.id, (mode,))["tokens_per_s"].tolist())
        rows.append(
            {
                "mode": mode,
                "n": c.n,
                "x baseline": c.ratio,
                "95% CI low": c.ratio_low,
                "95% CI high": c.ratio_high,
                "p-value": c.p_value,
                "verdict": c.verdict,
            }
        )
    st.subheader(f"Against the baseline of this target: run #{base_id}, {best} (n = {len(base[best])})")
    diff = likeness.config_diff({f"#{base_id}": (data.run(url, base_id), best), f"#{info.id}": (info, best)})
    if likeness.unlike(diff):
        st.warning(
            f"This run and baseline run #{base_id} differ: "
            + "; ".join(
                f"{r['setting']} {r[f'#{base_id}']} there, {r[f'#{info.id}']} here"
                for r in diff.to_dict("records")
                if r["key"] in likeness.UNLIKE
            )
            + ". "
            + likeness.unlike_warning(likeness.unlike(diff))
        )
    ratio = "%.2fx"
    tables.show(
        pd.DataFrame(rows),
        name="baseline",
        formats={"x baseline": ratio, "95% CI low": ratio, "95% CI high": ratio, "p-value": "%.4f"},
    )
    st.caption(
        TOKENS_PER_S + "; x baseline is the ratio of means (not the paired speedup), its interval on the log scale."
    )
    st.markdown(
        f"[Compare with the baseline]({urlstate.link('compare', series=f'{base_id}:{best},{info.id}:{modes[0]}')})"
    )
