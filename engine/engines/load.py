"""Phoenix's load sweep: the same prompts at each concurrency level against an OpenAI-compatible server, streamed, so
every request has its time to first token; each level is one run, its variants side by side.

A variant is what speculation does for a request: on Phoenix's server, ``none`` (off), ``auto`` (the server's
tuner) or ``k<N>`` (a fixed k), sent per request as ``"speculation"``; on another server, ``as-served`` (it ignores
per-request settings), or for llama.cpp and vLLM one managed server per ``--spec-types`` entry, which the sweep
starts and stops itself (engine.engines.managed). A level is a concurrency (``--concurrency``: c requests in flight)
or a request rate (``--request-rate``: arrivals with ``--burstiness``, at most ``--max-concurrency`` in flight), with
`vllm bench serve`'s figures per variant (engine.engines.arrivals: throughput, TTFT, TPOT, goodput against SLOs).
The prompts are cut into blocks (by default as many prompts as the level's concurrency; at a request rate, all of
them), and each block runs every variant in turn, the order rotating from block to block, so a slow drift of the
machine falls on every variant alike instead of on whichever ran last. A variant's throughput is its tokens over
the sum of its blocks' wall times. The first variant is the level's reference: every speedup of the run is against
it, per prompt, as on every other page. Each variant's output is compared with the reference's for the same prompt.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime

from db.entities import RequestRecord
from db.store import Store
from engine import runspec
from engine.decode.decoder import identity
from engine.engines import managed
from engine.engines.arrivals import arrival_times, figures, rates_of, slos_of
from engine.engines.client import stream_one
from engine.engines.config import LoadConfig
from engine.engines.llamacpp import LlamaCppConfig
from engine.engines.managed import Server
from engine.engines.protocol import (
    cache_scenario,
    cold,
    named,
    served_drafter,
    served_model,
    server_of,
    speculation,
)
from engine.engines.record import check_timeout, levels_of, stored
from engine.engines.rows import row_of
from engine.engines.server_cpu import cost, cpu_reader
from engine.engines.vllm import VllmConfig
from engine.engines.workload import as_sent, system_text
from engine.errors import PhoenixError
from engine.modes import load_spelling
from engine.prompts.sets import Prompt
from engine.prompts.sets import load as load_prompts
from engine.provenance import environment
from engine.queue.owned import owned


def variants_of(cfg: LoadConfig) -> list[str]:
    """Every setting checked, and the variants named, before a run is written or a server started."""
    rates = rates_of(cfg.request_rate)
    slos_of(cfg.goodput)
    levels_of(cfg.concurrency)
    if not 1 <= cfg.max_new_tokens <= 1 << 16:  # 0 once sent every request a 400 and ended a failed run with exit 0
        raise PhoenixError(f"--max-new-tokens must be in 1..65536, got {cfg.max_new_tokens}", field="max_new_tokens")
    if rates and not 0 < cfg.burstiness <= 100:  # NaN fails this too; it was refused only after a failed run
        raise PhoenixError(f"--burstiness must be in (0, 100], got {cfg.burstiness}", field="burstiness")
    if cfg.max_concurrency is not None and not rates:
        raise PhoenixError(
            "--max-concurrency caps the requests in flight at a --request-rate; with --concurrency levels each level "
            "is its own cap: pass --request-rate, or leave --max-concurrency out",
            field="max_concurrency",
        )
    check_timeout(cfg.timeout_s)
    if cfg.system_prompt:
        system_text(cfg.system_prompt)
    if not 1 <= cfg.tenants <= 1024 or (cfg.tenants > 1 and not cfg.system_prompt):
        raise PhoenixError(
            f"--tenants must be in 1..1024 and, above 1, come with --system-prompt (got {cfg.tenants})", field="tenants"
        )
    if not 0.0 <= cfg.temperature <= 2.0:  # NaN fails this too
        raise PhoenixError(f"--temperature must be in 0..2, got {cfg.temperature}", field="temperature")
    if cfg.max_concurrency is not None and not 1 <= cfg.max_concurrency <= 1024:
        raise PhoenixError(f"--max-concurrency must be in 1..1024, got {cfg.max_concurrency}", field="max_concurrency")
    if cfg.spec_types:
        return [s.variant for s in servers_of(cfg)]  # every variant checked before anything starts
    if cfg.block < 0:
        raise PhoenixError(f"--block must be 0 or more, got {cfg.block}", field="block")
    names = [load_spelling(v) for v in cfg.variants.split(",") if v.strip()]  # eagle3:3 is eagle3-k3
    if not names or len(set(names)) != len(names):
        raise PhoenixError(f"--variants must name each variant once, got {cfg.variants!r}")
    for v in names:
        if cfg.engine != "phoenix" and v != "as-served":
            raise PhoenixError(f"--variants: {cfg.engine} ignores per-request speculation; use as-served")
        if cfg.engine == "phoenix":
            speculation(v)
    return names


def servers_of(cfg: LoadConfig) -> list[Server]:
    """The servers a llama.cpp or vLLM sweep starts: one per variant, each able to batch every request of the
    highest level (llama.cpp: a slot each, 1,024 tokens of context a slot; vLLM: --max-num-seqs)."""
    if cfg.engine not in ("llamacpp", "vllm"):
        raise PhoenixError("--spec-types starts servers: it needs --engine llamacpp or vllm", field="spec_types")
    slots = max(max(levels_of(cfg.concurrency)), cfg.max_concurrency or 0, 1)
    if cfg.request_rate and cfg.max_concurrency is None:
        slots = max(slots, cfg.limit or 16)
    llama = LlamaCppConfig(model=cfg.gguf or cfg.target, draft_max=cfg.draft_max, parallel=slots, ctx=1024 * slots)
    v = VllmConfig(
        target=cfg.target, dtype=cfg.dtype, table=cfg.table, max_num_seqs=max(slots, 1), cores=cfg.vllm_cores
    )
    return managed.plan(cfg.engine, cfg.spec_types, cfg.port, llama, v, cfg.draft, cfg.head)


def _canonical(names: list[str], url: str, timeout_s: float) -> tuple[list[str], dict[str, str]]:
    """The variants as the server names them (auto -> eagle3-auto for a head); two spellings of one are refused."""
    drafter, k_max = served_drafter(url, timeout_s)
    for v in names:  # a k the server refuses: every request of the variant would get a 400 (k99 once did)
        k = (speculation(v) or {}).get("k")
        if k_max is not None and k is not None and k > k_max:
            raise PhoenixError(f"--variants {v}: the server takes k up to {k_max} (its --k-max); use a smaller k")
    if drafter is None:
        return names, dict.fromkeys(names, url)
    canonical = [named(v, drafter) for v in names]
    if len(set(canonical)) != len(canonical):
        raise PhoenixError(
            f"--variants names one variant twice ({', '.join(f'{v} = {c}' for v, c in zip(names, canonical) if v != c)}"
            f" on a server drafting with {drafter}): keep one"
        )
    return canonical, dict.fromkeys(canonical, url)


def blocks_of(prompts: list[Prompt], size: int) -> list[list[Prompt]]:
    return [prompts[i : i + size] for i in range(0, len(prompts), size)]


class Cut(Exception):
    """A block stopped (Ctrl-C, SIGTERM) part-way: what it had answered, by variant, so it can be kept."""

    def __init__(self, answered: dict[str, list]):
        self.answered = answered


def _send(
    api_key: str | None, url: str, model: str, text: str, max_tokens: int, chat: bool, spec, timeout_s: float,
    abort=None, extra: dict | None = None,
) -> dict:  # fmt: skip
    """One streamed request, with the sweep's API key where it has one."""
    if api_key:
        return stream_one(url, model, text, max_tokens, chat, spec, timeout_s, abort, extra, api_key)
    return stream_one(url, model, text, max_tokens, chat, spec, timeout_s, abort, extra)


