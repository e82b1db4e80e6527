"""`vllm bench serve --save-result [--save-detailed]` (vllm/benchmarks/serve.py): one JSON object per run, or one
per line with --append-result. With --save-detailed each request is a row (its prompt and output lengths, TTFT,
inter-token latencies, end-to-end latency, text and error); without it only the tool's aggregates come in, and the
run says so. vLLM's server-side speculative decoding figures (``spec_decode_*``) are kept with the run."""

from __future__ import annotations

from engine.errors import PhoenixError
from engine.imports.level import Level, Request
from engine.imports.values import number, rate, text, whole

TOOL = "vllm bench serve"
# the fields read here; every other one is kept in the run as the tool wrote it
SETUP: tuple[str, ...] = ("date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts")
SETUP += ("request_rate", "burstiness", "max_concurrency", "duration", "version", "vllm_version")
DETAILED = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "queue_times", "generated_texts", "errors")
AGGREGATE_PREFIXES = ("mean_", "median_", "std_", "p", "total_", "request_", "output_", "max_", "rtfx")
# the tool's figure and Phoenix's name for it: vLLM's definitions are Phoenix's own (engine.engines.arrivals)
COMPARED = {
    "output_throughput": "output_throughput",
    "request_throughput": "request_throughput",
    "mean_ttft_ms": "ttft_ms_mean",
    "median_ttft_ms": "ttft_ms_p50",
    "p95_ttft_ms": "ttft_ms_p95",
    "mean_tpot_ms": "tpot_ms_mean",
    "median_tpot_ms": "tpot_ms_p50",
    "p95_tpot_ms": "tpot_ms_p95",
    "median_e2el_ms": "e2el_ms_p50",
    "completed": "answered",
    "failed": "failed",
    "total_input_tokens": "prompt_tokens",
}


def matches(doc: dict) -> bool:
    """A result of vllm bench serve: its setup keys and its duration."""
    return isinstance(doc, dict) and "duration" in doc and "endpoint_type" in doc and "model_id" in doc


def parse(docs: list[dict], where: str) -> list[Level]:
    return [_level(doc, f"{where}" + (f" (result {i + 1})" if len(docs) > 1 else "")) for i, doc in enumerate(docs)]


def _level(doc: dict, where: str) -> Level:
    if not matches(doc):
        raise PhoenixError(f"{where}: not a vllm bench serve result (it needs duration, endpoint_type and model_id)")
    aggregates = {k: v for k, v in doc.items() if k not in SETUP + DETAILED and aggregate(k, v)}
    spec = {k: v for k, v in aggregates.items() if k.startswith("spec_decode_")}
    aggregates = {k: v for k, v in aggregates.items() if k not in spec}
    known = set(SETUP) | set(DETAILED) | set(aggregates) | set(spec)
    return Level(
        tool=TOOL,
        version=text(doc.get("vllm_version") or doc.get("version")),
        engine=_engine(doc),
        model=str(doc.get("model_id") or "unknown"),
        concurrency=whole(doc.get("max_concurrency"), "max_concurrency", where),
        rate=rate(doc.get("request_rate"), where),
        duration_s=number(doc.get("duration"), "duration", where),
        requests=requests_of(doc, where),
        aggregates=aggregates,
        extra={k: v for k, v in doc.items() if k not in known},
        dataset=str(doc.get("label") or doc.get("dataset_name") or "unknown"),
        speculative=spec,
        compared=COMPARED,
    ).check(where)


def aggregate(key: str, value) -> bool:
    """A figure the tool printed (None where it had none to print: request_goodput without --goodput)."""
    numeric = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
    return numeric and (key.startswith(AGGREGATE_PREFIXES) or key in ("completed", "failed"))


def _engine(doc: dict) -> str:
    """The server measured: vLLM's client names only its backend (openai-chat, vllm, sglang, ...)."""
    backend = str(doc.get("backend") or doc.get("endpoint_type") or "")
    return "sglang" if "sglang" in backend else "vllm" if backend in ("vllm", "openai", "openai-chat") else "unknown"


def requests_of(doc: dict, where: str) -> list[Request]:
    """Each request of a --save-detailed result; [] where the file holds the aggregates only. SGLang's
    bench_serving (--output-details) writes the same columns, less the latencies."""
    if not all(isinstance(doc.get(k), list) for k in ("input_lens", "output_lens", "ttfts")):
        return []
    n = len(doc["input_lens"])
    columns = {k: doc.get(k) for k in DETAILED}
    for k, v in columns.items():
        if v is not None and (not isinstance(v, list) or len(v) != n):
            raise PhoenixError(f"{where}: {k} holds {len(v) if isinstance(v, list) else 'no list'}, not {n} entries")
    errors = columns["errors"] or [""] * n
    texts = columns["generated_texts"] or [""] * n
    itls = columns["itls"] or [[] for _ in range(n)]
    latencies, queued = columns["latencies"], columns["queue_times"]
    out = []
    for i in range(n):
        ttft = number(doc["ttfts"][i], f"ttfts[{i}]", where)
        itl = [number(x, f"itls[{i}]", where) for x in (itls[i] or [])]
        # older files hold no latencies: TTFT plus the inter-token gaps is the same sum vLLM's client takes
        latency = number(latencies[i], f"latencies[{i}]", where) if latencies else ttft + sum(itl)
        error = text(errors[i])
        out.append(
            Request(
                prompt_tokens=whole(doc["input_lens"][i], f"input_lens[{i}]", where) or 0,
                output_tokens=whole(doc["output_lens"][i], f"output_lens[{i}]", where) or 0,
                ttft_s=None if error else ttft,
                latency_s=latency,
                text=str(texts[i] or "")[:100_000],
                error=error[:300] if error else None,
                queue_s=number(queued[i], f"queue_times[{i}]", where) if queued else None,
            )
        )
    return out
