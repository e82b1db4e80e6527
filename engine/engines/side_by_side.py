"""An engine side by side with itself: one local server per speculation variant (llama.cpp's llama-server or vLLM),
started together, and every prompt sent to each in turn (interleaved, concurrency 1), so the ratios against its
speculation-off server come from one run on one machine state. Modes are <engine>-<variant>_c1; <engine>-none_c1 is
the reference, and every other output is checked against its output for the same prompt (vLLM's by token ids, with
the first differing position; llama.cpp's by text)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from db.store import Store
from engine import runspec
from engine.engines import llamacpp, managed
from engine.engines.client import GREEDY, one_request
from engine.engines.config import EnginesConfig
from engine.engines.llamacpp import LlamaCppConfig
from engine.engines.load import judge
from engine.engines.managed import Server
from engine.engines.protocol import cold_request
from engine.engines.record import client_for, request_row
from engine.engines.vllm import VllmConfig
from engine.errors import PhoenixError
from engine.prompts.sets import load as load_prompts
from engine.provenance import environment
from engine.queue.owned import owned

VLLM_EXTRA = {"return_token_ids": True}  # vLLM's own field: the exact tokens, so a divergence has its position


def servers(cfg: EnginesConfig) -> list[Server]:
    """One server per variant, none first (managed.plan); every variant checked before anything starts."""
    # --poll 0: by default a llama-server's threads spin for a while after each request, and side by side the next
    # server's request shares the two cores with them
    llama = LlamaCppConfig(model=cfg.model or cfg.target, draft_max=cfg.draft_max, parallel=1, poll=0)
    v = VllmConfig(target=cfg.target, dtype=cfg.dtype, table=cfg.table, max_num_seqs=1)
    return managed.plan(cfg.engine, cfg.spec_types, cfg.port, llama, v, cfg.draft, cfg.head)


def refused_draft(s: Server, answer: dict) -> str | None:
    """A draft llama.cpp refused is not an error there: it logs one line and serves without speculation. A draft-*
    server whose answer drafted nothing is said so here, with its log's reason."""
    c = s.config
    if not isinstance(c, LlamaCppConfig) or not c.spec_type.startswith("draft-"):
        return None
    if answer.get("error") or answer.get("draft_n") is not None:
        return None
    log = llamacpp.files(c)["log"]
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    why = next((ln.strip() for ln in lines if "compatible" in ln or "failed to load" in ln), "no reason in its log")
    return f"llama.cpp served {c.spec_type} with {c.draft_model} without drafting ({why}); see {log}"


def engines(store: Store, cfg: EnginesConfig, say: Callable[[str], None] = print) -> int:
    """One run: every prompt through every server in turn; each server's counter deltas in the run's config."""
    plan = servers(cfg)
    prompts = [p for p in load_prompts(cfg.prompts, cfg.limit, cfg.limit_per_column) if p.parent is None]
    with managed.running(plan) as started:
        extra = VLLM_EXTRA if cfg.engine == "vllm" else None
        served = {"vllm": cfg.target, "llamacpp": cfg.model or cfg.target}[cfg.engine]
        clients = [client_for(info["url"], served, extra=extra) for info in started]
        run_id = store.create_run(
            cfg.name or f"{cfg.engine} side by side: {','.join(s.variant for s in plan)}",
            {
                "serve_engines": asdict(cfg),
                "engine": clients[0].identity(cfg.engine),
                "sampling": GREEDY,
                "servers": [s.described(i) | {"command": i["command"]} for s, i in zip(plan, started)],
                "environment": environment(),
                "cache_scenario": "cold",  # every request salted apart (llama.cpp: its cache off)
            },
            served,
            None,
            len(prompts) * len(plan),
        ).id
        run = store.get_run(run_id)
        store.merge_config(run_id, runspec.recorded(run, [f"{cfg.engine}-{s.variant}_c1" for s in plan]))
        with owned(store, run_id):  # heartbeat; Ctrl-C or SIGTERM: interrupted; an error: failed
            _measure(store, run_id, cfg, plan, clients, prompts, say)
    store.set_status(run_id, "done")
    return run_id


def _measure(store: Store, run_id: int, cfg: EnginesConfig, plan: list[Server], clients, prompts, say) -> None:
    modes = [f"{cfg.engine}-{s.variant}_c1" for s in plan]
    seq = 0

    def cold(mode: str, key: str) -> dict:  # no prompt a server has seen: its own salt (or llama.cpp's cache off)
        return cold_request(cfg.engine, f"{run_id}/{mode}/{key}")

    if cfg.warmup:  # each server's first request loads its caches: stored, left out of every figure
        answers = [
            one_request(cl, prompts[0], cfg.max_new_tokens, cfg.chat, cold(m, "warm-up"))
            for cl, m in zip(clients, modes)
        ]
        for s, answer in zip(plan, answers):
            refused = refused_draft(s, answer)
            if refused:
                raise PhoenixError(refused)
        warm = [request_row(run_id, seq + i, m, 0, a) for i, (m, a) in enumerate(zip(modes, answers))]
        for rec in warm:
            rec.warmup = True
        store.add_requests(warm)
        seq += len(warm)
    before = [cl.metrics() for cl in clients]
    for n, prompt in enumerate(prompts, 1):
        answers = [
            one_request(cl, prompt, cfg.max_new_tokens, cfg.chat, cold(m, prompt.id)) for cl, m in zip(clients, modes)
        ]
        recs = [
            request_row(run_id, seq + i, m, s.draft_length, a) for i, (m, s, a) in enumerate(zip(modes, plan, answers))
        ]
        seq += len(recs)
        for rec, answer in zip(recs[1:], answers[1:]):  # greedy: every server must give the reference's output
            if rec.error is None and recs[0].error is None:  # a failure is never "identical"
                judge(rec, answer, answers[0])
        store.add_requests(recs, progress=(run_id, n * len(plan)))
        say(
            f"prompt {n}/{len(prompts)} {prompt.id}: " + ", ".join(f"{r.mode} {r.tokens_per_s:.1f} tok/s" for r in recs)
        )
    levels = [
        {
            "concurrency": 1,
            "variant": s.variant,
            **(
                {"spec_type": s.config.spec_type}
                if isinstance(s.config, LlamaCppConfig)
                else {"method": s.config.method}
            ),
            "requests": len(prompts),
            "failed": sum(1 for r in store.requests(run_id) if r.mode == m and r.error),
            "wall_s": 0.0,
            "throughput_tokens_per_s": 0.0,
            **cl.metrics().minus(b).summary(),
        }
        for s, m, cl, b in zip(plan, modes, clients, before)
    ]
    store.merge_config(run_id, {"server_counters": levels})
    if all(level["failed"] == level["requests"] for level in levels):  # nothing to compare: not "done"
        first = next((r.error for r in store.requests(run_id) if r.error and not r.warmup), None)
        raise PhoenixError(f"every request failed; the first: {first}")
