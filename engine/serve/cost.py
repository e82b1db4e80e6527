"""What serving costs: the server process's CPU seconds per 1,000 output tokens, from the moment it was ready (its
idle polling and HTTP work included: a served token's real cost), kept in the run's config at every heartbeat and
at the end, with the cost of each heartbeat's interval as its spread (engine.measure.cost_text says it)."""

from __future__ import annotations

import time

KEEP = 1000  # intervals kept for the spread


class CpuMeter:
    def __init__(self) -> None:
        self.start = self._mark = time.process_time()
        self.tokens = self._marked_tokens = 0
        self.each: list[float] = []

    def add(self, tokens: int) -> None:
        """Output tokens the server produced (answered, cancelled or failed: each cost CPU)."""
        self.tokens += max(0, tokens)

    def record(self) -> dict:
        """The totals so far and, where tokens came since the last record, that interval's cost."""
        now = time.process_time()
        if self.tokens > self._marked_tokens:
            self.each.append(1000.0 * (now - self._mark) / (self.tokens - self._marked_tokens))
            self.each = self.each[-KEEP:]
            self._mark, self._marked_tokens = now, self.tokens
        return {"cpu_s": round(now - self.start, 3), "tokens": self.tokens, "each": [round(x, 3) for x in self.each]}
