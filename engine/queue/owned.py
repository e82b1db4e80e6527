"""A run owned by the process in front of you (a bench, a sweep, a watch, a load level): attached to it, kept
alive by a heartbeat from a side thread, and ended as what happened to it. A run whose process dies without a
word (kill -9) stops beating, so readers see it as interrupted after STALE_AFTER_S instead of running forever;
a run whose process ends by Ctrl-C or SIGTERM is interrupted at once, and one that fails says why."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from db.store import HEARTBEAT_S, Store
from engine.errors import PhoenixError


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Heartbeat:
    """Beats for a run from a side thread, so long requests do not look like a crash."""

    def __init__(self, store: Store, run_id: int, every_s: float = HEARTBEAT_S):
        self.store, self.run_id, self.every_s = store, run_id, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="phoenix-heartbeat")

    def __enter__(self):
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.store.heartbeat(self.run_id)
            except Exception:
                pass  # a locked database must not kill the run; the next beat retries

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _terminate(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (`timeout 60 …`) ends a run as Ctrl-C does: rows kept, run interrupted


@contextmanager
def owned(store: Store, run_id: int, every_s: float = HEARTBEAT_S) -> Iterator[None]:
    """Own ``run_id`` for the block: attach, beat, and on the way out mark it interrupted (Ctrl-C, SIGTERM) or
    failed (any error, with its line). A block that ends normally leaves the status to the caller."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main else None
    store.attach(run_id, worker_id())
    try:
        with Heartbeat(store, run_id, every_s):
            yield
    except KeyboardInterrupt:
        store.set_status(run_id, "interrupted")
        raise
    except PhoenixError as exc:
        store.set_status(run_id, "failed", str(exc))
        raise
    except Exception as exc:
        store.set_status(run_id, "failed", f"{type(exc).__name__}: {exc}"[:500])
        raise
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
