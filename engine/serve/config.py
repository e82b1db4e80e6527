"""Phoenix's server settings and their one validation, before anything loads (no torch here: the CLI reads it)."""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from typing import Literal

from engine.catalog import EMBEDDED, default_draft
from engine.decode.config import BUDGET, LONG_PREFILL, PairConfig
from engine.errors import PhoenixError
from engine.modes import DEFAULT_MAX_BATCH, DRAFTERS, check_k

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass
class ServeConfig(PairConfig):
    drafter: str = "auto"  # auto | choice | none | model | ngram | suffix | eagle3 | hybrid (auto: the draft's kind,
    # eagle3 for a head, model for a draft model, else ngram; choice: the tuner picks the drafter each step among
    # the draft's kind, ngram and suffix, from their measured acceptance and cost)
    draft: str | None = EMBEDDED  # a name, a directory, a cached id, or 'none' (model-free); with another --target
    # left out: the best measured draft for that target that is on this machine, else none
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = (
        "auto"  # auto | float32 | bfloat16 | float16 (auto: bfloat16 on CUDA or a CPU with native bf16, else float32)
    )
    host: str = "127.0.0.1"  # any other address needs --api-key
    port: int = 8000
    api_key: str | None = None  # clients send 'Authorization: Bearer KEY' (also PHOENIX_API_KEY); never stored
    served_model_name: str = ""  # the model id /v1/models lists and requests name; default: the target's name
    max_batch: int = DEFAULT_MAX_BATCH  # rows decoded together
    max_queue: int = 64  # requests waiting beyond the batch; more get 429 with Retry-After
    max_num_batched_tokens: int = BUDGET  # a step's token budget: the rows' pending tokens and drafts, then prompts
    long_prefill_token_threshold: int = LONG_PREFILL  # the most of one prompt a step prefills (longer: in chunks)
    prefix_cache_gb: float = 0.5  # prompts' KV kept for later prompts that begin alike (0: off), LRU past this
    k_max: int = 8  # the largest k the tuner considers
    max_tokens_cap: int = 1024  # the largest max_tokens a request may ask for
    epsilon: float = 0.05  # share of steps that explore one position deeper than the best k
    profile: bool = True  # time the forward at every (batch, width) before serving; off: learn it online only
    hold_rows: bool = False  # a row whose own recent acceptance is below the break-even of its k drafts nothing for
    # a while (engine.decode.steps.RowAcceptance); off by default: it cost the tuner 0.02-0.2 of "off"'s throughput at
    # 2-4 requests on SmolLM2 with the head (benchmarks/hold_ab.sh, runs #470-#489)
    shutdown_timeout_s: float = 30.0  # after SIGTERM: requests in flight get this long, then end aborted (a second
    # SIGTERM or Ctrl-C ends them at once); every one is recorded either way
    shadow_rate: float = 0.0  # share of finished requests re-decoded single-stream target-only to check identity
    metrics_prefix: str = "phoenix"  # phoenix | vllm: the /metrics names (vllm: what an inference gateway's endpoint
    # picker and vLLM's Grafana dashboards read by default, the model-server protocol's names)
    name: str = ""  # the live run's name
    fleet: str = ""  # the fleet this server is a replica of (`fleet start` sets it; the Fleet page groups by it)
    router: str = ""  # the router in front of it, "<policy>@<url>" (`fleet start` sets it)
    seed: int = 0
    preload: Literal["auto", "none"] = "auto"  # auto: restart once with tcmalloc preloaded where the machine has it
    # (vLLM's CPU allocator; engine.preload), none: glibc's malloc


def check_serve(cfg: ServeConfig) -> ServeConfig:
    """Every bad setting as one line, before anything loads. A target given without a draft gets the best measured
    draft for it that is on this machine (engine.catalog.DRAFTS_FOR), else drafts model-free: the default draft is
    the embedded pair's, which fits no other target (`serve --target smollm2` refused to start)."""
    if cfg.draft == EMBEDDED and cfg.target != EMBEDDED:
        cfg.draft = default_draft(cfg.target)
    if cfg.drafter not in ("auto", "choice") + DRAFTERS:
        raise PhoenixError(f"--drafter must be auto, choice or one of {', '.join(DRAFTERS)}, got {cfg.drafter!r}")
    if cfg.api_key is None:
        cfg.api_key = os.environ.get("PHOENIX_API_KEY") or None
    if cfg.host not in LOCAL_HOSTS and not cfg.api_key:
        raise PhoenixError(
            f"--host {cfg.host} would serve other machines: pass --api-key (or PHOENIX_API_KEY) as well, or keep "
            "the default 127.0.0.1"
        )
    for name, low, high in (
        ("max_batch", 1, 256),
        ("max_queue", 1, 100_000),  # 0 started a server that refused every request
        ("port", 0, 65535),
        ("max_num_batched_tokens", 1, 1 << 20),
        ("long_prefill_token_threshold", 1, 1 << 20),
    ):
        value = getattr(cfg, name)
        if not low <= value <= high:
            raise PhoenixError(f"--{name.replace('_', '-')} must be in {low}..{high}, got {value}")
    if not 1 <= cfg.max_tokens_cap <= 1 << 20:  # a cap of 0 starts a server that refuses every request
        raise PhoenixError(f"--max-tokens-cap must be in 1..{1 << 20}, got {cfg.max_tokens_cap}")
    check_k(cfg.k_max)
    if not 0.0 <= cfg.prefix_cache_gb <= 1024.0:  # NaN fails this too
        raise PhoenixError(f"--prefix-cache-gb must be in 0..1024, got {cfg.prefix_cache_gb}")
    cfg.check_pack()
    if cfg.metrics_prefix not in ("phoenix", "vllm"):
        raise PhoenixError(f"--metrics-prefix must be phoenix or vllm, got {cfg.metrics_prefix!r}")
    if not 0.0 <= cfg.shutdown_timeout_s <= 86_400.0:  # NaN fails this too
        raise PhoenixError(f"--shutdown-timeout-s must be in 0..86400, got {cfg.shutdown_timeout_s}")
    if not 0.0 <= cfg.shadow_rate <= 1.0 or not 0.0 <= cfg.epsilon <= 1.0:
        raise PhoenixError("--shadow-rate and --epsilon must be in 0..1")
    if cfg.router and not ROUTER.fullmatch(cfg.router):  # it is stored and shown: only what fleet start writes
        raise PhoenixError(f"--router must be <{'|'.join(ROUTER_POLICIES)}>@http://HOST:PORT, got {cfg.router[:80]!r}")
    if cfg.fleet and not FLEET.fullmatch(cfg.fleet):
        raise PhoenixError("--fleet must be 1..64 letters, digits, spaces and ._(),- (a fleet's name)")
    return cfg


ROUTER_POLICIES = ("cache_aware", "power_of_two", "round_robin", "random", "consistent_hash")
ROUTER = re.compile(rf"(?:{'|'.join(ROUTER_POLICIES)})@https?://[A-Za-z0-9.\-\[\]:]{{1,100}}:[0-9]{{1,5}}/?")
FLEET = re.compile(r"[A-Za-z0-9 ._(),\-]{1,64}")


def stored_config(cfg: ServeConfig) -> dict:
    """The config as the run keeps it: the API key is a secret, so only whether one is set."""
    out = asdict(cfg)
    out["api_key"] = "set" if cfg.api_key else None
    return out
