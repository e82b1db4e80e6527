"""The server's shadow check: a share of finished requests (``--shadow-rate``) re-decoded single-stream target-only on
the loop's thread while it is idle, so the check never shares the model with a step or lands in a step's timing;
each checked record gets its identity and first divergence before it is written. A request held past SHADOW_WAIT_S
under load is written without one (never held for good)."""

from __future__ import annotations

import collections
import queue
import random
import threading
import time

from db.entities import RequestRecord
from engine.decode.decoder import Decoder, identity
from engine.decode.sequence import Finished

SHADOW_WAIT_S = 30.0  # a request held for its shadow check is written without one after this long under load


class Shadow:
    def __init__(self, decoder: Decoder, rate: float, seed: int):
        self.decoder, self.rate = decoder, rate
        self._rng = random.Random(seed)
        self._jobs: collections.deque[tuple[float, RequestRecord, Finished]] = collections.deque()
        self._lock = threading.Lock()
        self._checked: queue.Queue[RequestRecord] = queue.Queue()  # checked records, back for writing

    def hold(self, f: Finished, rec: RequestRecord) -> bool:
        """Hold a finished request's record for its check (True), or not (a cancelled, failed or undrafted one, or
        one the rate leaves out)."""
        if f.cancelled or f.failed or f.request.drafter == "none" or self._rng.random() >= self.rate:
            return False
        with self._lock:
            self._jobs.append((time.monotonic(), rec, f))
        return True

    def check_one(self) -> bool:
        """One held request re-decoded single-stream target-only (the loop's idle hook). False when none waits."""
        with self._lock:
            if not self._jobs:
                return False
            _, rec, f = self._jobs.popleft()
        rec.identical, rec.diverged_at = identity(f.stats.output_ids, self.decoder.reference(f.request))
        self._checked.put(rec)
        return True

    def ready(self, everything: bool) -> list[RequestRecord]:
        """Records whose check is back, and those held past SHADOW_WAIT_S (or all, at the end) without one."""
        out = []
        while not self._checked.empty():
            out.append(self._checked.get_nowait())
        with self._lock:
            while self._jobs and (everything or time.monotonic() - self._jobs[0][0] > SHADOW_WAIT_S):
                out.append(self._jobs.popleft()[1])
        return out
