"""Serving engines (vLLM, SGLang, llama.cpp's llama-server): a concurrency sweep against an OpenAI-compatible
endpoint, and a watch mode over a live server's spec-decode counters.

One parser reads every engine's /metrics. vLLM (``vllm:``, ``ray_vllm:`` under Ray Serve) and llama.cpp
(``llamacpp:``) export the same counters with vLLM's meanings, scraped before and after each concurrency level:
  acceptance rate      = accepted / draft_tokens
  mean accept length   = 1 + accepted / drafts
  per position i       = accepted_per_pos[i] / drafts   (unconditional)
SGLang (``sglang:``) exports acceptance as gauges over its last logging window (``spec_accept_rate``,
``spec_accept_length``), which cannot be differenced: a level reports the gauges as they stand at its end.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace

from engine.errors import PhoenixError
from engine.modes import SERVING_ENGINES

SPEC = "spec_decode_"
RAY_PREFIX = "ray_"  # vLLM under Ray Serve exports the same metrics as ray_vllm:...
GENERATED = {"generation_tokens", "tokens_predicted"}  # vLLM and SGLang's name, llama.cpp's
# vLLM fills every sampling field a request leaves out from the model's generation_config (for example
# repetition_penalty 1.1), so greedy decoding has to say all of them.
GREEDY = {
    "temperature": 0.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "n": 1,
}


@dataclass
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)
    generation_tokens: float = 0.0
    seen: bool = False  # the body held spec-decode counters (or SGLang's gauges) at all
    reset: bool = False  # a counter went down since the previous scrape: the server restarted
    engine: str | None = None  # the prefix the metrics carried: vllm, sglang or llamacpp
    gauge_rate: float | None = None  # SGLang: spec_accept_rate over its last window
    gauge_length: float | None = None  # SGLang: spec_accept_length over its last window

    def minus(self, other: SpecCounters) -> SpecCounters:
        """The increase since ``other``. A counter that went down means a restart; as Prometheus's rate() does,
        the increase is then the new value itself, and the delta says so. Gauges keep their latest value."""
        pairs = [
            (self.drafts, other.drafts),
            (self.draft_tokens, other.draft_tokens),
            (self.accepted, other.accepted),
            (self.generation_tokens, other.generation_tokens),
        ] + [(v, other.per_pos.get(p, 0.0)) for p, v in self.per_pos.items()]
        latest = replace(self, engine=self.engine or other.engine)  # gauges keep their latest values
        if any(now < before for now, before in pairs):
            return replace(latest, per_pos=dict(self.per_pos), reset=True)
        return replace(
            latest,
            drafts=self.drafts - other.drafts,
            draft_tokens=self.draft_tokens - other.draft_tokens,
            accepted=self.accepted - other.accepted,
            per_pos={p: v - other.per_pos.get(p, 0.0) for p, v in self.per_pos.items()},
            generation_tokens=self.generation_tokens - other.generation_tokens,
            reset=False,
        )

    def summary(self) -> dict:
        n = max(self.per_pos, default=-1) + 1
        counted = self.draft_tokens > 0 or self.drafts > 0
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted": self.accepted,
            "acceptance": self.accepted / self.draft_tokens
            if self.draft_tokens
            else (None if counted else self.gauge_rate),
            "mean_acceptance_length": 1 + self.accepted / self.drafts
            if self.drafts
            else (None if counted else self.gauge_length),
            "per_position": [self.per_pos.get(i, 0.0) / self.drafts if self.drafts else None for i in range(n)],
            "per_position_accepted": [self.per_pos.get(i, 0.0) for i in range(n)],
            "generation_tokens": self.generation_tokens,
            "spec_decode_counters": self.seen,
            "counters_reset": self.reset,
            "engine": self.engine,
            "acceptance_from": "gauges" if self.gauge_rate is not None and not counted else "counters",
        }


def split_name(sample_name: str) -> tuple[str | None, str]:
    """('vllm' | 'sglang' | 'llamacpp' | None, the name after the prefix, without _total)."""
    name = sample_name.removesuffix("_total").removeprefix(RAY_PREFIX)
    prefix, sep, rest = name.partition(":")
    return (prefix, rest) if sep and prefix in SERVING_ENGINES else (None, name)


MAX_POSITION = 1024  # no engine drafts further ahead; a larger label is a hostile or broken server
MAX_BODY = 16 << 20  # bytes of one answer (a completion, /metrics, /version) read at most


def parse_metrics(body: str) -> SpecCounters:
    """Sum the spec-decode counters of whichever engine wrote ``body`` over every label set (engines, models)."""
    from prometheus_client.parser import text_string_to_metric_families

    c = SpecCounters()
    try:
        samples = [s for family in text_string_to_metric_families(body) for s in family.samples]
    except (ValueError, TypeError, IndexError) as exc:
        raise PhoenixError(f"/metrics is not Prometheus text ({str(exc)[:80]}): is this the serving engine?") from None
    for s in samples:
        engine, name = split_name(s.name)
        if engine is None:
            continue
        counted = name.startswith(SPEC) or name in GENERATED  # other series (gauges, histograms) are not read
        if counted and (not math.isfinite(s.value) or s.value < 0):
            raise PhoenixError(f"/metrics: {s.name} is {s.value}, not a count: refusing the server's counters")
        c.engine = c.engine or engine
        if name.startswith(SPEC) or name in ("spec_accept_rate", "spec_accept_length"):
            c.seen = True
        if name == SPEC + "num_drafts":
            c.drafts += s.value
        elif name == SPEC + "num_draft_tokens":
            c.draft_tokens += s.value
        elif name == SPEC + "num_accepted_tokens":
            c.accepted += s.value
        elif name == SPEC + "num_accepted_tokens_per_pos":
            label = s.labels.get("position", "")
            if not (label.isascii() and label.isdigit() and int(label) < MAX_POSITION):
                raise PhoenixError(
                    f"/metrics: a draft position {label[:20]!r}, not a whole number below {MAX_POSITION}"
                )
            pos = int(label)
            c.per_pos[pos] = c.per_pos.get(pos, 0.0) + s.value
        elif name in GENERATED:
            c.generation_tokens += s.value
        elif name == "spec_accept_rate":
            c.gauge_rate = s.value
        elif name == "spec_accept_length":
            c.gauge_length = s.value
    return c


class ServerClient:
    def __init__(self, base_url: str, model: str, timeout_s: float = 600.0, api_key: str | None = None):
        # Users paste the OpenAI base URL; the paths below already start with /v1.
        self.base = base_url.rstrip("/").removesuffix("/v1")
        self.model, self.timeout_s, self.api_key = model, timeout_s, api_key

    def _open(self, path: str, payload: dict | None = None):
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(self.base + path, data=data, headers=headers)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout_s)
        except urllib.error.HTTPError as exc:
            detail = exc.read(300).decode(errors="replace")
            raise PhoenixError(f"the server {self.base}{path} answered HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PhoenixError(
                f"cannot reach the server at {self.base} ({getattr(exc, 'reason', exc)}); start it or fix --url"
            ) from None

    def _read(self, resp, path: str) -> bytes:
        """The whole body, within ``timeout_s`` for the whole read (a server sending a byte a second is cut off,
        not waited for) and at most MAX_BODY bytes."""
        deadline, chunks, size = time.monotonic() + self.timeout_s, [], 0
        try:
            while chunk := resp.read1(65536):
                size += len(chunk)
                if size > MAX_BODY:
                    raise PhoenixError(f"the server {self.base}{path} sent more than {MAX_BODY >> 20} MB: not read")
                if time.monotonic() > deadline:
                    raise PhoenixError(f"the server {self.base}{path} did not finish within {self.timeout_s:g} s")
                chunks.append(chunk)
        except OSError as exc:
            raise PhoenixError(f"the server {self.base}{path} broke off its answer ({exc})") from None
        return b"".join(chunks)

    def _json(self, path: str) -> dict | None:
        try:
            with self._open(path) as resp:
                body = json.loads(self._read(resp, path))
            return body if isinstance(body, dict) else None
        except (PhoenixError, ValueError):
            return None

    def identity(self, engine: str = "auto") -> dict:
        """Which engine answers and its version: vLLM's /version, llama.cpp's /props (build_info), SGLang's
        /get_server_info; with ``auto``, the first that answers, else the prefix of its metrics."""
        probes = {
            "vllm": ("/version", "version"),
            "llamacpp": ("/props", "build_info"),
            "sglang": ("/get_server_info", "version"),
            "phoenix": ("/health", "version"),
        }
        for name, (path, key) in probes.items():
            if engine not in ("auto", name):
                continue
            body = self._json(path)
            if body and body.get(key):
                return {"engine": name, "version": str(body[key]), "from": path}
        seen = self.metrics().engine
        return {"engine": engine if engine != "auto" else (seen or "vllm"), "version": None, "from": "/metrics"}

    def metrics(self) -> SpecCounters:
        with self._open("/metrics") as resp:
            return parse_metrics(self._read(resp, "/metrics").decode(errors="replace"))

    def complete(self, prompt: str, max_tokens: int, chat: bool = False) -> dict:
        """One greedy completion: latency, prompt and completion token counts from the server's usage. ``chat``:
        the prompt as one user message through the server's own chat template (/v1/chat/completions)."""
        t0 = time.perf_counter()
        path, payload = (
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]})
            if chat
            else ("/v1/completions", {"prompt": prompt})
        )
        with self._open(path, {"model": self.model, **payload, "max_tokens": max_tokens, **GREEDY}) as resp:
            raw = self._read(resp, path)
        latency = time.perf_counter() - t0
        try:
            return {"latency_s": latency, **_completion(json.loads(raw), chat)}
        except (ValueError, TypeError, AttributeError, KeyError, IndexError):
            raise PhoenixError(
                f"the server {self.base}{path} answered with something that is not an OpenAI completion: "
                f"{raw[:80].decode(errors='replace')!r}"
            ) from None


