"""Phoenix's load sweep: the same prompts at each concurrency level against an OpenAI-compatible server, streamed, so
every request has its time to first token; each level is one run, its variants side by side.

A variant is what speculation does for a request: on Phoenix's server, ``none`` (off), ``auto`` (the server's
tuner) or ``k<N>`` (a fixed k), sent per request as ``"speculation"``; on another server, ``as-served`` (it ignores
per-request settings), or for llama.cpp one managed ``llama-server`` per ``--spec-types`` entry, which the sweep
starts and stops itself. The prompts are cut into blocks (by default as many prompts as the level's concurrency),
and each block runs every variant in turn, the order rotating from block to block, so a slow drift of the machine
falls on every variant alike instead of on whichever ran last. A variant's throughput is its tokens over the sum of
its blocks' wall times. The first variant is the level's reference: every speedup of the run is against it, per
prompt, as on every other page. Each variant's output is compared with the reference's for the same prompt.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Literal

from db.entities import RequestRecord
from db.store import Store
from engine.bench.setup import environment
from engine.engines import llamacpp
from engine.engines.client import stream_one
from engine.engines.gguf_export import gguf_of
from engine.engines.llamacpp import LlamaCppConfig
from engine.engines.record import levels_of
from engine.engines.rows import row_of
from engine.errors import PhoenixError
from engine.prompts.sets import Prompt
from engine.prompts.sets import load as load_prompts
from engine.queue.owned import owned


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
    variants: str = "none,auto"  # Phoenix: none, auto, k<N>, <drafter>[-k<N>]; first: the reference. Else as-served
    timeout_s: float = 600.0
    name: str = ""  # run names get ' c=<level>' appended
    block: int = 0  # prompts per block, each run by every variant in turn; 0 (or below the level): the level's c
    spec_types: str = ""  # llama.cpp: one managed llama-server per type, none first; they replace --variants
    gguf: str = "smollm2"  # what those servers serve (see llamacpp start --model)
    port: int = 8100  # the first managed server's port on 127.0.0.1; the next ones count up
    draft_max: int = 8  # their --spec-draft-n-max (a variant's -k<N> sets its own)
    draft: str = "smollm2-draft"  # draft-simple's draft: a named draft model (exported to GGUF once) or a .gguf
    head: str = "smollm2-eagle3"  # draft-eagle3's head: a named EAGLE-3 head (exported to GGUF once) or a .gguf
    warmup: bool = True  # one request per variant before the first level, timed in its config, in no figure


def variants_of(cfg: LoadConfig) -> list[str]:
    if cfg.spec_types:
        managed(cfg)  # every variant checked before anything starts
        return [t.strip() for t in cfg.spec_types.split(",") if t.strip()]
    if cfg.block < 0:
        raise PhoenixError(f"--block must be 0 or more, got {cfg.block}", field="block")
    names = [v.strip() for v in cfg.variants.split(",") if v.strip()]
    if not names or len(set(names)) != len(names):
        raise PhoenixError(f"--variants must name each variant once, got {cfg.variants!r}")
    for v in names:
        if cfg.engine != "phoenix" and v != "as-served":
            raise PhoenixError(f"--variants: {cfg.engine} ignores per-request speculation; use as-served")
        if cfg.engine == "phoenix":
            speculation(v)
    return names


def managed(cfg: LoadConfig) -> list[LlamaCppConfig]:
    """The llama-servers a llama.cpp sweep starts: one per speculation type, each with a slot per request of the
    highest level (so the server batches them) and 1,024 tokens of context a slot."""
    if cfg.engine != "llamacpp":
        raise PhoenixError("--spec-types starts llama-servers: it needs --engine llamacpp", field="spec_types")
    types = [t.strip() for t in cfg.spec_types.split(",") if t.strip()]
    if not types or types[0] != "none" or len(set(types)) != len(types):
        raise PhoenixError("--spec-types must start with none and name each variant once", field="spec_types")
    slots = max(levels_of(cfg.concurrency))
    base = LlamaCppConfig(model=cfg.gguf, draft_max=cfg.draft_max, parallel=slots, ctx=1024 * slots)
    out = []
    for i, text in enumerate(types):  # llamacpp.variant: a spec type and its settings (draft-eagle3-k2)
        c = replace(llamacpp.variant(text, base), port=cfg.port + i)
        if c.spec_type in ("draft-simple", "draft-eagle3"):
            c.draft_model = str(gguf_of(cfg.head if c.spec_type == "draft-eagle3" else cfg.draft))
        out.append(c)
    return out


# none | auto | k<N> (the server's drafter) | <drafter> (its tuner's k) | <drafter>-k<N>
_VARIANT = re.compile(r"^(?:none|auto|k(?P<k>[0-9]+)|(?P<drafter>model|ngram|suffix|eagle3)(?:-k(?P<dk>[0-9]+))?)$")


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


def served_model(url: str, timeout_s: float) -> str:
    try:
        with urllib.request.urlopen(url.rstrip("/").removesuffix("/v1") + "/v1/models", timeout=timeout_s) as r:
            return json.loads(r.read())["data"][0]["id"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError) as exc:
        raise PhoenixError(f"cannot read {url}/v1/models ({exc}); start the server or fix --url") from None


def blocks_of(prompts: list[Prompt], size: int) -> list[list[Prompt]]:
    return [prompts[i : i + size] for i in range(0, len(prompts), size)]


class Cut(Exception):
    """A block stopped (Ctrl-C, SIGTERM) part-way: what it had answered, by variant, so it can be kept."""

    def __init__(self, answered: dict[str, list]):
        self.answered = answered


def send_block(cfg: LoadConfig, model: str, block: list[Prompt], c: int, url: str, spec: dict | None, abort):
    """One variant's requests for a block, ``c`` at a time: (wall seconds, (prompt, result) pairs in order). On
    Ctrl-C, ``abort`` ends the requests in flight at their next chunk and Cut carries the ones already answered."""
    start = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=c)
    args = (cfg.max_new_tokens, cfg.chat, spec, cfg.timeout_s, abort)
    futures = [pool.submit(stream_one, url, model, p.text, *args) for p in block]
    try:
        results = [f.result() for f in futures]
    except KeyboardInterrupt:
        abort.set()
        pool.shutdown(wait=True, cancel_futures=True)
        done = [(p, f.result()) for p, f in zip(block, futures) if f.done() and not f.cancelled() and not f.exception()]
        raise Cut({"": [(p, r) for p, r in done if r["error"] != "the sweep was stopped"]}) from None
    pool.shutdown()
    return time.perf_counter() - start, list(zip(block, results))


def level(cfg: LoadConfig, model: str, prompts: list[Prompt], c: int, order: list[str], urls: dict[str, str], on_block):
    """Every variant at concurrency ``c``, block by block, the order rotating; ``on_block`` gets each block's
    (prompt, result) pairs by variant as soon as the block ends (or is cut). Returns each variant's wall time."""
    walls = dict.fromkeys(order, 0.0)
    abort = threading.Event()
    for b, block in enumerate(blocks_of(prompts, max(cfg.block, c))):
        turn = order[b % len(order) :] + order[: b % len(order)]
        got: dict[str, list] = {}
        for variant in turn:
            spec = None if cfg.spec_types else speculation(variant)
            try:
                wall, got[variant] = send_block(cfg, model, block, c, urls[variant], spec, abort)
            except Cut as cut:
                on_block({**got, variant: cut.answered[""]})
                raise KeyboardInterrupt from None
            walls[variant] += wall
        on_block(got)
    return walls


