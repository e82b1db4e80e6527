"""Prometheus metrics in vLLM's shape, served by the worker on localhost.

The spec-decode counters carry vLLM's names with a ``phoenix:`` prefix and vLLM's
meanings, so Grafana panels written for ``vllm:spec_decode_*`` work on Phoenix:
  num_drafts            verification passes that drafted at least one token
  num_draft_tokens      drafted tokens
  num_accepted_tokens   accepted drafted tokens
  num_accepted_tokens_per_pos{position=i}
                        passes whose first i+1 drafted tokens were all accepted
Acceptance rate = accepted / draft_tokens; mean acceptance length = 1 + accepted / drafts.
prometheus_client adds the ``_total`` suffix to counters on exposition, as in vLLM.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from engine.errors import PhoenixError

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
TPS_BUCKETS = (5, 10, 20, 40, 60, 80, 100, 150, 200, 300, 500, 1000, 2000, 5000)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r, model = self.registry, ["model_name", "engine"]  # vLLM's label names; one engine here
        self.drafts = Counter("phoenix:spec_decode_num_drafts", "Number of spec decoding drafts.", model, registry=r)
        self.draft_tokens = Counter("phoenix:spec_decode_num_draft_tokens", "Number of draft tokens.", model, registry=r)
        self.accepted = Counter("phoenix:spec_decode_num_accepted_tokens", "Number of accepted tokens.", model, registry=r)
        self.per_pos = Counter("phoenix:spec_decode_num_accepted_tokens_per_pos",
                               "Accepted tokens per draft position.",
                               model + ["position"], registry=r)
        arm = ["mode", "arm"]
        self.latency = Histogram("phoenix:request_latency_seconds", "End-to-end request latency.", arm,
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.tokens_per_s = Histogram("phoenix:request_tokens_per_second", "Output tokens per second of a request.", arm,
                                      buckets=TPS_BUCKETS, registry=r)
        self.requests = Counter("phoenix:requests", "Recorded requests (warm-up excluded).", arm, registry=r)

    def observe(self, rec, model_name: str) -> None:
        """One finished request (a db.entities.RequestRecord)."""
        labels = {"mode": rec.mode, "arm": str(rec.k)}
        self.requests.labels(**labels).inc()
        self.latency.labels(**labels).observe(rec.latency_s)
        self.tokens_per_s.labels(**labels).observe(rec.tokens_per_s)
        if not rec.proposed:
            return
        drafts = rec.positions[0].proposed if rec.positions else 0  # every drafting pass proposes position 0
        self.drafts.labels(model_name, "0").inc(drafts)
        self.draft_tokens.labels(model_name, "0").inc(rec.proposed)
        self.accepted.labels(model_name, "0").inc(rec.accepted)
        for p in rec.positions:
            self.per_pos.labels(model_name, "0", str(p.position)).inc(p.accepted)

    def serve(self, port: int, addr: str = "127.0.0.1"):
        """Start /metrics on addr:port in a daemon thread; returns (server, thread)."""
        try:
            return start_http_server(port, addr=addr, registry=self.registry)
        except (OSError, OverflowError) as exc:
            raise PhoenixError(f"cannot serve metrics on {addr}:{port} ({exc}); pick another --metrics-port") from None


def parse_port(value: str | int | None, source: str) -> int | None:
    """A port from --metrics-port or PHOENIX_METRICS_PORT; None (or empty) means metrics off."""
    text = "" if value is None else str(value).strip()
    if not text:
        return None
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise PhoenixError(f"{source} must be a port number in 0..65535, got {text!r}")
    return int(text)