VllmClient = ServerClient  # the name before other engines came


def sweep_level(
    client: ServerClient, prompts, concurrency: int, max_tokens: int, on_result: Callable[[dict], None] | None = None
) -> tuple[list[dict], dict]:
    """All prompts at one concurrency level; returns per-request results (in prompt order) and the level's counter
    deltas. ``on_result`` gets each answer as it arrives, so a level cut short (Ctrl-C, a server that dies and
    takes its /metrics with it) still leaves every answered request with its caller."""
    before = client.metrics()
    t0 = time.perf_counter()
    results = answered_in_order(prompts, concurrency, lambda p: one_request(client, p, max_tokens), on_result)
    wall = time.perf_counter() - t0
    delta = client.metrics().minus(before)
    tokens = sum(r["output_tokens"] for r in results)
    drafted = [r for r in results if r.get("draft_n") is not None]
    level = {
        "concurrency": concurrency,
        "requests": len(results),
        "failed": sum(r["error"] is not None for r in results),
        "wall_s": wall,
        "throughput_tokens_per_s": tokens / wall if wall else 0.0,
        **delta.summary(),
        # llama.cpp says per response what it drafted: these sums must equal the counters' increase
        "requests_with_draft_counts": len(drafted),
        "request_draft_tokens": sum(int(r["draft_n"]) for r in drafted),
        "request_accepted": sum(int(r["draft_n_accepted"] or 0) for r in drafted),
    }
    return results, level


