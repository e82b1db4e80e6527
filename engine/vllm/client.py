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


@dataclass
class SpecCounters:
    drafts: float = 0.0
    draft_tokens: float = 0.0
    accepted: float = 0.0
    per_pos: dict[int, float] = field(default_factory=dict)
    generation_tokens: float = 0.0

    def minus(self, other: "SpecCounters") -> "SpecCounters":
        return SpecCounters(self.drafts - other.drafts, self.draft_tokens - other.draft_tokens,
                            self.accepted - other.accepted,
                            {p: v - other.per_pos.get(p, 0.0) for p, v in self.per_pos.items()},
                            self.generation_tokens - other.generation_tokens)

    def summary(self) -> dict:
        n = max(self.per_pos, default=-1) + 1
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "acceptance": self.accepted / self.draft_tokens if self.draft_tokens else None,
                "mean_acceptance_length": 1 + self.accepted / self.drafts if self.drafts else None,
                "per_position": [self.per_pos.get(i, 0.0) / self.drafts if self.drafts else None for i in range(n)],
                "generation_tokens": self.generation_tokens}


def parse_metrics(body: str) -> SpecCounters:
    """Sum vLLM's spec-decode counters over every label set (engines, models) in a /metrics body."""
    from prometheus_client.parser import text_string_to_metric_families

    c = SpecCounters()
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            name = s.name.removesuffix("_total")
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
        self.base = base_url.rstrip("/")
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
                                            "temperature": 0.0}) as resp:
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
        results = list(pool.map(lambda p: {"prompt": p, **client.complete(p.text, max_tokens)}, prompts))
    wall = time.perf_counter() - t0
    delta = client.metrics().minus(before)
    tokens = sum(r["output_tokens"] for r in results)
    level = {"concurrency": concurrency, "requests": len(results), "wall_s": wall,
             "throughput_tokens_per_s": tokens / wall if wall else 0.0, **delta.summary()}
    return results, level
