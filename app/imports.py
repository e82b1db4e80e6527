"""New run's "Import results": a file the field's tools wrote (vllm bench serve, SGLang's bench_serving, GuideLLM,
AIPerf, lm-eval, a Prometheus scrape) uploaded, parsed and checked by the CLI's own importer, shown as the runs it
would make, and stored only when the user confirms. The CLI's size limit and refusal lines hold here: a file over
the limit or one Phoenix cannot read is one line, and nothing is stored. File names and contents are shown as
literal text, never rendered."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import streamlit as st

from app import actions, data, widgets
from engine.errors import PhoenixError
from engine.imports.config import ImportConfig
from engine.imports.files import MAX_BYTES

KEY = "imp"


def safe_name(name: str, i: int) -> str:
    """An uploaded file's name as a plain file name in the upload folder (AIPerf's records are found beside their
    aggregates by name, so the name is kept where it is safe)."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).name)[:120].lstrip(".")
    return base or f"upload-{i}"


def panel() -> None:
    with st.expander("Import results (vllm bench serve, SGLang, GuideLLM, AIPerf, lm-eval, a Prometheus scrape)"):
        files = st.file_uploader("Result files", accept_multiple_files=True, key=f"{KEY}_files")
        left, right = st.columns(2)
        engine = left.text_input("Engine measured (where the file does not say)", key=f"{KEY}_engine")
        hardware = right.text_input("Hardware (labels the runs)", key=f"{KEY}_hardware", placeholder="8x H100")
        variant = left.text_input("Setting (Phoenix's grammar)", value="as-served", key=f"{KEY}_variant")
        price = right.number_input("Hardware's price, USD an hour (0: not given)", min_value=0.0, key=f"{KEY}_price")
        token = actions.token_field(f"{KEY}_token")
        if not files:
            st.caption(f"Up to {MAX_BYTES >> 20} MB a file; an AIPerf profile with its records file beside it.")
            return
        over = [f for f in files if f.size > MAX_BYTES]
        if over:
            widgets.refused(f"{over[0].name}: {over[0].size:,} bytes, over the {MAX_BYTES >> 20} MB an import takes")
            return
        try:
            cfg = ImportConfig(engine=engine, hardware=hardware, variant=variant or "as-served", price_per_hour=price)
            runs, intervals = _prepared(files, cfg)
        except PhoenixError as exc:
            widgets.refused(str(exc))
            return
        from engine.imports.importer import describe  # lazy: pandas, only once a file is there

        st.caption(f"{len(runs)} run(s) found; nothing is stored until you import them:")
        st.code("\n".join(describe(run) for run in runs), language=None, wrap_lines=True)
        if not st.button(f"Import {len(runs)} run(s)", key=f"{KEY}_go", type="primary"):
            return
        denied = actions.permission(token)
        if denied:
            st.error(denied)
            return
        ids = data.store().add_runs(runs, intervals)
        data.changed()
        st.success(f"Imported {len(ids)} run(s): " + ", ".join(f"#{i}" for i in ids))
        for i in ids:
            st.page_link("views/run.py", label=f"Open run #{i}", query_params={"run": str(i)})


def _prepared(files, cfg: ImportConfig):
    from engine.imports.importer import prepare  # lazy: as above

    with tempfile.TemporaryDirectory(prefix="phoenix-import-") as folder:
        paths = []
        for i, f in enumerate(files):
            path = Path(folder) / safe_name(f.name, i)
            path.write_bytes(f.getvalue()[: MAX_BYTES + 1])
            paths.append(path)
        # an AIPerf records file is read beside its aggregates, never imported on its own
        main = [p for p in paths if not (p.suffix == ".jsonl" and p.with_name(p.stem + "_aiperf.json") in paths)]
        return prepare(cfg, main)