def answered_in_order(prompts, concurrency: int, ask: Callable, on_result: Callable[[dict], None] | None) -> list:
    """``ask`` for every prompt, ``concurrency`` at a time; each answer goes to ``on_result`` as it arrives. Ctrl-C
    cancels what has not started and leaves at once (the requests in flight end at their deadline) instead of
    waiting in the pool for every prompt, as map would."""
    pool = ThreadPoolExecutor(max_workers=concurrency)
    futures = {pool.submit(ask, p): i for i, p in enumerate(prompts)}
    results: list = [None] * len(prompts)
    try:
        for done in as_completed(futures):
            results[futures[done]] = done.result()
            if on_result:
                on_result(results[futures[done]])
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return results


def one_request(client: ServerClient, prompt, max_tokens: int, chat: bool = False) -> dict:
    """A request that fails (HTTP 400 when prompt + max_tokens exceed max_model_len, say) is recorded with the
    server's answer; its level carries on and keeps every other result."""
    t0 = time.perf_counter()
    try:
        return {"prompt": prompt, "error": None, **client.complete(prompt.text, max_tokens, chat)}
    except PhoenixError as exc:
        return {
            "prompt": prompt,
            "error": str(exc),
            "latency_s": time.perf_counter() - t0,
            "prompt_tokens": 0,
            "output_tokens": 0,
            "text": "",
            "draft_n": None,
            "draft_n_accepted": None,
        }


def level_notes(level: dict) -> list[str]:
    """What a level's numbers cannot show by themselves."""
    notes = []
    if not level.get("spec_decode_counters", True):
        notes.append(
            "the server exposes no spec-decode counters (vLLM without --speculative-config, llama.cpp "
            "without --spec-type or --metrics?); acceptance is unknown, not zero"
        )
    if level.get("acceptance_from") == "gauges":
        notes.append(
            "SGLang reports acceptance as gauges over its last logging window, not counters: this level's "
            "acceptance is the gauge at its end, and there is no per-position curve"
        )
    if level.get("counters_reset"):
        notes.append(
            "the server's counters went down during this level (a restart): its acceptance covers only "
            "the time since the restart"
        )
    return notes


def _count(value) -> int:
    """A token count from a server: a whole non-negative number, or a ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return int(value)


def _completion(body: dict, chat: bool) -> dict:
    usage = body.get("usage") or {}
    choices = body.get("choices") or [{}]
    choice = choices[0] if isinstance(choices, list) and isinstance(choices[0], dict) else {}
    text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
    timings = body.get("timings") or {}  # llama.cpp: this request's own drafted and accepted tokens
    drafted, accepted = timings.get("draft_n"), timings.get("draft_n_accepted")
    return {
        "prompt_tokens": _count(usage.get("prompt_tokens", 0)),
        "output_tokens": _count(usage.get("completion_tokens", 0)),
        "text": text if isinstance(text, str) else "",  # text: null is an empty answer, not a crash
        "draft_n": None if drafted is None else _count(drafted),
        "draft_n_accepted": None if accepted is None else _count(accepted),
    }
