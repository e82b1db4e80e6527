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

As vLLM does, every child a run will touch is created at 0 when the run starts (``prepare``):
``rate()`` needs a sample before the first increment, or it never sees that increment.
``phoenix:num_requests_running`` mirrors vLLM's gauge, which Grafana dashboards use to list models.

Phoenix's server adds what a router reads: the Gateway API Inference Extension's model-server protocol
(kubernetes-sigs/gateway-api-inference-extension, docs/proposals/003-model-server-protocol), with its types and
meanings; `serve --metrics-prefix vllm` publishes them under the names an endpoint picker reads by default:
  num_requests_waiting  gauge: requests queued, not yet admitted to the batch
  num_requests_running  gauge: requests admitted (decoding or prefilling)
  kv_cache_usage_perc   gauge, 0..1: the share of the KV blocks the loop holds for its rows that admitted requests
                        fill (BLOCK_SIZE tokens a block, each row's tokens rounded up to whole blocks; the loop holds
                        --max-batch rows of the model's context, num_gpu_blocks in cache_config_info)
  cache_config_info     gauge 1, its labels the cache's configuration (block_size, num_gpu_blocks, ...)
  lora_requests_info    gauge whose value is the time of the sample, labels max_lora, running_lora_adapters and
                        waiting_lora_adapters: Phoenix serves no LoRA adapter, so max_lora is 0 and both lists empty
and vLLM's per-request histograms: time_to_first_token_seconds, request_time_per_output_token_seconds,
request_queue_time_seconds, e2e_request_latency_seconds.
"""

from __future__ import annotations

import socket
import threading
import time
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from engine.errors import PhoenixError

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
TTFT_BUCKETS = (0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)  # vLLM's
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)  # vLLM's
TPS_BUCKETS = (5, 10, 20, 40, 60, 80, 100, 150, 200, 300, 500, 1000, 2000, 5000)


BLOCK_SIZE = 16  # tokens a KV block holds, as the protocol's cache_config_info reports it (vLLM's default)
PREFIXES = ("phoenix", "vllm")


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None, prefix: str = "phoenix"):
        if prefix not in PREFIXES:
            raise PhoenixError(f"--metrics-prefix must be one of {', '.join(PREFIXES)}, got {prefix!r}")
        self.registry = registry or CollectorRegistry()
        self.prefix = prefix
        r, model = self.registry, ["model_name", "engine"]  # vLLM's label names; one engine here
        p = prefix
        self.drafts = Counter(f"{p}:spec_decode_num_drafts", "Number of spec decoding drafts.", model, registry=r)
        self.draft_tokens = Counter(f"{p}:spec_decode_num_draft_tokens", "Number of draft tokens.", model, registry=r)
        self.accepted = Counter(f"{p}:spec_decode_num_accepted_tokens", "Number of accepted tokens.", model, registry=r)
        self.per_pos = Counter(
            f"{p}:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            model + ["position"],
            registry=r,
        )
        arm = ["mode", "arm"]
        self.latency = Histogram(
            f"{p}:request_latency_seconds", "End-to-end request latency.", arm, buckets=LATENCY_BUCKETS, registry=r
        )
        self.tokens_per_s = Histogram(
            f"{p}:request_tokens_per_second",
            "Output tokens per second of a request.",
            arm,
            buckets=TPS_BUCKETS,
            registry=r,
        )
        self.requests = Counter(f"{p}:requests", "Recorded requests (warm-up excluded).", arm, registry=r)
        self.running = Gauge(
            f"{p}:num_requests_running",
            "Number of requests in model execution batches (a worker decodes one at a time: 1 while a run executes).",
            model,
            registry=r,
        )

        def served(name: str, doc: str, buckets: tuple | None = None):  # the server's, labelled as vLLM labels them
            if buckets is None:
                return Gauge(f"{p}:{name}", doc, model, registry=r)
            return Histogram(f"{p}:{name}", doc, model, buckets=buckets, registry=r)

        self.waiting = served("num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = served("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.cache_config = Gauge(
            f"{p}:cache_config_info",
            "Information of the KV cache's configuration.",
            ["block_size", "num_gpu_blocks", "cache_dtype", "enable_prefix_caching"],
            registry=r,
        )
        self.lora = Gauge(
            f"{p}:lora_requests_info",
            "Running stats on LoRA requests (Phoenix serves no adapter: max_lora 0).",
            ["max_lora", "running_lora_adapters", "waiting_lora_adapters"],
            registry=r,
        )
        self.ttft = served("time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.tpot = served("request_time_per_output_token_seconds", "Time per output token, per request.", TPOT_BUCKETS)
        self.queue = served("request_queue_time_seconds", "Time queued before the prefill.", LATENCY_BUCKETS)
        self.e2e = served("e2e_request_latency_seconds", "End-to-end request latency.", LATENCY_BUCKETS)

    def load(self, model_name: str, running: int, waiting: int, kv_usage: float) -> None:
        """The gauges a router reads, as they are now."""
        self.running.labels(model_name, "0").set(running)
        self.waiting.labels(model_name, "0").set(waiting)
        self.kv_usage.labels(model_name, "0").set(kv_usage)
        self.lora.labels("0", "", "").set(time.time())

    def describe_cache(self, blocks: int, dtype: str, prefix_caching: bool) -> None:
        """cache_config_info: one sample, 1, whose labels say what the cache is (set once, at start)."""
        self.cache_config.labels(str(BLOCK_SIZE), str(blocks), dtype, str(prefix_caching).lower()).set(1)

    def observe_served(
        self, model_name: str, ttft_s: float | None, latency_s: float, queue_s: float, n_out: int
    ) -> None:
        """One answered request's latencies, as vLLM's server histograms them."""
        labels = (model_name, "0")
        if ttft_s is not None:
            self.ttft.labels(*labels).observe(ttft_s)
            if n_out > 1:
                self.tpot.labels(*labels).observe((latency_s - ttft_s) / (n_out - 1))
        self.queue.labels(*labels).observe(queue_s)
        self.e2e.labels(*labels).observe(latency_s)

    def prepare(self, model_name: str, k_max: int, mode_arms: list[tuple[str, int]]) -> None:
        """Create at 0 every child a run will touch: spec-decode counters for positions 0..k_max-1 and the
        per-request series of each (mode, arm)."""
        for counter in (self.drafts, self.draft_tokens, self.accepted):
            counter.labels(model_name, "0")
        for pos in range(k_max):
            self.per_pos.labels(model_name, "0", str(pos))
        for mode, k in mode_arms:
            for family in (self.requests, self.latency, self.tokens_per_s):
                family.labels(mode=mode, arm=str(k))
        for gauge in (self.running, self.waiting, self.kv_usage, self.ttft, self.tpot, self.queue, self.e2e):
            gauge.labels(model_name, "0")

    def observe(self, rec, model_name: str) -> None:
        """One finished request (a db.entities.RequestRecord)."""
        labels = {"mode": rec.mode, "arm": str(rec.k)}
        self.requests.labels(**labels).inc()
        self.latency.labels(**labels).observe(rec.latency_s)
        self.tokens_per_s.labels(**labels).observe(rec.tokens_per_s)
        self.count_drafts(rec, model_name)

    def count_drafts(self, rec, model_name: str) -> None:
        """A request's drafts and acceptances, counted whether it finished or was cancelled (they happened)."""
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
        server_class = type(
            "MetricsServer", (_Server,), {"address_family": socket.AF_INET6 if ":" in addr else socket.AF_INET}
        )
        try:
            httpd: Any = make_server(
                addr, port, text_format(make_wsgi_app(self.registry)), server_class, handler_class=_Quiet
            )
        except (OSError, OverflowError) as exc:
            raise PhoenixError(f"cannot serve metrics on {addr}:{port} ({exc}); pick another --metrics-port") from None
        thread = threading.Thread(target=httpd.serve_forever, daemon=True, name="phoenix-metrics")
        thread.start()
        return httpd, thread


def text_format(app):
    """Always the Prometheus text format. prometheus_client 0.26's OpenMetrics output rewrites the ':' of sample
    names to '_' (its HELP lines keep it), so a Prometheus that negotiates OpenMetrics, as 2.x does, would store
    phoenix_spec_decode_* and no panel written for vLLM-style names would match. Found by the real-Prometheus test."""

    def serve(environ, start_response):
        environ["HTTP_ACCEPT"] = "text/plain; version=0.0.4"
        return app(environ, start_response)

    return serve


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):  # a scrape every few seconds is not news
        pass


def parse_port(value: str | int | None, source: str) -> int | None:
    """A port from --metrics-port or PHOENIX_METRICS_PORT; None (or empty) means metrics off."""
    text = "" if value is None else str(value).strip()
    if not text:
        return None
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise PhoenixError(f"{source} must be a port number in 0..65535, got {text!r}")
    return int(text)
