"""The load protocol: what each request of a sweep asks of its server (the speculation a variant names, the cold
protocol's salt) and what a sweep asks the server itself (its model, its default drafter, its settings and live
run): the terms a load run states, in one place."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.error
import urllib.request

from engine.engines.config import LoadConfig
from engine.errors import PhoenixError
from engine.prompts.sets import Prompt

# none | auto | k<N> (the server's drafter) | <drafter>[-auto] (its tuner's k; choice: the drafter too) | <drafter>-k<N>
_VARIANT = re.compile(
    r"^(?:none|auto|k(?P<k>[0-9]+)|(?P<drafter>model|ngram|suffix|eagle3|hybrid|choice)(?:-auto|-k(?P<dk>[0-9]+))?)$"
)


def named(variant: str, drafter: str) -> str:
    """A Phoenix variant in the server's own grammar (engine.serve.service.variant): none, <drafter>-auto or
    <drafter>-k<N>, so a load sweep's modes and the live run's name one kind of request one way."""
    m = _VARIANT.match(variant)
    if variant in ("none", "as-served") or m is None:
        return variant
    k = m["k"] or m["dk"]
    if k is not None and int(k) == 0:
        return "none"
    return f"{m['drafter'] or drafter}-" + (f"k{int(k)}" if k is not None else "auto")


def server_health(url: str, timeout_s: float) -> dict:
    """Phoenix's server's /health ({} where it does not answer one)."""
    try:
        with urllib.request.urlopen(url.rstrip("/").removesuffix("/v1") + "/health", timeout=timeout_s) as r:
            health = json.loads(r.read(1 << 16))
    except (urllib.error.URLError, OSError, ValueError):
        return {}
    return health if isinstance(health, dict) else {}


def server_of(url: str, timeout_s: float) -> dict:
    """What a load run keeps of the Phoenix server it measured: its own live run (the link to the server's side of
    the same requests), its dtype, threads, default drafter, draft and version."""
    health = server_health(url, timeout_s)
    keep = ("run_id", "dtype", "threads", "drafter", "draft", "k_max", "version", "preload")
    out = {k: health[k] for k in keep if isinstance(health.get(k), (str, int)) and not isinstance(health[k], bool)}
    if health:  # how much the server had served before this sweep: its tuner's cells and estimates carry over
        finished = health.get("finished", 0)  # a Counter's key: absent on a server that has finished nothing
        out["served_before"] = finished if isinstance(finished, int) and not isinstance(finished, bool) else 0
    settings = health.get("settings")
    if isinstance(settings, dict):
        out["settings"] = {str(k): v for k, v in settings.items() if isinstance(v, (str, int, float))}
    return out


def served_drafter(url: str, timeout_s: float) -> tuple[str | None, int | None]:
    """The drafter Phoenix's server drafts with by default and its largest k (its /health); None where it does
    not say."""
    health = server_health(url, timeout_s)
    if not health:
        return None, None
    drafter, k_max = health.get("drafter"), health.get("k_max")
    return (drafter if isinstance(drafter, str) else None), (k_max if isinstance(k_max, int) else None)


def speculation(variant: str) -> dict | None:
    """What a variant asks of Phoenix's server in each request's "speculation" (None: nothing, as served)."""
    if variant == "as-served":
        return None
    if variant == "none":
        return {"drafter": "none"}
    m = _VARIANT.match(variant)
    if m is None:
        raise PhoenixError(f"--variants: unknown {variant!r}; use none, auto, k<N>, <drafter> or <drafter>-k<N>")
    spec: dict = {"drafter": m["drafter"]} if m["drafter"] else {}
    k = m["k"] or m["dk"]
    return {**spec, "k": int(k)} if k else spec


def served_model(url: str, timeout_s: float, api_key: str | None = None) -> str:
    request = urllib.request.Request(url.rstrip("/").removesuffix("/v1") + "/v1/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as r:
            return json.loads(r.read())["data"][0]["id"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as exc:
        raise PhoenixError(f"cannot read {url}/v1/models ({exc}); start the server or fix --url") from None


def cold(cfg: LoadConfig, pass_id: str, prompt: Prompt) -> dict:
    """What keeps one request's prompt out of every prefix cache under the cold protocol: a ``cache_salt`` of its
    own (Phoenix's server and vLLM key their caches by it), or llama.cpp's ``cache_prompt`` off. Under ``--cache
    system`` one salt for the whole pass: its requests share their system prompt and nothing an earlier pass sent.
    Nothing under ``--cache warm``, or for an engine that takes neither (SGLang: its runs say the cache was not
    controlled)."""
    if cfg.cache == "warm":
        return {}
    if cfg.engine == "llamacpp" and cfg.cache != "cold":
        return {}
    return cold_request(cfg.engine, pass_id if cfg.cache == "system" else f"{pass_id}/{prompt.id}")


def cold_request(engine: str, key: str) -> dict:
    """One request's fields that keep it out of every prefix cache but its own ``key``'s: a ``cache_salt`` for
    Phoenix's server and vLLM, ``cache_prompt`` off for llama.cpp; {} for an engine that takes neither."""
    if engine == "llamacpp":
        return {"cache_prompt": False}
    if engine in ("phoenix", "vllm"):  # vLLM takes 128 characters without '@', '/', '\\': a digest fits anywhere
        return {"cache_salt": hashlib.sha256(key.encode()).hexdigest()[:32]}
    return {}


def cache_scenario(cfg: LoadConfig) -> str:
    """The cache scenario a run states: cold (enforced per request), warm (named), or not controlled."""
    if cfg.cache == "warm":
        return "warm: prompts re-sent, " + ("one system prompt shared" if cfg.system_prompt else "as they come")
    if cfg.cache == "system":
        if cfg.engine not in ("phoenix", "vllm"):
            return "not controlled (the engine takes no salt)"
        return "system: each pass's requests share their system prompt, nothing from an earlier pass"
    return "cold" if cfg.engine in ("phoenix", "vllm", "llamacpp") else "not controlled (the engine takes no salt)"
