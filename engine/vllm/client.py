"""vLLM as the serving engine: a concurrency sweep against an OpenAI-compatible
endpoint, and a watch mode over a live server's spec-decode counters.

Acceptance comes from the server's own ``vllm:spec_decode_*`` counters, scraped
from /metrics before and after each concurrency level (vLLM's definitions):
  acceptance rate      = accepted / draft_tokens
  mean accept length   = 1 + accepted / drafts
  per position i       = accepted_per_pos[i] / drafts   (unconditional)
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from engine.errors import PhoenixError

PREFIX = "vllm:spec_decode_"
RAY_PREFIX = "ray_"  # vLLM under Ray Serve exports the same metrics as ray_vllm:...
# vLLM fills every sampling field a request leaves out from the model's generation_config (for example
# repetition_penalty 1.1), so greedy decoding has to say all of them.
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0,
          "presence_penalty": 0.0, "frequency_penalty": 0.0, "n": 1}


@dataclass
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)
    generation_tokens: float = 0.0
    seen: bool = False  # the body held spec-decode counters at all
    reset: bool = False  # a counter went down since the previous scrape: the server restarted

    def minus(self, other: SpecCounters) -> SpecCounters:
        """The increase since ``other``. A counter that went down means a restart; as Prometheus's rate() does,
        the increase is then the new value itself, and the delta says so."""
        pairs = [(self.drafts, other.drafts), (self.draft_tokens, other.draft_tokens), (self.accepted, other.accepted),
                 (self.generation_tokens, other.generation_tokens)] + [(v, other.per_pos.get(p, 0.0)) for p, v in self.per_pos.items()]
        if any(now < before for now, before in pairs):
            return SpecCounters(self.drafts, self.draft_tokens, self.accepted, dict(self.per_pos), self.generation_tokens,
                                self.seen, reset=True)
        return SpecCounters(self.drafts - other.drafts, self.draft_tokens - other.draft_tokens,
                            self.accepted - other.accepted,
                            {p: v - other.per_pos.get(p, 0.0) for p, v in self.per_pos.items()},
                            self.generation_tokens - other.generation_tokens, self.seen)

    def summary(self) -> dict:
        n = max(self.per_pos, default=-1) + 1
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "acceptance": self.accepted / self.draft_tokens if self.draft_tokens else None,
                "mean_acceptance_length": 1 + self.accepted / self.drafts if self.drafts else None,
                "per_position": [self.per_pos.get(i, 0.0) / self.drafts if self.drafts else None for i in range(n)],
                "generation_tokens": self.generation_tokens, "spec_decode_counters": self.seen,
                "counters_reset": self.reset}


def parse_metrics(body: str) -> SpecCounters:
    """Sum vLLM's spec-decode counters over every label set (engines, models) in a /metrics body."""
    from prometheus_client.parser import text_string_to_metric_families

    c = SpecCounters()
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            name = s.name.removesuffix("_total").removeprefix(RAY_PREFIX)
            c.seen = c.seen or name.startswith(PREFIX)
            if name == PREFIX + "num_drafts":
                c.drafts += s.value
            elif name == PREFIX + "num_draft_tokens":
                c.draft_tokens += s.value
            elif name == PREFIX + "num_accepted_tokens":
                c.accepted += s.value
            elif name == PREFIX + "num_accepted_tokens_per_pos":
                pos = int(s.labels["position"])
                c.per_pos[pos] = c.per_pos.get(pos, 0.0) + s.value
            elif name == "vllm:generation_tokens":
                c.generation_tokens += s.value
    return c


class VllmClient:
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
            raise PhoenixError(f"vLLM server {self.base}{path} answered HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise PhoenixError(f"cannot reach the vLLM server at {self.base} ({getattr(exc, 'reason', exc)}); "
                               "start it or fix --url") from None

    def metrics(self) -> SpecCounters:
        with self._open("/metrics") as resp:
            return parse_metrics(resp.read().decode())

    def complete(self, prompt: str, max_tokens: int) -> dict:
        """One greedy completion: latency, prompt and completion token counts from the server's usage."""
        t0 = time.perf_counter()
        with self._open("/v1/completions", {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                            **GREEDY}) as resp:
            body = json.loads(resp.read())
        latency = time.perf_counter() - t0
        usage = body.get("usage") or {}
        text = body["choices"][0].get("text", "") if body.get("choices") else ""
        return {"latency_s": latency, "prompt_tokens": int(usage.get("prompt_tokens", 0)),
                "output_tokens": int(usage.get("completion_tokens", 0)), "text": text}


def sweep_level(client: VllmClient, prompts, concurrency: int, max_tokens: int) -> tuple[list[dict], dict]:
    """All prompts at one concurrency level; returns per-request results and the level's counter deltas."""
    before = client.metrics()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        results = list(pool.map(lambda p: one_request(client, p, max_tokens), prompts))
    wall = time.perf_counter() - t0
    delta = client.metrics().minus(before)
    tokens = sum(r["output_tokens"] for r in results)
    level = {"concurrency": concurrency, "requests": len(results), "failed": sum(r["error"] is not None for r in results),
             "wall_s": wall,
             "throughput_tokens_per_s": tokens / wall if wall else 0.0, **delta.summary()}
    return results, level


def one_request(client: VllmClient, prompt, max_tokens: int) -> dict:
    """A request that fails (HTTP 400 when prompt + max_tokens exceed max_model_len, say) is recorded with the
    server's answer; its level carries on and keeps every other result."""
    t0 = time.perf_counter()
    try:
        return {"prompt": prompt, "error": None, **client.complete(prompt.text, max_tokens)}
    except PhoenixError as exc:
        return {"prompt": prompt, "error": str(exc), "latency_s": time.perf_counter() - t0, "prompt_tokens": 0,
                "output_tokens": 0, "text": ""}


def level_notes(level: dict) -> list[str]:
    """What a level's numbers cannot show by themselves."""
    notes = []
    if not level.get("spec_decode_counters", True):
        notes.append("the server exposes no vllm:spec_decode_* counters (started without --speculative-config?); "
                     "acceptance is unknown, not zero")
    if level.get("counters_reset"):
        notes.append("the server's counters went down during this level (a restart): its acceptance covers only "
                     "the time since the restart")
    return notes
