"""A small batched writer that keeps database work off the decode path.

Requests are queued as plain records; a thread writes them in batches with the
run's progress in the same transaction (Store.add_requests), so a batch that
fails is written whole or not at all and its retry never duplicates a row.
``close()`` drains everything, so a run that ends, fails or is interrupted keeps
every row it produced.
"""

from __future__ import annotations

import queue
import threading

from db.entities import RequestRecord
from db.store import Store

_STOP = object()


class Recorder:
    def __init__(self, store: Store, run_id: int, batch: int = 32, interval_s: float = 0.5, progress_start: int = 0):
        self.store, self.run_id, self.batch, self.interval_s = store, run_id, batch, interval_s
        self.done = progress_start
        self.written = 0
        self.error: BaseException | None = None
        self._q: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="phoenix-recorder", daemon=True)
        self._thread.start()

    def put(self, record: RequestRecord) -> None:
        if self.error is not None:
            raise self.error
        self._q.put(record)

    def _loop(self) -> None:
        pending: list[RequestRecord] = []
        stop = False
        while not stop:
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
            if pending:
                pending = self._write(pending)

    def _write(self, pending: list[RequestRecord]) -> list[RequestRecord]:
        done = self.done + sum(1 for r in pending if not r.warmup)
        try:
            self.store.add_requests(pending, progress=(self.run_id, done))
            self.written += len(pending)
            self.done = done
            return []
        except BaseException as exc:  # kept and re-raised on the caller's thread
            self.error = exc
            return pending if len(pending) < 10_000 else []

    def close(self) -> None:
        self._q.put(_STOP)
        self._thread.join()
        if self.error is not None:
            raise self.error