def send_block(
    cfg: LoadConfig, model: str, block: list[Prompt], lv: Level, url: str, spec: dict | None, abort, pass_id: str = ""
):
    """One variant's requests for a block: ``lv.c`` at a time, or sent at their arrival times with at most
    ``lv.c`` in flight; (wall seconds, (prompt, result) pairs in order). On Ctrl-C, ``abort`` ends the requests in
    flight at their next chunk and Cut carries the ones already answered. ``pass_id`` names this variant's pass at
    this level: the cold protocol salts each request with it."""
    extra = {"return_token_ids": True} if cfg.engine == "vllm" else None
    times = [0.0] * len(block) if lv.rate is None else arrival_times(len(block), lv.rate, cfg.burstiness, cfg.seed)
    start = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=lv.c)
    futures = []
    try:
        for p, at in zip(block, times):
            wait = start + at - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            text, sent_extra = as_sent(cfg, p, extra)
            sent_extra = (sent_extra or {}) | cold(cfg, pass_id, p) or None
            args = (cfg.max_new_tokens, cfg.chat, spec, cfg.timeout_s, abort, sent_extra)
            futures.append(pool.submit(_send, cfg.api_key, url, model, text, *args))
        results = [f.result() for f in futures]
    except KeyboardInterrupt:
        abort.set()
        pool.shutdown(wait=True, cancel_futures=True)
        done = [(p, f.result()) for p, f in zip(block, futures) if f.done() and not f.cancelled() and not f.exception()]
        raise Cut({"": [(p, r) for p, r in done if r["error"] != "the sweep was stopped"]}) from None
    pool.shutdown()
    return time.perf_counter() - start, list(zip(block, results))


