"""One imported level: what a tool measured at one load point, as plain data every format parses into."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.errors import PhoenixError


@dataclass
class Request:
    """One request as the tool recorded it (seconds; text as generated; error None where it was answered)."""

    prompt_tokens: int
    output_tokens: int
    ttft_s: float | None
    latency_s: float
    text: str = ""
    error: str | None = None
    queue_s: float | None = None  # waiting in the client for a free slot (its concurrency cap)
    cached_tokens: int | None = None  # prompt tokens the server's prefix cache served, where the tool recorded it


@dataclass
class Level:
    """One load point of one tool's result: its requests, the tool's own aggregate figures, and its provenance."""

    tool: str  # the tool as people name it ("vllm bench serve")
    version: str | None  # the tool's version where the file says it
    engine: str  # the server measured (vllm, sglang, phoenix, ...): the file's, else --engine, else "unknown"
    model: str
    concurrency: int | None  # the in-flight cap (vllm bench serve's --max-concurrency)
    rate: float  # requests/s; math.inf: every request at once
    duration_s: float
    requests: list[Request]
    aggregates: dict  # the tool's own figures, as it printed them (kept to compare with Phoenix's)
    extra: dict  # every field the importer does not read: kept, never dropped
    dataset: str = "unknown"  # the prompts the tool sent (its dataset name)
    speculative: dict = field(default_factory=dict)  # the server's speculative decoding figures, where reported
    # which of the tool's aggregates share a definition with one of Phoenix's (engine.engines.arrivals.figures), by
    # Phoenix's name: only these are compared; a figure the tool defines its own way is kept, never compared
    compared: dict[str, str] = field(default_factory=dict)
    command: str | None = None  # the tool's command line, where the file holds it

    def check(self, where: str) -> Level:
        """A level whose figures cannot be figures is refused in one line naming the field."""
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise PhoenixError(f"{where}: duration {self.duration_s!r} is not a positive number of seconds")
        if not (self.rate > 0):
            raise PhoenixError(f"{where}: request_rate {self.rate!r} is not above 0 (or inf)")
        if self.concurrency is not None and not 1 <= self.concurrency <= 1_000_000:
            raise PhoenixError(f"{where}: max_concurrency {self.concurrency!r} is not a whole number >= 1")
        for i, r in enumerate(self.requests):
            times = [r.latency_s] + ([r.ttft_s] if r.ttft_s is not None else [])
            if any(not (math.isfinite(t) and t >= 0) for t in times) or min(r.prompt_tokens, r.output_tokens) < 0:
                raise PhoenixError(f"{where}: request {i} has a time or token count that is not one")
        return self
