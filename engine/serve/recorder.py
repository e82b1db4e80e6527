"""The server's rows reach the store, or the server says why not: it never drops one silently.

A batch that fails to write (the database locked past its busy timeout, the disk full) is retried a few times with
growing waits; still failing, it stays pending (written before anything newer once the store answers again) and
is spilled, as JSON lines, to a file beside the database, so a crash loses nothing either. Past MAX_PENDING rows,
or when even the spill file cannot be written, the server refuses new requests with 503 until the store answers:
answering work it cannot record is what it must not do. ``/health`` shows the state; a run that ends with rows
unwritten ends ``failed``, naming the spill file, never ``done``. The next server on the same database replays
such a file into its run (``replay_spills``), and the run's page says while one waits (``waiting``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from db.entities import BanditRecord, PositionCount, RequestRecord
from db.store import Store, safe_url
from engine.measure import StepRecord

log = logging.getLogger("phoenix.serve")
RETRY_S = (0.25, 1.0, 4.0)  # waits between a failed write's tries
MAX_PENDING = 20_000  # rows held unwritten before new requests are refused


def spill_path(store: Store, run_id: int) -> Path:
    """Beside a SQLite database (the run's rows belong with it), else in data/."""
    url = store.engine.url
    db = url.database if url.get_backend_name() == "sqlite" else None
    folder = Path(db).parent if db and db != ":memory:" else Path("data")
    return folder / f"phoenix-serve-run{run_id}.spill.jsonl"


def _header(store: Store, run_id: int, progress: int) -> dict:
    """The spill's first line: which database and run its rows belong to (data/ may hold several databases')."""
    return {"spill": 1, "database": safe_url(store.url), "run_id": run_id, "progress": progress}


def read_spill(path: Path) -> tuple[dict, list[RequestRecord], list[StepRecord]]:
    """A spill file as the header and the rows it holds (raises ValueError on a file that is not one)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0]) if lines else {}
    if not isinstance(header, dict) or header.get("spill") != 1:
        raise ValueError(f"{path} is not a Phoenix spill file")
    records, steps = [], []
    for line in lines[1:]:
        row = json.loads(line)
        if "request" in row:
            records.append(_request(row["request"]))
        else:
            steps.append(StepRecord(**row["step"]))
    return header, records, steps


def _request(d: dict) -> RequestRecord:
    d["positions"] = [PositionCount(**p) for p in d.get("positions") or []]
    d["bandit"] = BanditRecord(**d["bandit"]) if d.get("bandit") else None
    d["created_at"] = datetime.fromisoformat(d["created_at"]) if d.get("created_at") else None
    return RequestRecord(**d)


def waiting(store: Store, run_id: int) -> tuple[Path, int] | None:
    """A spill file of this run that waits to be replayed, and the requests it holds (the Run page says so)."""
    path = spill_path(store, run_id)
    try:
        header, records, _ = read_spill(path)
    except (OSError, ValueError):
        return None
    return (path, len(records)) if header.get("database") == safe_url(store.url) else None


def replay_spills(store: Store) -> list[str]:
    """Write every spill file an earlier server of this database left into its run, then remove it; a line each.
    Only a run that has ended (failed or interrupted) is replayed into, so a live server's own file is left alone."""
    said = []
    folder = spill_path(store, 0).parent
    for path in sorted(folder.glob("phoenix-serve-run*.spill.jsonl")):
        try:
            header, records, steps = read_spill(path)
        except (OSError, ValueError) as exc:
            said.append(f"left {path} alone: {exc}")
            continue
        run = store.get_run(int(header.get("run_id", 0))) if header.get("database") == safe_url(store.url) else None
        if run is None or run.status not in ("failed", "interrupted"):
            continue
        store.add_serve_steps(run.id, steps)
        store.add_requests(records, progress=(run.id, max(run.progress_done, int(header.get("progress", 0)))))
        store.set_status(run.id, run.status, f"{run.error or ''}; replayed from {path.name}: {len(records)} "
                         f"requests and {len(steps)} steps recorded at {datetime.now():%Y-%m-%d %H:%M}")  # fmt: skip
        path.unlink()
        said.append(f"run {run.id}: {len(records)} requests and {len(steps)} steps replayed from {path}")
    return said


class Recorder:
    def __init__(self, store: Store, run_id: int, spill: Path, retry_s: tuple[float, ...] = RETRY_S):
        self.store, self.run_id, self.spill, self.retry_s = store, run_id, spill, retry_s
        self.steps: list[StepRecord] = []  # unwritten, oldest first
        self.records: list[RequestRecord] = []
        self.progress = 0  # requests done, as the run's progress counts them
        self.error: str | None = None  # the last write's failure; None once writes succeed again
        self.spill_error: str | None = None
        self.written = 0
        self._lock = threading.Lock()

    @property
    def refusing(self) -> str | None:
        """Why new requests are refused (None: they are taken)."""
        if self.error is None:
            return None
        if self.spill_error is not None:
            return f"rows cannot be recorded ({self.error}) nor spilled ({self.spill_error})"
        if len(self.records) > MAX_PENDING:
            return f"{len(self.records)} rows wait to be recorded ({self.error})"
        return None

    def health(self) -> dict:
        with self._lock:
            return {
                "ok": self.error is None,
                "pending": len(self.records) + len(self.steps),
                "written": self.written,
                **({"error": self.error, "spill": str(self.spill)} if self.error else {}),
                **({"refusing": self.refusing} if self.refusing else {}),
            }

    def write(self, steps: list[StepRecord], records: list[RequestRecord], progress: int) -> bool:
        """Write what is pending and these, oldest first, with retries; True when nothing is left unwritten."""
        with self._lock:
            self.steps += steps
            self.records += records
            self.progress = max(self.progress, progress)
        if not self.steps and not self.records:
            return True
        for wait in (0.0, *self.retry_s):
            time.sleep(wait)
            try:
                self._flush()
            except Exception as exc:  # the store's failures are many (locked, disk full, gone): each one retried
                with self._lock:
                    self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                continue
            self._recovered()
            return True
        log.error("the recorder cannot write %d rows (%s); they are kept and spilled to %s", len(self.records),
                  self.error, self.spill)  # fmt: skip
        self._spill()
        return False

    def _flush(self) -> None:
        if self.steps:
            self.store.add_serve_steps(self.run_id, self.steps)
            with self._lock:
                self.steps = []
        if self.records:
            n = len(self.records)
            self.store.add_requests(self.records, progress=(self.run_id, self.progress))  # one transaction
            with self._lock:
                self.records, self.written = [], self.written + n

    def _recovered(self) -> None:
        if self.error is not None:
            log.warning("the recorder writes again; every held row is recorded")
        with self._lock:
            self.error = self.spill_error = None
        if self.spill.exists():
            self.spill.unlink()

    def _spill(self) -> None:
        """Every unwritten row as one JSON line in the spill file (replaced whole: it holds exactly what is
        pending)."""
        tmp = self.spill.with_suffix(".tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(json.dumps(_header(self.store, self.run_id, self.progress)) + "\n")
                for rec in self.records:
                    f.write(json.dumps({"request": asdict(rec)}, default=str) + "\n")
                for step in self.steps:
                    f.write(json.dumps({"step": asdict(step)}, default=str) + "\n")
            os.replace(tmp, self.spill)
            with self._lock:
                self.spill_error = None
        except OSError as exc:
            with self._lock:
                self.spill_error = f"{type(exc).__name__}: {exc}"

    def lost(self) -> str | None:
        """At the end: why the run is not ``done`` (rows still unwritten), or None."""
        if not self.records and not self.steps:
            return None
        where = f"spilled to {self.spill}" if self.spill.exists() and self.spill_error is None else "not spilled"
        return f"{len(self.records)} answered requests were not recorded ({self.error}); {where}"