@dataclass(frozen=True)
class Level:
    c: int  # requests in flight at most
    rate: float | None = None  # requests per second (inf: all at once); None: a concurrency level

    @property
    def label(self) -> str:
        return f"c={self.c}" if self.rate is None else f"rate={self.rate:g}" + (f" cap={self.c}")


def levels(cfg: LoadConfig, n_prompts: int) -> list[Level]:
    if not cfg.request_rate:
        return [Level(c) for c in levels_of(cfg.concurrency)]
    cap = cfg.max_concurrency or max(n_prompts, 1)
    return [Level(cap, r) for r in rates_of(cfg.request_rate)]


def level(
    cfg: LoadConfig,
    model: str,
    prompts: list[Prompt],
    lv: Level,
    order: list[str],
    urls: dict[str, str],
    on_block,
    cpu_of: dict[str, Callable[[], float | None]] | None = None,
    sitting: str = "",
):
    """Every variant at one level, block by block, the order rotating; ``on_block`` gets each block's (prompt,
    result) pairs by variant as soon as the block ends (or is cut). Returns each variant's wall time, and per
    variant each block's (wall seconds, output tokens, the server's CPU seconds or None): paired blocks, every
    variant's on the same prompts, give a ratio between two settings its interval (engine.analysis.sweeps); the CPU
    seconds (``cpu_of[variant]`` read before and after: the server's process, where it can be read) give its cost."""
    walls = dict.fromkeys(order, 0.0)
    per_block: dict[str, list[list[float | None]]] = {v: [] for v in order}
    abort = threading.Event()
    size = max(cfg.block, lv.c) if lv.rate is None else (cfg.block or len(prompts))
    for b, block in enumerate(blocks_of(prompts, size)):
        turn = order[b % len(order) :] + order[: b % len(order)]
        got: dict[str, list] = {}
        for variant in turn:
            spec = None if cfg.spec_types else speculation(variant)
            read = (cpu_of or {}).get(variant) or (lambda: None)
            before = read()
            try:
                wall, got[variant] = send_block(
                    cfg, model, block, lv, urls[variant], spec, abort, f"{sitting}/{variant}/{lv.label}"
                )
            except Cut as cut:
                on_block({**got, variant: cut.answered[""]})
                raise KeyboardInterrupt from None
            walls[variant] += wall
            after = read()
            cpu = round(after - before, 3) if before is not None and after is not None else None
            per_block[variant].append([round(wall, 4), sum(_out_tokens(r) for _, r in got[variant]), cpu])
        on_block(got)
    return walls, per_block


def _out_tokens(r: dict) -> int:
    """An answer's output tokens as the server counted them (0 for a failed one)."""
    if r.get("error") is not None:
        return 0
    n = r.get("output_tokens", (r.get("usage") or {}).get("completion_tokens", 0))
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0


def sweep(store: Store, cfg: LoadConfig, say: Callable[[str], None] = print) -> list[int]:
    """One run per level; returns their ids. Managed servers are started first and stopped at the end (only those
    this sweep started: one already running for the same settings is left running)."""
    cfg.api_key = cfg.api_key or os.environ.get("PHOENIX_API_KEY") or None
    names = variants_of(cfg)
    prompts = [p for p in load_prompts(cfg.prompts, cfg.limit) if p.parent is None]
    plan = servers_of(cfg) if cfg.spec_types else []
    with managed.running(plan) as started:
        urls = {v: s["url"] for v, s in zip(names, started)} if plan else dict.fromkeys(names, cfg.url)
        pids = {v: s.get("pid") for v, s in zip(names, started)} if plan else {}
        model = cfg.model or served_model(urls[names[0]], cfg.timeout_s, cfg.api_key)
        extra: dict = {"servers": [s.described(i) | {"command": i["command"]} for s, i in zip(plan, started)]}
        extra = {k: v for k, v in extra.items() if v}
        if cfg.engine == "phoenix" and not plan:
            names, urls = _canonical(names, cfg.url, cfg.timeout_s)
            extra["server"] = server_of(cfg.url, cfg.timeout_s)
        # the levels of one invocation are one sweep: the Sweeps page draws them as one picture
        extra["sweep"] = {"id": f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}", "engine": cfg.engine}
        cpu_of = {v: cpu_reader(urls[v], pids.get(v), cfg.api_key) for v in names}
        if cfg.warmup and prompts:  # a server's first requests fill its caches: one each, timed, kept out of figures
            extra["warmup_s"] = {v: _warm(cfg, model, prompts[0], urls[v], v) for v in names}
        gone = managed.died(plan, started)
        if gone:
            raise PhoenixError("; ".join(gone) + ": no level was run; leave that variant out of --spec-types")
        return [
            _level_run(
                store,
                cfg,
                model,
                prompts,
                lv,
                names,
                names if i % 2 == 0 else names[::-1],
                urls,
                extra | {"level_index": i},
                say,
                cpu_of,
            )
            for i, lv in enumerate(levels(cfg, len(prompts)))
        ]


