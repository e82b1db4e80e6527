"""`lm-eval`: lm-evaluation-harness against a running Phoenix server, once per drafter, each result imported as a
run (engine.imports) and compared with the first drafter's on the same documents (engine.analysis.quality)."""

from __future__ import annotations

import json
import tempfile
import urllib.request
from pathlib import Path

from db.store import Store
from engine.analysis.quality import diff_of
from engine.engines import lm_eval
from engine.errors import PhoenixError
from engine.imports.config import ImportConfig
from engine.imports.importer import import_files


def _get(url: str) -> dict:
    """One JSON answer, bounded in time and size."""
    with urllib.request.urlopen(url, timeout=10) as r:
        found = json.loads(r.read(1 << 20))
    if not isinstance(found, dict):
        raise ValueError("not a JSON object")
    return found


def served(url: str) -> tuple[str, str]:
    """The model the server names (its /v1/models) and the dtype it computes in (Phoenix's /health says)."""
    try:
        model = str(_get(url.rstrip("/") + "/v1/models")["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise PhoenixError(f"{url} does not answer /v1/models as an OpenAI server does: {exc!s:.120}") from None
    try:
        dtype = str(_get(url.rstrip("/") + "/health").get("dtype") or "dtype not said")
    except (OSError, ValueError):
        dtype = "dtype not said"
    return model, dtype


def evaluate(store: Store, cfg: lm_eval.LmEvalConfig, say=print) -> list[int]:
    lm_eval.check(cfg)
    drafters = [d.strip() for d in cfg.drafters.split(",") if d.strip()]
    model, dtype = served(cfg.url)
    out = Path(cfg.out or tempfile.mkdtemp(prefix="phoenix-lm-eval-"))
    ids = []
    for drafter in drafters:
        found = lm_eval.run(cfg.url, model, drafter, out, cfg)
        k = f", k {cfg.k}" if cfg.k and drafter != "none" else ""
        name = f"lm-eval HumanEval through phoenix serve: {Path(model).name}, {dtype}, drafter {drafter}{k}"
        imported = ImportConfig("lm-eval", "phoenix", model, drafter, cfg.hardware, name=name)
        ids += import_files(store, imported, [found], say=say)
    for other in ids[1:]:
        diff = diff_of(store, ids[0], other)
        say(f"run {other} against run {ids[0]}: " + (diff.text if diff else "no document scored by both"))
    return ids
