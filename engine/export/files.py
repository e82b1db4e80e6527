"""Export a run: one path through the store's entities, so SQLite and PostgreSQL give the same bytes.

CSV holds one row per request; JSON the run (tags, note, config) and its requests; ``sqlite`` writes a
self-contained SQLite file of the run with sqlite-utils (tables ``run``, ``requests`` and ``positions``), which
``sqlite-utils``, Datasette or pandas open without Phoenix.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from db.store import Store

EXPORT_FORMATS = ("csv", "json", "sqlite")
COLUMNS = [
    "id",
    "run_id",
    "seq",
    "mode",
    "k",
    "drafter",
    "prompt_id",
    "turn",
    "category",
    "prompt_tokens",
    "output_tokens",
    "latency_s",
    "ttft_s",
    "prefill_s",
    "draft_prefill_s",
    "tokens_per_s",
    "proposed",
    "accepted",
    "passes",
    "draft_s",
    "verify_s",
    "output_text",
    "output_sha256",
    "identical",
    "diverged_at",
    "trace_id",
    "warmup",
    "error",
    "created_at",
]
RUN_KEYS = (
    "id",
    "name",
    "status",
    "target",
    "draft",
    "tags",
    "note",
    "archived",
    "created_at",
    "finished_at",
    "config",
)


def request_rows(store: Store, run_id: int) -> list[dict]:
    return [{c: getattr(r, c) for c in COLUMNS} for r in store.requests(run_id, include_warmup=True)]


def run_head(store: Store, run_id: int) -> dict:
    run = store.get_run(run_id)
    return {k: getattr(run, k) for k in RUN_KEYS} if run else {"id": run_id}


def export(store: Store, run_id: int, fmt: str) -> str:
    """CSV or JSON text of the run."""
    rows = request_rows(store, run_id)
    if fmt == "json":
        return json.dumps({"run": run_head(store, run_id), "requests": rows}, default=str, indent=1)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows({k: spreadsheet_safe(v) for k, v in row.items()} for row in rows)
    return buf.getvalue()


FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value):
    """OWASP's CSV-injection advice: a text cell a spreadsheet would evaluate as a formula (prompt ids and outputs
    come from users' files) gets a leading apostrophe. CSV only; JSON and SQLite exports stay exact, and numbers
    (a negative time) are left alone."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def export_sqlite(store: Store, run_id: int, path: Path) -> int:
    """The run as a new SQLite file at ``path`` (the caller checked that nothing is there: an export never
    replaces a file); returns the number of requests."""
    import sqlite_utils  # lazy: only this export needs it

    db = sqlite_utils.Database(path)
    try:
        head = run_head(store, run_id)
        db.table("run").insert(
            {**head, "tags": json.dumps(head.get("tags", [])), "config": json.dumps(head.get("config"), default=str)},
            pk="id",
        )
        records = store.requests(run_id, include_warmup=True)
        db.table("requests").insert_all(({c: getattr(r, c) for c in COLUMNS} for r in records), pk="id")
        db.table("positions").insert_all(
            (
                {
                    "request_id": r.id,
                    "position": p.position,
                    "proposed": p.proposed,
                    "accepted": p.accepted,
                    "reached": p.reached,
                }
                for r in records
                for p in r.positions
            ),
            pk=("request_id", "position"),
            foreign_keys=[("request_id", "requests", "id")],
        )
        return len(records)
    finally:
        db.close()
