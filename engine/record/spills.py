"""A server's spill files: where its recorder (engine.record.writer.Writer, the one write policy for the lab and the
server) spills rows the store would not take, and their replay by the next server on the same database.

The server's rows reach the store, or the server says why not: it never drops one silently.

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
import re
from datetime import datetime
from pathlib import Path

from db.entities import BanditRecord, PositionCount, RequestRecord
from db.store import Store, safe_url
from engine.measure import StepRecord
from engine.record.writer import Writer as Recorder  # noqa: F401  (the server's recorder: the one policy)
from engine.record.writer import database_file

log = logging.getLogger("phoenix.serve")


def spill_path(store: Store, run_id: int) -> Path:
    """Beside a SQLite database (the run's rows belong with it), else in data/."""
    db = database_file(store)
    return (db.parent if db is not None else Path("data")) / f"phoenix-serve-run{run_id}.spill.jsonl"


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