def sweep(store: Store, cfg: LoadConfig, say: Callable[[str], None] = print) -> list[int]:
    """One run per concurrency level; returns their ids. Managed llama-servers are started first and stopped at the
    end (only those this sweep started: one already running for the same settings is left running)."""
    levels, names = levels_of(cfg.concurrency), variants_of(cfg)
    prompts = [p for p in load_prompts(cfg.prompts, cfg.limit) if p.parent is None]
    configs = managed(cfg) if cfg.spec_types else []
    started: list[LlamaCppConfig] = []
    try:
        servers = []
        for server in configs:
            servers.append(llamacpp.start(server))
            if servers[-1]["state"] == "started":
                started.append(server)
        urls = {v: s["url"] for v, s in zip(names, servers)} if configs else dict.fromkeys(names, cfg.url)
        model = cfg.model or served_model(urls[names[0]], cfg.timeout_s)
        extra: dict = {
            "servers": [
                {"spec_type": c.spec_type, "variant": v, "command": s["command"]}
                for c, s, v in zip(configs, servers, names)
            ]
        }
        extra = {k: v for k, v in extra.items() if v}
        if cfg.warmup and prompts:  # a server's first requests fill its caches: one each, timed, kept out of figures
            extra["warmup_s"] = {v: _warm(cfg, model, prompts[0], urls[v], v) for v in names}
        return [
            _level_run(store, cfg, model, prompts, c, names if i % 2 == 0 else names[::-1], urls, extra, say)
            for i, c in enumerate(levels)
        ]
    finally:
        for server in started:
            llamacpp.stop(server)


