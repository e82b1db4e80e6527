"""A run's rows reach the store: one write policy (``Writer``) for the lab and the server, and the lab's batched
writer that keeps database work off the decode path.

A batch that fails to write (the database locked past its busy timeout, the disk full) is retried a few times with
growing waits; still failing, it stays pending (written before anything newer once the store answers again) and,
where the caller gives a spill file (the server: engine.record.spills), is spilled as JSON lines beside the
database, so a crash loses nothing either. Past MAX_PENDING rows, or when even the spill cannot be written, a server
refuses new requests until the store answers. A row is never dropped, and an error clears once a write succeeds.

The lab's ``Recorder`` queues records; a thread hands them to its Writer in batches with the run's progress in the
same transaction (Store.add_requests), so a batch is written whole or not at all and a retry never duplicates a
row. ``close()`` drains everything, and raises only if rows are still unwritten then.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from dataclasses import asdict
from pathlib import Path

from db.entities import RequestRecord, StoreError
from db.store import Store, safe_url
from engine.decode.handoff import RequestOutput
from engine.decode.sequence import Finished
from engine.measure import StepRecord

log = logging.getLogger("phoenix.recorder")
RETRY_S = (0.25, 1.0, 4.0)  # waits between a failed write's tries
MAX_PENDING = 20_000  # rows held unwritten before a server refuses new requests


def _header(store: Store, run_id: int, progress: int) -> dict:
    """The spill's first line: which database and run its rows belong to (data/ may hold several databases')."""
    return {"spill": 1, "database": safe_url(store.url), "run_id": run_id, "progress": progress}


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


class Writer:
    """The one write policy for a run's rows, the lab's and the server's: retried with growing waits, held while
    the store refuses them, spilled beside the database where a spill file is given, refusing new work past
    MAX_PENDING rows or an unwritable spill, and never dropping a row."""

    def __init__(self, store: Store, run_id: int, spill: Path | None, retry_s: tuple[float, ...] = RETRY_S):
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
                f"the database file {self.file} was removed or replaced while it was open: rows are held (and spilled "
                "where a spill file is kept), not written to a file nobody can open again"
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
        if self.spill is not None and self.spill.exists():
            self.spill.unlink()

    def _spill(self) -> None:
        """Every unwritten row as one JSON line in the spill file (replaced whole: it holds exactly what is
        pending); held in memory only where there is no spill file (the lab: ``resume`` decodes them again)."""
        if self.spill is None:
            return
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
        spilled = self.spill is not None and self.spill.exists() and self.spill_error is None
        where = f"spilled to {self.spill}" if spilled else "not spilled"
        held = (
            f"{len(self.records) + unread} answered requests were not recorded ({self.error or 'the recorder stopped'})"
        )
        return f"{held}; {where}"


_STOP = object()


class Recorder:
    """The lab's writer: records queued from the decode loop, written in batches on a thread of its own by the one
    policy (``Writer``); a transient failure is retried and cleared, never kept to fail the run."""

    def __init__(self, store: Store, run_id: int, batch: int = 32, interval_s: float = 0.5, progress_start: int = 0):
        self.batch, self.interval_s = batch, interval_s
        self.done = progress_start
        self.writer = Writer(store, run_id, None)
        self.stuck: str | None = None  # a batch still unwritten after every retry: the lab stops (see ``check``)
        self._q: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="phoenix-recorder", daemon=True)
        self._thread.start()

    @property
    def written(self) -> int:
        return self.writer.written

    @property
    def error(self) -> str | None:
        return self.writer.error

    def put(self, record: RequestRecord) -> None:
        self._q.put(record)

    def _loop(self) -> None:
        stop = False
        while not stop:
            pending: list[RequestRecord] = []
            try:
                item = self._q.get(timeout=self.interval_s)
                if item is _STOP:
                    stop = True
                else:
                    pending.append(item)
                    while len(pending) < self.batch:
                        nxt = self._q.get_nowait()
                        if nxt is _STOP:
                            stop = True
                            break
                        pending.append(nxt)
            except queue.Empty:
                pass
            self.done += sum(1 for r in pending if not r.warmup)
            try:
                ok = self.writer.write([], pending, self.done)  # held on failure, retried on the next pass
                self.stuck = None if ok else self.writer.error
            except Exception as exc:  # noqa: BLE001 -- the writer holds its rows; nothing ends this thread
                self.writer.fail(exc)

    def check(self) -> None:
        """Raise once a batch is still unwritten after every retry (a full disk, say): a lab run that cannot record
        stops there, rather than decoding every request to be lost; ``resume`` decodes the unrecorded ones again.
        A transient failure (a lock past its timeout) clears within the retries and never stops it."""
        if self.stuck:
            raise StoreError(self.stuck.removeprefix("StoreError: ") + f"; {self.writer.written} rows were written")

    def close(self) -> None:
        self._q.put(_STOP)
        self._thread.join()
        if not self.writer.write([], [], self.done):  # a last try for what is held
            raise StoreError(self.writer.lost() or "rows were not recorded")


class Ended:
    """The engine core's subscriber (engine.decode.handoff) that queues each finished request for the server's
    recorder thread: subscribed first, so a request is queued to be recorded before its stream hears the end."""

    def __init__(self, finished: queue.Queue[Finished]):
        self.finished = finished

    def publish(self, output: RequestOutput) -> None:
        if output.finished is not None:
            self.finished.put(output.finished)
