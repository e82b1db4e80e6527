"""AIPerf's profile (`aiperf profile ... --artifact-dir D --export-level records`): its aggregates in
``D/profile_export_aiperf.json`` (what it printed: each metric's avg and percentiles under AIPerf's names), and one
record per request in ``D/profile_export.jsonl``, which the import reads from beside the aggregate file when it is
there (TTFT, latency, prompt and output lengths as AIPerf counted them, the cache's tokens, the server's speculative
decoding figures). AIPerf's figures share vLLM's definitions (its inter-token latency is vLLM's TPOT), so each is
compared with Phoenix's recomputation; the command line it stores is kept as the run's."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

from engine.errors import PhoenixError
from engine.imports.files import read_text
from engine.imports.level import Level, Request
from engine.imports.values import number, text, whole

TOOL = "aiperf"
COMPARED = {
    "output_token_throughput.avg": "output_throughput",
    "request_throughput.avg": "request_throughput",
    "time_to_first_token.avg": "ttft_ms_mean",
    "time_to_first_token.p50": "ttft_ms_p50",
    "time_to_first_token.p95": "ttft_ms_p95",
    "inter_token_latency.avg": "tpot_ms_mean",
    "inter_token_latency.p50": "tpot_ms_p50",
    "inter_token_latency.p95": "tpot_ms_p95",
    "request_latency.p50": "e2el_ms_p50",
    "completed_request_count.avg": "answered",
    "total_isl.avg": "prompt_tokens",
}
SPEC_COUNTS = ("num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")
READ = ("aiperf_version", "input_config", "run_info", "benchmark_duration", "start_time", "end_time")


def matches(doc: dict) -> bool:
    return isinstance(doc, dict) and "aiperf_version" in doc and "benchmark_duration" in doc


def parse(docs: list[dict], where: str) -> list[Level]:
    if len(docs) != 1 or not matches(docs[0]):
        raise PhoenixError(
            f"{where}: not AIPerf's profile_export_aiperf.json (it needs aiperf_version, benchmark_duration)"
        )
    doc = docs[0]
    config = doc.get("input_config") or {}
    phase: dict = next((p for p in config.get("phases") or [] if p.get("kind") == "profiling"), {})
    records = _records(Path(where))
    aggregates = _aggregates(doc)
    return [
        Level(
            tool=TOOL,
            version=text(doc.get("aiperf_version")),
            engine="unknown",  # AIPerf names the endpoint type it spoke, not the server: --engine says
            model=str(((config.get("models") or {}).get("items") or [{}])[0].get("name") or "unknown"),
            concurrency=whole(phase.get("concurrency"), "phases.concurrency", where),
            rate=number(phase["request_rate"], "phases.request_rate", where) if phase.get("request_rate") else math.inf,
            duration_s=_duration(doc, where),
            requests=[_request(r, f"{records_path(Path(where))} (record {i + 1})") for i, r in enumerate(records)],
            aggregates=aggregates,
            extra={k: v for k, v in doc.items() if k not in READ and k not in _metric_names(doc)}
            | {"input_config": config, "run_info": doc.get("run_info")},
            dataset=str(((config.get("datasets") or [{}])[0]).get("type") or "unknown"),
            speculative=_speculative(records),
            compared=COMPARED,
            command=text((doc.get("run_info") or {}).get("cli_command"), 2000),
        ).check(where)
    ]


def _duration(doc: dict, where: str) -> float:
    """The window AIPerf divides by (its start_time to end_time; benchmark_duration is a shade shorter)."""
    try:
        span = (datetime.fromisoformat(doc["end_time"]) - datetime.fromisoformat(doc["start_time"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        return number((doc.get("benchmark_duration") or {}).get("avg"), "benchmark_duration", where)
    return number(span, "end_time - start_time", where)


def records_path(aggregate: Path) -> Path:
    """The records file AIPerf writes beside its aggregates (prefix_aiperf.json's prefix.jsonl)."""
    return aggregate.with_name(aggregate.name.removesuffix("_aiperf.json") + ".jsonl")


def _records(aggregate: Path) -> list[dict]:
    path = records_path(aggregate)
    if path == aggregate or not path.is_file():
        return []
    raw, _ = read_text(path)
    try:
        found = [json.loads(line) for line in raw.splitlines() if line.strip()]
    except ValueError as exc:
        raise PhoenixError(f"{path}: a record that is not JSON: {exc}") from None
    if not all(isinstance(r, dict) and isinstance(r.get("metrics"), dict) for r in found):
        raise PhoenixError(f"{path}: a record without its metrics")
    return [r for r in found if (r.get("metadata") or {}).get("benchmark_phase", "profiling") == "profiling"]


def _value(r: dict, name: str):
    m = r["metrics"].get(name)
    return m.get("value") if isinstance(m, dict) else None


def _request(r: dict, where: str) -> Request:
    error = r.get("error")
    error = text(error.get("message") or error.get("type") if isinstance(error, dict) else error)
    ttft, latency = _value(r, "time_to_first_token"), _value(r, "request_latency")
    return Request(
        prompt_tokens=whole(_value(r, "input_sequence_length") or 0, "input_sequence_length", where) or 0,
        output_tokens=whole(_value(r, "output_sequence_length") or 0, "output_sequence_length", where) or 0,
        ttft_s=None if error or ttft is None else number(ttft, "time_to_first_token", where) / 1000,
        latency_s=number(latency if latency is not None else 0.0, "request_latency", where) / 1000,
        error=error,
        cached_tokens=whole(_value(r, "usage_prompt_cache_read_tokens"), "usage_prompt_cache_read_tokens", where),
    )


def _metric_names(doc: dict) -> set[str]:
    return {k for k, v in doc.items() if isinstance(v, dict) and "unit" in v}


def _aggregates(doc: dict) -> dict:
    """AIPerf's metrics as flat names (``time_to_first_token.p95``), in its units (ms, tokens/sec)."""
    return {
        f"{name}.{stat}": v
        for name in _metric_names(doc)
        for stat, v in doc[name].items()
        if stat != "unit" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def _speculative(records: list[dict]) -> dict:
    reported = [r["spec_decode_acceptance"] for r in records if isinstance(r.get("spec_decode_acceptance"), dict)]
    if not reported:
        return {}
    out = {k: sum(int(s.get(k) or 0) for s in reported) for k in SPEC_COUNTS}
    return out | {"requests_reporting": len(reported), "engine_said": reported[0].get("engine")}