def _warm(cfg: LoadConfig, model: str, prompt: Prompt, url: str, variant: str) -> float:
    spec = None if cfg.spec_types else speculation(variant)
    return stream_one(url, model, prompt.text, cfg.max_new_tokens, cfg.chat, spec, cfg.timeout_s)["latency_s"]


def _level_run(
    store: Store,
    cfg: LoadConfig,
    model: str,
    prompts: list[Prompt],
    c: int,
    order: list[str],
    urls: dict[str, str],
    extra: dict,
    say: Callable[[str], None],
) -> int:
    names = variants_of(cfg)
    run = store.create_run(
        f"{cfg.name or f'{cfg.engine} load {cfg.prompts}'} c={c}",
        {
            "load": asdict(cfg),
            "level": c,
            "variants": names,
            "order": order,
            "block": max(cfg.block, c),
            **extra,
            "environment": environment(),
        },
        model,
        None,
        len(prompts) * len(names),
    )
    written: list[RequestRecord] = []

    def keep(got: dict[str, list]) -> None:
        """A block's answers, recorded at once: the reference's rows first, each other one checked against the
        reference's text for its prompt (where the reference answered it)."""
        reference = {p.id: r["text"] for p, r in got.get(names[0], []) if r["error"] is None}
        records: list[RequestRecord] = []
        for variant in [v for v in names if v in got]:
            k = cfg.draft_max if cfg.spec_types and variant != "none" else None
            for p, r in got[variant]:
                rec = row_of(run.id, len(written) + len(records), f"{cfg.engine}-{variant}_c{c}", p, r, k)
                if variant != names[0] and rec.error is None and p.id in reference:
                    rec.identical = r["text"] == reference[p.id]
                records.append(rec)
        store.add_requests(records, progress=(run.id, len(written) + len(records)))
        written.extend(records)

    with owned(store, run.id):  # heartbeat; Ctrl-C or SIGTERM: interrupted, answered blocks kept; error: failed
        walls = level(cfg, model, prompts, c, order, urls, keep)
    store.merge_config(run.id, {"wall_s": walls})
    failed = sum(r.error is not None for r in written)
    first_error = next((r.error for r in written if r.error is not None), None)
    store.set_status(run.id, "failed" if failed == len(written) else "done", first_error)
    say(f"c={c}: run {run.id}, " + ", ".join(f"{v} {walls[v]:.1f} s" for v in names) + f", {failed} failed")
    return run.id
