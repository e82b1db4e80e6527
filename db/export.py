"""Export a run's requests. sqlite-utils reads SQLite files; other databases go
through the store's entities."""
from __future__ import annotations

import csv
import io
import json

from sqlalchemy.engine import make_url

from db.store import Store

COLUMNS = ["id", "run_id", "seq", "mode", "k", "prompt_id", "prompt_tokens", "output_tokens", "latency_s", "ttft_s",
           "tokens_per_s", "proposed", "accepted", "passes", "draft_s", "verify_s", "output_text", "output_sha256",
           "identical", "diverged_at", "trace_id", "warmup", "created_at"]


def request_rows(store: Store, run_id: int) -> list[dict]:
    url = make_url(store.url)
    if url.get_backend_name() == "sqlite" and url.database:
        import sqlite_utils

        db = sqlite_utils.Database(url.database)
        try:
            return list(db["requests"].rows_where("run_id = ?", [run_id], order_by="seq", select=", ".join(COLUMNS)))
        finally:
            db.close()
    return [{c: getattr(r, c) for c in COLUMNS} for r in store.requests(run_id, include_warmup=True)]


def export(store: Store, run_id: int, fmt: str) -> str:
    """CSV: one row per request. JSON: the run (with its tags, note and config) and its requests."""
    rows = request_rows(store, run_id)
    if fmt == "json":
        run = store.get_run(run_id)
        head = {k: getattr(run, k) for k in ("id", "name", "status", "target", "draft", "tags", "note", "archived",
                                             "created_at", "finished_at", "config")} if run else {"id": run_id}
        return json.dumps({"run": head, "requests": rows}, default=str, indent=1)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()
