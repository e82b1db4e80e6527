"""The settings of the commands that drive other engines (sweeps, watches, side-by-side runs, load sweeps, the
cross-check, GGUF export): plain dataclasses that import neither torch nor the store, so `--help` answers at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from engine.modes import DEFAULT_MAX_BATCH

EngineName = Literal["auto", "vllm", "sglang", "llamacpp", "phoenix"]


@dataclass
class ExportConfig:
    out: str = ""  # the GGUF to write; empty: data/gguf/<name>-<source hash>.gguf
    tokenizer: str = "auto"  # whose tokenizer: auto (the target's GGUF the draft was made for), a fetched model's name
    # (its GGUF, key for key), a .gguf file, or hf (the folder's own tokenizer.json)
    dtype: Literal["f16", "f32"] = "f16"  # matrices; norms and d2t keep f32 and int64


@dataclass
class SweepConfig:
    url: str = "http://127.0.0.1:8000"  # the OpenAI-compatible server (vLLM, SGLang or llama.cpp's llama-server)
    engine: EngineName = "auto"  # which engine serves it; auto asks its /version, /props or /get_server_info
    model: str = ""  # the served model name, as the server knows it
    prompts: str = "humaneval-test"
    limit: int | None = 50
    max_new_tokens: int = 128
    concurrency: str = "1,4,16"  # levels, each sending every prompt
    timeout_s: float = 600.0
    name: str = ""


@dataclass
class WatchConfig:
    url: str = "http://127.0.0.1:8000"
    engine: EngineName = "auto"  # which engine serves it; auto asks the server
    model: str = ""  # label only: the counters are summed over what the server reports
    interval_s: float = 5.0
    samples: int | None = None  # stop after this many intervals; None: until Ctrl-C
    name: str = ""


@dataclass
class CrossConfig:
    url: str = "http://127.0.0.1:8000"  # the server both clients load
    engine: Literal["phoenix", "llamacpp", "vllm", "sglang"] = "vllm"  # which server it is: names Phoenix's modes
    model: str = ""  # the served model name; default: the first /v1/models lists
    tokenizer: str = ""  # the folder vLLM's client counts tokens with (a Phoenix name or a folder); empty: the
    # served model's own
    prompts: str = "humaneval-test"
    limit: int = 16
    max_new_tokens: int = 64
    concurrency: int = 4
    rounds: int = 2
    timeout_s: float = 600.0
    clients: str = "vllm"  # the field's clients beside Phoenix's: vllm (vllm bench serve), guidellm (GuideLLM's)


@dataclass
class EnginesConfig:
    engine: Literal["llamacpp", "vllm"] = "llamacpp"  # which engine's servers to start
    spec_types: str = ""  # one server each, none first; empty: llama.cpp none,ngram-simple,ngram-mod, vLLM every method
    model: str = ""  # llama.cpp: the GGUF every server serves (see llamacpp start --model); empty: --target's
    target: str = "smollm2"  # vLLM: the model folder every server serves (a Phoenix name or a folder)
    dtype: Literal["bfloat16", "float32"] = "bfloat16"  # vLLM's --dtype
    table: str = ""  # vLLM: the per-batch-size k table the <method>-table variants use (see vllm start --table)
    prompts: str = "humaneval-test"
    limit: int | None = 20
    limit_per_column: int | None = field(
        default=None, metadata={"aliases": ["--limit-per-category"]}
    )  # Spec-Bench: the first N questions of each leaderboard column (first turns: a server keeps no conversation)
    max_new_tokens: int = 96
    chat: bool = True  # through the server's chat template, as Phoenix's --prompt-format auto does for SmolLM2
    draft_max: int = 8  # llama.cpp: --spec-draft-n-max for the speculating servers (a type's -k<N> sets its own)
    draft: str = ""  # the draft model: a Phoenix name or folder (llama.cpp: exported to GGUF once); empty: the
    # target's own (zoo list), and a variant that needs one is refused where it has none
    head: str = ""  # the EAGLE-3 head: a Phoenix name or folder (llama.cpp: exported to GGUF once); empty: the target's
    port: int = 8100  # the first server's port; the next ones count up
    warmup: bool = True  # one request per server before the clock, stored as warm-up
    name: str = ""


@dataclass
class LoadConfig:
    url: str = "http://127.0.0.1:8000"  # the OpenAI-compatible server: Phoenix's (`serve`) or another
    engine: Literal["phoenix", "llamacpp", "vllm", "sglang"] = "phoenix"  # which server answers; names the modes
    model: str = ""  # the served model name; default: the first the server's /v1/models lists
    prompts: str = "humaneval-test"
    limit: int | None = 16
    max_new_tokens: int = 96
    chat: bool = True  # through the server's chat template (/v1/chat/completions); off: /v1/completions
    concurrency: str = "1,2,4,8,16"  # levels: each one run, every prompt sent once per variant
    request_rate: str = ""  # levels instead, in requests/s ("0.5,1,2,inf"): arrivals as vllm bench serve sends them
    burstiness: float = 1.0  # the arrivals' gamma shape: 1 is Poisson, below 1 burstier
    max_concurrency: int | None = None  # with --request-rate: at most this many in flight (vllm bench serve's cap)
    goodput: str = ""  # SLOs in ms, "ttft:2000,tpot:100": goodput counts the requests that meet every one
    seed: int = 0  # the arrivals' random seed
    api_key: str | None = None  # sent as 'Authorization: Bearer KEY' (also PHOENIX_API_KEY); never stored
    variants: str = "none,auto"  # Phoenix: none, auto, k<N>, <drafter>[-k<N>]; first: the reference. Else as-served
    cache: Literal["cold", "system", "warm"] = "cold"  # cold: no request's prompt is one its server has seen (a
    # cache_salt of its own per request for Phoenix and vLLM, cache_prompt off for llama.cpp); system: one salt per
    # pass, so a pass's requests share its --system-prompt as a deployment's do and nothing an earlier pass sent;
    # warm: prompts re-sent as they come, each server's cache serving what it saw (labelled so on every page)
    timeout_s: float = 600.0
    name: str = ""  # run names get ' c=<level>' (or ' rate=<r>') appended
    block: int = 0  # prompts per block, each run by every variant in turn; 0 (or below the level): the level's c
    spec_types: str = ""  # llama.cpp or vLLM: one managed server per variant, none first; they replace --variants
    gguf: str = ""  # llama.cpp: what those servers serve (see llamacpp start --model); empty: --target's
    target: str = "smollm2"  # vLLM: what those servers serve (a Phoenix name or a model folder)
    dtype: Literal["bfloat16", "float32"] = "bfloat16"  # vLLM's --dtype
    vllm_cores: Literal["all", "default"] = "all"  # vLLM: all computes on every core Phoenix's server uses; default
    # keeps vLLM's own binding (one core reserved for its front end), and the runs say the compute was unequal
    table: str = ""  # vLLM: the per-batch-size k table of the <method>-table variants ("1-2:3,3-16:0")
    port: int = 8100  # the first managed server's port on 127.0.0.1; the next ones count up
    draft_max: int = 8  # llama.cpp: their --spec-draft-n-max (a variant's -k<N> sets its own)
    draft: str = ""  # the draft model: a Phoenix name or folder (llama.cpp: exported to GGUF once); empty: the
    # target's own (zoo list), and a variant that needs one is refused where it has none
    head: str = ""  # the EAGLE-3 head: a Phoenix name or folder (llama.cpp: exported to GGUF once); empty: the target's
    warmup: bool = True  # one request per variant before the first level, timed in its config, in no figure
    temperature: float = 0.0  # above 0: sampled requests, each prompt with one seed (from --seed) in every variant
    tenants: int = 1  # with --system-prompt: that many deployments, each prompt sent with its tenant's system
    # prompt (their first lines differ): the prefixes a router's cache-aware policy can keep apart
    system_prompt: str = ""  # a text file sent before every prompt (the system message, or the raw prompt's start):
    # one shared prefix, as a deployment's system prompt is, for a server's prefix cache


@dataclass
class PlanConfig:
    source: str = (
        ""  # Phoenix's served runs (a replica's own live runs, ids comma-separated) whose steps price a replica; one
        # measured at each thread count prices the replicas that run with it
    )
    rate: str = "1"  # request rates in requests/s, comma-separated (inf: every request at once)
    replicas: str = "1,2,4"  # fleet sizes to price
    slo: str = ""  # "ttft:MS,tpot:MS": the plan names the fewest replicas meeting both at the median
    max_batch: int = DEFAULT_MAX_BATCH  # each replica's --max-batch
    requests: int = 64  # requests per simulated sitting (the median of 20 sittings is given)
    same_machine: bool = True  # the replicas share this machine's cores (each priced at its share of threads)
    validate: str = ""  # LOADRUN:REPLICAS,...: `engines load` runs measured through a fleet of that many replicas
    shared_prefix: int = 0  # prompt tokens every planned request shares (a system prompt): priced by each
    # replica's prefix cache (the source's --prefix-cache-gb); 0: every prompt prefilled whole