def _warm(cfg: LoadConfig, model: str, prompt: Prompt, url: str, variant: str) -> float:
    spec = None if cfg.spec_types else speculation(variant)
    text, extra = as_sent(cfg, prompt, None)  # as a deployment runs: its system prompt seen once already
    extra = (extra or {}) | cold(cfg, f"warm-up/{uuid.uuid4().hex}/{variant}", prompt) or None
    return _send(cfg.api_key, url, model, text, cfg.max_new_tokens, cfg.chat, spec, cfg.timeout_s, None, extra)[
        "latency_s"
    ]


def _level_run(
    store: Store,
    cfg: LoadConfig,
    model: str,
    prompts: list[Prompt],
    lv: Level,
    names: list[str],
    order: list[str],
    urls: dict[str, str],
    extra: dict,
    say: Callable[[str], None],
    cpu_of: dict[str, Callable[[], float | None]] | None = None,
) -> int:
    """One level's run; ``names`` are the variants (the first the reference), ``order`` this level's turn."""
    run = store.create_run(
        f"{cfg.name or f'{cfg.engine} load {cfg.prompts}'} {lv.label}",
        {
            "load": stored(cfg),
            "level": lv.c,
            "request_rate": None if lv.rate is None else ("inf" if math.isinf(lv.rate) else lv.rate),
            "variants": names,
            "order": order,
            "block": max(cfg.block, lv.c) if lv.rate is None else (cfg.block or len(prompts)),
            "cache_scenario": cache_scenario(cfg),
            **extra,
            "environment": environment(),
        },
        model,
        None,
        len(prompts) * len(names),
    )
    store.merge_config(run.id, runspec.recorded(run, names))  # the record of what ran, kept with the run
    written: list[RequestRecord] = []
    k_of = {s.variant: s.draft_length for s in servers_of(cfg)} if cfg.spec_types else {}

    def keep(got: dict[str, list]) -> None:
        """A block's answers, recorded at once: the reference's rows first, each other one checked against the
        reference's output for its prompt (by token ids where the engine gave them, else by text)."""
        reference = {p.id: r for p, r in got.get(names[0], []) if r["error"] is None}
        records: list[RequestRecord] = []
        for variant in [v for v in names if v in got]:
            for p, r in got[variant]:
                rec = row_of(run.id, len(written) + len(records), _mode(cfg, variant, lv), p, r)
                if variant in k_of:
                    rec.k = k_of[variant]
                if variant != names[0] and rec.error is None and p.id in reference:
                    judge(rec, r, reference[p.id])
                records.append(rec)
        store.add_requests(records, progress=(run.id, len(written) + len(records)))
        written.extend(records)

    with owned(store, run.id):  # heartbeat; Ctrl-C or SIGTERM: interrupted, answered blocks kept; error: failed
        # the run's own id in every pass key: a level repeated in one sweep (--request-rate 4,4,4) is a new pass, not
        # a re-send of the prompts the one before it left in the server's cache
        sitting = f"{(extra.get('sweep') or {}).get('id') or uuid.uuid4().hex}/{run.id}"
        walls, per_block = level(cfg, model, prompts, lv, order, urls, keep, cpu_of, sitting)
    slos = slos_of(cfg.goodput)
    per_variant = {
        v: figures([r for r in written if r.mode.startswith(f"{cfg.engine}-{v}_")], walls[v], slos)
        | cost(per_block.get(v, []))
        for v in names
    }
    store.merge_config(run.id, {"wall_s": walls, "figures": per_variant, "blocks": per_block})
    failed = sum(r.error is not None for r in written)
    first_error = next((r.error for r in written if r.error is not None), None)
    store.set_status(run.id, "failed" if failed == len(written) else "done", first_error)
    say(
        f"{lv.label}: run {run.id}, "
        + ", ".join(
            f"{v} {f['output_throughput']:.1f} tok/s ({f['answered']}/{f['requests']} answered)"
            for v, f in per_variant.items()
        )
    )
    return run.id


def _mode(cfg: LoadConfig, variant: str, lv: Level) -> str:
    return f"{cfg.engine}-{variant}_c{lv.c}"


def judge(rec: RequestRecord, answer: dict, reference: dict) -> None:
    """Identical to the reference's output: by token ids where the engine gave them (the first differing position
    is kept), else by text."""
    ids, ref = answer.get("token_ids"), reference.get("token_ids")
    if ids is not None and ref is not None:
        rec.identical, rec.diverged_at = identity(ids, ref)
    else:
        rec.identical = rec.output_text == reference["text"]
