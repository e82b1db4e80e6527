"""The worker's settings: a plain dataclass that imports neither torch nor the store, so `worker --help` answers
at once."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from db.entities import STALE_AFTER_S
from engine.errors import PhoenixError


@dataclass
class WorkerConfig:
    poll_s: float = field(default=1.0, metadata={"flag": "--poll"})  # seconds between looks at the queue when idle
    once: bool = False  # process one run and exit
    stale_after_s: float = STALE_AFTER_S  # a running run without a heartbeat this long is 'interrupted'
    max_idle_s: float | None = field(default=None, metadata={"flag": "--max-idle"})  # exit after this many idle seconds
    metrics_port: int | None = (
        None  # serve Prometheus /metrics on 127.0.0.1:PORT (default: $PHOENIX_METRICS_PORT, else off)
    )
    metrics_addr: str = "127.0.0.1"  # localhost by default: counters say what models you run
    parent_pid: int | None = None  # leave once no run is in progress after this process (the dashboard) has exited
    stop: bool = False  # stop every worker of this database on this host (a busy one interrupts its run), then exit

    def validate(self) -> WorkerConfig:
        for flag, value in (
            ("--poll", self.poll_s),
            ("--stale-after-s", self.stale_after_s),
            ("--max-idle", self.max_idle_s),
        ):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise PhoenixError(f"{flag} must be a finite number of seconds >= 0, got {value}")
        return self
