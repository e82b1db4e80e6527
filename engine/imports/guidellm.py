"""GuideLLM's report (`guidellm run ... --output kind=json`): one JSON document whose ``benchmarks`` are the levels
of one sweep (a strategy each: synchronous, concurrent at N streams, throughput, constant or Poisson at a rate).
Each successful or errored request is a row (client-side TTFT and latency, its token counts, the prompt tokens the
server's cache served, its text and error); the requests GuideLLM cancelled at a level's end are counted, not rows.
Its metrics are kept by their names (``time_to_first_token_ms.mean``); only the means and totals are compared with
Phoenix's: GuideLLM's percentiles take a value at a rank where Phoenix interpolates, and its TPOT counts the first
token's wait, so those are kept, never compared. The per-request speculative decoding figures GuideLLM reads from
the server's answers (vLLM's and Phoenix's ``metrics``) are summed into the run's."""

from __future__ import annotations

import math

from engine.errors import PhoenixError
from engine.imports.level import Level, Request
from engine.imports.values import number, text, whole

TOOL = "guidellm"
STATS = ("mean", "median", "std_dev", "min", "max", "count")
PERCENTILES = ("p50", "p90", "p95", "p99")
COMPARED = {
    "output_tokens_per_second.mean": "output_throughput",
    "time_to_first_token_ms.mean": "ttft_ms_mean",
    "request_totals.successful": "answered",
    "request_totals.errored": "failed",
    "prompt_token_count.total_sum": "prompt_tokens",
}
SPEC_COUNTS = ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")


def matches(doc: dict) -> bool:
    benchmarks = doc.get("benchmarks") if isinstance(doc, dict) else None
    return (
        isinstance(benchmarks, list) and isinstance(doc.get("metadata"), dict) and "guidellm_version" in doc["metadata"]
    )


def parse(docs: list[dict], where: str) -> list[Level]:
    levels = []
    for doc in docs:
        if not matches(doc):
            raise PhoenixError(f"{where}: not a GuideLLM report (it needs metadata.guidellm_version and benchmarks)")
        version = text(doc["metadata"].get("guidellm_version"))
        for i, bench in enumerate(doc["benchmarks"]):
            levels.append(_level(doc, bench, version, f"{where} (benchmark {i + 1})"))
    if not levels:
        raise PhoenixError(f"{where}: the report holds no benchmark")
    return levels


def _level(doc: dict, bench, version: str | None, where: str) -> Level:
    if not isinstance(bench, dict) or not isinstance(bench.get("requests"), dict):
        raise PhoenixError(f"{where}: a benchmark without its requests")
    strategy = (bench.get("config") or {}).get("strategy") or {}
    concurrency, rate = _load(strategy, where)
    found = bench["requests"]
    rows = [_request(r, where) for key in ("successful", "errored") for r in (found.get(key) or [])]
    backend = ((doc.get("config") or {}).get("spec") or {}).get("backend") or {}
    data = ((doc.get("config") or {}).get("spec") or {}).get("data") or [{}]
    return Level(
        tool=TOOL,
        version=version,
        engine="unknown",  # GuideLLM names the API it spoke, not the server behind it: --engine says
        model=str(backend.get("model") or "unknown"),
        concurrency=concurrency,
        rate=rate,
        duration_s=number(bench.get("duration"), "duration", where),
        requests=rows,
        aggregates=_aggregates(bench.get("metrics") or {}, where),
        extra={
            "strategy": strategy,
            "incomplete_requests": len(found.get("incomplete") or []),
            "warnings": bench.get("warnings"),
            "scheduler_metrics": bench.get("scheduler_metrics"),
            "report_config": doc.get("config"),
        },
        dataset=str(data[0].get("kind") or "unknown") if data and isinstance(data[0], dict) else "unknown",
        speculative=_speculative([r for key in ("successful", "errored") for r in (found.get(key) or [])]),
        compared=COMPARED,
    ).check(where)


def _load(strategy: dict, where: str) -> tuple[int | None, float]:
    """A strategy as Phoenix's load: (in-flight cap, requests/s; inf where requests go as soon as a slot frees)."""
    kind = strategy.get("type_")
    if kind == "synchronous":
        return 1, math.inf
    if kind == "concurrent":
        return whole(strategy.get("streams"), "strategy.streams", where), math.inf
    if kind == "throughput":
        return whole(strategy.get("max_concurrency"), "strategy.max_concurrency", where), math.inf
    if kind in ("constant", "poisson", "async"):
        return None, number(strategy.get("rate"), "strategy.rate", where)
    raise PhoenixError(f"{where}: strategy {str(kind)[:40]!r} is not one GuideLLM writes")


def _request(r, where: str) -> Request:
    if not isinstance(r, dict):
        raise PhoenixError(f"{where}: a request that is not an object")
    error = text((r.get("info") or {}).get("error"))
    ttft = r.get("time_to_first_token_ms")
    return Request(
        prompt_tokens=whole(r.get("prompt_tokens") or 0, "prompt_tokens", where) or 0,
        output_tokens=whole(r.get("output_tokens") or 0, "output_tokens", where) or 0,
        ttft_s=None if error or ttft is None else number(ttft, "time_to_first_token_ms", where) / 1000,
        latency_s=number(r.get("request_latency") or 0.0, "request_latency", where),
        text=str(r.get("output") or "")[:100_000],
        error=error,
        cached_tokens=whole(r.get("cached_tokens"), "cached_tokens", where),
    )


def _aggregates(metrics: dict, where: str) -> dict:
    """GuideLLM's figures over the successful requests as flat names (``time_to_first_token_ms.p95``)."""
    out: dict = {}
    for name, by_status in metrics.items():
        if name == "request_totals" and isinstance(by_status, dict):
            out |= {f"{name}.{k}": v for k, v in by_status.items() if isinstance(v, (int, float))}
            continue
        dist = by_status.get("successful") if isinstance(by_status, dict) else None
        if not isinstance(dist, dict):
            continue
        out |= {f"{name}.{k}": dist[k] for k in (*STATS, "total_sum") if isinstance(dist.get(k), (int, float))}
        cuts = dist.get("percentiles") or {}
        out |= {f"{name}.{p}": cuts[p] for p in PERCENTILES if isinstance(cuts.get(p), (int, float))}
    return out


def _speculative(requests: list[dict]) -> dict:
    """The drafts, draft tokens and accepted tokens the server reported per request, summed."""
    reported = [((r.get("response_metrics") or {}).get("speculative_decoding") or {}) for r in requests]
    reported = [s for s in reported if isinstance(s, dict) and s]
    if not reported:
        return {}
    out = {k: sum(int(s.get(k) or 0) for s in reported) for k in SPEC_COUNTS}
    out["requests_reporting"] = len(reported)
    return out
