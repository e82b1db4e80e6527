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

import dataclasses
import json
import logging
import os
import re
import threading
import time
from dataclasses import asdict
from datetime import datetime
from pathlib import Path

from db.entities import BanditRecord, PositionCount, RequestRecord, StoreError
from db.store import Store, safe_url
from engine.measure import StepRecord

log = logging.getLogger("phoenix.serve")
RETRY_S = (0.25, 1.0, 4.0)  # waits between a failed write's tries
MAX_PENDING = 20_000  # rows held unwritten before new requests are refused


def spill_path(store: Store, run_id: int) -> Path:
    """Beside a SQLite database (the run's rows belong with it), else in data/."""
    db = database_file(store)
    return (db.parent if db is not None else Path("data")) / f"phoenix-serve-run{run_id}.spill.jsonl"


def _header(store: Store, run_id: int, progress: int) -> dict:
    """The spill's first line: which database and run its rows belong to (data/ may hold several databases')."""
    return {"spill": 1, "database": safe_url(store.url), "run_id": run_id, "progress": progress}


SPILL = re.compile(r"phoenix-serve-run([0-9]+)\.spill\.jsonl")  # exactly the name a recorder gives its run's file


def read_spill(path: Path) -> tuple[dict, int, int]:
    """A spill file's header and how many requests and steps it holds, every line checked (read a line at a time:
    a file of gigabytes is never in memory). ValueError, with the line, on anything that is not a Phoenix spill of
    the run its name says."""
    requests = steps = 0
    header: dict = {}
    for number, row in _lines(path):
        if number == 1:
            header = row
            continue
        kind, _ = _row(row, header["run_id"])
        requests, steps = requests + (kind == "request"), steps + (kind == "step")
    return header, requests, steps


def _lines(path: Path):
    """(line number, the JSON object on it), the header checked against the file's name first."""
    named = SPILL.fullmatch(path.name)
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            try:
                row = json.loads(line)
            except ValueError:
                raise ValueError(f"line {number} is not JSON") from None
            if number == 1:
                ok = isinstance(row, dict) and row.get("spill") == 1 and type(row.get("run_id")) is int
                if not ok or named is None or int(named[1]) != row["run_id"]:
                    raise ValueError("not a Phoenix spill file of the run its name says (its first line and name)")
                if not isinstance(row.get("progress", 0), int) or not isinstance(row.get("database"), str):
                    raise ValueError("its header's progress or database is not what a recorder writes")
            yield number, row


def _row(row, run_id: int) -> tuple[str, RequestRecord | StepRecord]:
    """One spilled row, typed field by field; a row of another run, or of another shape, is a ValueError."""
    if not isinstance(row, dict) or len(row) != 1 or next(iter(row)) not in ("request", "step"):
        raise ValueError("a line that is neither a request nor a step")
    kind, body = next(iter(row.items()))
    if kind == "step":
        return kind, typed(StepRecord, body)
    if not isinstance(body, dict):
        raise ValueError("a request that is not an object")
    body = dict(body)
    body["positions"] = [typed(PositionCount, p) for p in _list(body.get("positions"))]
    body["bandit"] = typed(BanditRecord, body["bandit"]) if body.get("bandit") is not None else None
    when = body.get("created_at")
    body["created_at"] = datetime.fromisoformat(when) if isinstance(when, str) else None
    record = typed(RequestRecord, body)
    if record.run_id != run_id:
        raise ValueError(f"a request of run {record.run_id} in run {run_id}'s spill")
    return kind, record


def _list(value) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError("positions is not a list")
    return value


SCALARS = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "dict": (dict,)}


def typed(cls, body):
    """``cls(**body)``, where every key is one of its fields and every value of the field's type (an int is no
    bool, a count no string): the store's columns take what a spill says as it is."""
    if not isinstance(body, dict):
        raise ValueError(f"a {cls.__name__} that is not an object")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise ValueError(f"a {cls.__name__} with unknown fields {unknown[:3]}")
    for name, value in body.items():
        kinds = [k.strip() for k in str(fields[name].type).split("|")]
        if value is None and "None" in kinds:
            continue
        allowed = tuple(t for k in kinds for t in SCALARS.get(k.split("[")[0], ()))
        if allowed and not (isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)):
            raise ValueError(f"{cls.__name__}.{name} = {str(value)[:40]!r} is not {' or '.join(kinds)}")
    try:
        return cls(**body)
    except TypeError as exc:  # a required field missing
        raise ValueError(f"a {cls.__name__} that {str(exc).split(')', 1)[-1].strip()}") from None


def waiting(store: Store, run_id: int) -> tuple[Path, int] | None:
    """A spill file of this run that waits to be replayed, and the requests it holds (the Run page says so)."""
    path = spill_path(store, run_id)
    try:
        header, requests, _ = read_spill(path)
    except (OSError, ValueError):
        return None
    return (path, requests) if header.get("database") == safe_url(store.url) else None


