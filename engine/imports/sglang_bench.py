"""SGLang's `bench_serving` (`python -m sglang.benchmark.serving --output-file F [--output-details]`): one JSON object
per line, appended run after run. Its request columns are vLLM's (input_lens, output_lens, ttfts, itls,
generated_texts, errors) without the latencies, so a request's end-to-end time is its TTFT plus its inter-token gaps;
its aggregates carry SGLang's names (``mean_e2e_latency_ms``, ``p99_ttft_ms``), and its server's average accept
length (``accept_length``) is kept as the run's speculative figure where the server reported one."""

from __future__ import annotations

from engine.errors import PhoenixError
from engine.imports.level import Level
from engine.imports.values import number, rate, text, whole
from engine.imports.vllm_bench import DETAILED, aggregate, requests_of

TOOL = "sglang bench_serving"
SETUP: tuple[str, ...] = ("tag", "backend", "dataset_name", "request_rate", "max_concurrency", "duration")
SETUP += ("server_info", "accept_length", "model_id", "tokenizer_id")
# SGLang's figure and Phoenix's name for it. Left out: its e2e latency and TPOT, timed at the stream's last chunk
# (which the file does not hold), so a request's TTFT plus its gaps differs from them by the [DONE] event's time
COMPARED = {
    "output_throughput": "output_throughput",
    "request_throughput": "request_throughput",
    "mean_ttft_ms": "ttft_ms_mean",
    "median_ttft_ms": "ttft_ms_p50",
    "p95_ttft_ms": "ttft_ms_p95",
    "completed": "answered",
    "total_input_tokens": "prompt_tokens",
}


def matches(doc: dict) -> bool:
    """A line of bench_serving's output: its duration, its backend and SGLang's own name for end-to-end latency."""
    return isinstance(doc, dict) and "duration" in doc and "backend" in doc and "mean_e2e_latency_ms" in doc


def parse(docs: list[dict], where: str) -> list[Level]:
    return [_level(doc, f"{where}" + (f" (line {i + 1})" if len(docs) > 1 else "")) for i, doc in enumerate(docs)]


def _level(doc: dict, where: str) -> Level:
    if not matches(doc):
        raise PhoenixError(
            f"{where}: not an SGLang bench_serving result (it needs duration, backend, mean_e2e_latency_ms)"
        )
    aggregates = {k: v for k, v in doc.items() if k not in SETUP + DETAILED and aggregate(k, v)}
    accept = doc.get("accept_length")
    spec = {"accept_length": number(accept, "accept_length", where)} if accept is not None else {}
    known = set(SETUP) | set(DETAILED) | set(aggregates)
    backend = str(doc.get("backend") or "")
    return Level(
        tool=TOOL,
        version=None,  # bench_serving writes no version of its own (PROVENANCE.md names the wheel)
        engine="sglang" if backend.startswith("sglang") else "vllm" if backend.startswith("vllm") else "unknown",
        model=str(doc.get("model_id") or "unknown"),
        concurrency=whole(doc.get("max_concurrency"), "max_concurrency", where),
        rate=rate(doc.get("request_rate"), where),
        duration_s=number(doc.get("duration"), "duration", where),
        requests=requests_of(doc, where),
        aggregates=aggregates,
        extra={k: v for k, v in doc.items() if k not in known},
        dataset=text(doc.get("dataset_name")) or "unknown",
        speculative=spec,
        compared=COMPARED,
    ).check(where)
