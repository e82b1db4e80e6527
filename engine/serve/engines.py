"""llama.cpp side by side with itself: one local llama-server per speculation type, started together, and every
prompt sent to each in turn (interleaved, concurrency 1), so the ratios against its target-only server come from
one run on one machine state. Modes are llamacpp-<spec type>_c1; llamacpp-none_c1 is the reference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import cast, get_args

from db.store import Store
from engine.bench.setup import environment
from engine.errors import PhoenixError
from engine.prompts.sets import load as load_prompts
from engine.queue.owned import owned
from engine.serve import llamacpp
from engine.serve.client import GREEDY, one_request
from engine.serve.llamacpp import LlamaCppConfig, SpecType
from engine.serve.record import client_for, request_row


@dataclass
class EnginesConfig:
    spec_types: str = "none,ngram-simple,ngram-mod"  # one llama-server each; none is the reference
    model: str = "smollm2"  # the GGUF every server serves (see llamacpp start --model)
    prompts: str = "humaneval-test"
    limit: int | None = 20
    max_new_tokens: int = 96
    chat: bool = True  # through the server's chat template, as Phoenix's --prompt-format auto does for SmolLM2
    draft_max: int = 8  # --spec-draft-n-max for the speculating servers
    port: int = 8100  # the first server's port; the next ones count up
    warmup: bool = True  # one request per server before the clock, stored as warm-up
    name: str = ""


def servers(cfg: EnginesConfig) -> list[LlamaCppConfig]:
    types = [t.strip() for t in cfg.spec_types.split(",") if t.strip()]
    if not types or types[0] != "none":
        raise PhoenixError("--spec-types must start with none, the target-only reference", field="spec_types")
    bad = [t for t in types if t not in get_args(SpecType) or t.startswith("draft-")]
    if bad:
        raise PhoenixError(
            f"--spec-types: unknown {', '.join(bad)}; use none, ngram-simple, ngram-mod, ngram-map-k or ngram-cache",
            field="spec_types",
        )
    return [
        LlamaCppConfig(
            model=cfg.model, spec_type=cast(SpecType, t), draft_max=cfg.draft_max, port=cfg.port + i, parallel=1
        )
        for i, t in enumerate(types)
    ]


def engines(store: Store, cfg: EnginesConfig, say: Callable[[str], None] = print) -> int:
    """One run: every prompt through every server in turn; each server's counter deltas in the run's config."""
    configs = servers(cfg)
    prompts = [p for p in load_prompts(cfg.prompts, cfg.limit) if p.parent is None]
    started: list[dict] = []
    ours: list[LlamaCppConfig] = []  # what this run started, and so stops: a server already running is left alone
    run_id = None
    try:
        for c in configs:
            started.append(llamacpp.start(c))
            if started[-1]["state"] == "started":
                ours.append(c)
        clients = [client_for(info["url"], cfg.model) for info in started]
        identity = clients[0].identity("llamacpp")
        run_id = store.create_run(
            cfg.name or f"llama.cpp side by side: {cfg.spec_types}",
            {
                "serve_engines": asdict(cfg),
                "engine": identity,
                "sampling": GREEDY,
                "servers": [{"spec_type": c.spec_type, "command": i["command"]} for c, i in zip(configs, started)],
                "environment": environment(),
            },
            cfg.model,
            None,
            len(prompts) * len(configs),
        ).id
        with owned(store, run_id):  # heartbeat; Ctrl-C or SIGTERM: interrupted; an error: failed
            modes = [f"llamacpp-{c.spec_type}_c1" for c in configs]
            seq = 0
            if cfg.warmup:  # each server's first request loads its caches: stored, left out of every figure
                warm = [
                    request_row(run_id, seq + i, m, 0, one_request(cl, prompts[0], cfg.max_new_tokens, cfg.chat))
                    for i, (m, cl) in enumerate(zip(modes, clients))
                ]
                for rec in warm:
                    rec.warmup = True
                store.add_requests(warm)
                seq += len(warm)
            before = [cl.metrics() for cl in clients]
            for n, prompt in enumerate(prompts, 1):
                recs = []
                for mode, c, cl in zip(modes, configs, clients):
                    recs.append(
                        request_row(
                            run_id,
                            seq,
                            mode,
                            c.draft_max if c.spec_type != "none" else 0,
                            one_request(cl, prompt, cfg.max_new_tokens, cfg.chat),
                        )
                    )
                    seq += 1
                for rec in recs[1:]:  # greedy: every server must give the target-only server's text
                    if rec.error is None and recs[0].error is None:  # a failure is never "identical"
                        rec.identical = rec.output_text == recs[0].output_text
                store.add_requests(recs, progress=(run_id, n * len(configs)))
                say(
                    f"prompt {n}/{len(prompts)} {prompt.id}: "
                    + ", ".join(f"{r.mode} {r.tokens_per_s:.1f} tok/s" for r in recs)
                )
            levels = [
                {
                    "concurrency": 1,
                    "spec_type": c.spec_type,
                    "requests": len(prompts),
                    "failed": sum(1 for r in store.requests(run_id) if r.mode == m and r.error),
                    "wall_s": 0.0,
                    "throughput_tokens_per_s": 0.0,
                    **cl.metrics().minus(b).summary(),
                }
                for c, m, cl, b in zip(configs, modes, clients, before)
            ]
            store.merge_config(run_id, {"server_counters": levels})
            if all(level["failed"] == level["requests"] for level in levels):  # nothing to compare: not "done"
                first = next((r.error for r in store.requests(run_id) if r.error and not r.warmup), None)
                raise PhoenixError(f"every request failed; the first: {first}")
        store.set_status(run_id, "done")
        return run_id
    finally:
        for c in ours:
            llamacpp.stop(c)