def replay_spills(store: Store, batch: int = 500) -> list[str]:
    """Write every spill file an earlier server of this database left into its run, then remove it; a line each.
    Only a run that has ended (failed or interrupted) is replayed into, so a live server's own file is left alone;
    a file that is not a spill of its run is left alone with the reason; a request already in the run (same seq)
    is never written twice."""
    said = []
    folder = spill_path(store, 0).parent
    for path in sorted(p for p in folder.glob("phoenix-serve-run*.spill.jsonl") if SPILL.fullmatch(p.name)):
        try:
            header, _, _ = read_spill(path)
        except (OSError, ValueError) as exc:
            said.append(f"left {path} alone: {exc}")
            continue
        run = store.get_run(header["run_id"]) if header.get("database") == safe_url(store.url) else None
        if run is None or run.status not in ("failed", "interrupted"):
            continue
        written, skipped, steps = _replay(store, path, run.id, header, batch)
        store.set_status(run.id, run.status, f"{run.error or ''}; replayed from {path.name}: {written} "
                         f"requests and {steps} steps recorded at {datetime.now():%Y-%m-%d %H:%M}")  # fmt: skip
        path.unlink()
        again = f", {skipped} already recorded skipped" if skipped else ""
        said.append(f"run {run.id}: {written} requests and {steps} steps replayed from {path}{again}")
    return said


def _replay(store: Store, path: Path, run_id: int, header: dict, batch: int) -> tuple[int, int, int]:
    """Rows into the run, ``batch`` at a time: (requests written, requests skipped as present, steps written)."""
    present = store.request_seqs(run_id)
    run = store.get_run(run_id)
    progress = max(run.progress_done if run else 0, header.get("progress", 0))
    records: list[RequestRecord] = []
    steps: list[StepRecord] = []
    written = skipped = stepped = 0

    def flush() -> None:
        nonlocal written, stepped
        store.add_serve_steps(run_id, steps)
        store.add_requests(records, progress=(run_id, progress))
        written, stepped = written + len(records), stepped + len(steps)
        records.clear()
        steps.clear()

    for number, row in _lines(path):
        if number == 1:
            continue
        kind, item = _row(row, run_id)
        if isinstance(item, StepRecord):
            steps.append(item)
        elif item.seq in present:
            skipped += 1
        else:
            present.add(item.seq)
            records.append(item)
        if len(records) + len(steps) >= batch:
            flush()
    flush()
    return written, skipped, stepped


def database_file(store: Store) -> Path | None:
    """The SQLite file behind the store (None for another database, or one in memory)."""
    engine = getattr(store, "engine", None)
    if engine is None:
        return None
    db = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    return Path(db) if db and db != ":memory:" else None


def _identity(path: Path | None) -> tuple[int, int] | None:
    try:
        return (path.stat().st_dev, path.stat().st_ino) if path is not None else None
    except OSError:
        return None


class Recorder:
    def __init__(self, store: Store, run_id: int, spill: Path, retry_s: tuple[float, ...] = RETRY_S):
        self.store, self.run_id, self.spill, self.retry_s = store, run_id, spill, retry_s
        # the file the server opened: if that path stops naming it (deleted, replaced), rows written through the open
        # connection would go to a file nobody can open again, silently; they are held and spilled instead
        self.file = database_file(store)
        self.identity = _identity(self.file)
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
        """What /health shows, which anyone may read: counts and the kind of failure, never a path or a URL (the
        log has the whole line)."""
        with self._lock:
            kind = self.error.split(":")[0] if self.error else None
            return {
                "ok": self.error is None,
                "pending": len(self.records) + len(self.steps),
                "written": self.written,
                **({"error": f"{kind} (the server's log says more)"} if kind else {}),
                **(
                    {"refusing": "rows can be neither recorded nor held; see the server's log"} if self.refusing else {}
                ),
            }

    def fail(self, exc: Exception) -> None:
        """A failure met outside a write (the heartbeat while idle): kept as the error /health shows, and the next
        write retries."""
        with self._lock:
            self.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"

    def check(self) -> None:
        """The store answers (a heartbeat went through): with nothing pending, the recorder is well again, unless
        its database file is no longer the one it opened (a heartbeat writes to an unlinked file without a word)."""
        try:
            self._same_file()
        except StoreError as exc:
            self.fail(exc)
            return
        if self.error is not None and not self.records and not self.steps:
            self._recovered()

    def _same_file(self) -> None:
        if self.file is not None and _identity(self.file) != self.identity:
            raise StoreError(
                f"the database file {self.file} was removed or replaced while the server ran: rows are held and "
                f"spilled to {self.spill}, not written to a file nobody can open again"
            )

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
        self._same_file()
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
            tmp.unlink(missing_ok=True)  # a disk that filled mid-write leaves no empty .tmp behind
            with self._lock:
                self.spill_error = f"{type(exc).__name__}: {exc}"

    def lost(self, unread: int = 0) -> str | None:
        """At the end: why the run is not ``done`` (rows still unwritten, and ``unread`` finished requests the
        recorder never took), or None."""
        if not self.records and not self.steps and not unread:
            return None
        where = f"spilled to {self.spill}" if self.spill.exists() and self.spill_error is None else "not spilled"
        held = (
            f"{len(self.records) + unread} answered requests were not recorded ({self.error or 'the recorder stopped'})"
        )
        return f"{held}; {where}"
