"""A load sweep's cost: the server's CPU seconds as it served each block, read from its process session (a server
Phoenix started) or from Phoenix's own server's /health, and a variant's CPU per 1,000 output tokens at a level."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable

from engine.engines import process
from engine.measure import cpu_per_1k_tokens


def cpu_reader(url: str, pid: int | None, api_key: str | None) -> Callable[[], float | None]:
    """The server's cumulative CPU seconds: its process session's (a server Phoenix started: vLLM's engine core
    counted in), else what Phoenix's own server says on /health; None for a server that says nothing."""
    if pid is not None:
        return lambda: process.session_cpu_s(pid)

    def from_health() -> float | None:
        base = url.rstrip("/").removesuffix("/v1")
        try:
            req = urllib.request.Request(f"{base}/health")
            if api_key:
                req.add_header("Authorization", f"Bearer {api_key}")
            with urllib.request.urlopen(req, timeout=5) as r:
                value = json.loads(r.read(1 << 16)).get("cpu_s")
        except (OSError, ValueError, AttributeError):
            return None
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    return from_health


def cost(blocks: list[list]) -> dict:
    """A variant's CPU cost at one level, from its blocks: the server's CPU seconds and per 1,000 output tokens
    (None where the server's CPU time could not be read, or a block's was not)."""
    cpu = [b[2] for b in blocks]
    tokens = sum(b[1] for b in blocks)
    if not blocks or any(c is None for c in cpu):
        return {"cpu_s": None, "cpu_s_per_1k_tokens": None}
    return {"cpu_s": sum(cpu), "cpu_s_per_1k_tokens": cpu_per_1k_tokens(sum(cpu), tokens)}
