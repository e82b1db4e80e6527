"""llama.cpp side by side with itself: one local llama-server per speculation type, started together, and every
prompt sent to each in turn (interleaved, concurrency 1), so the ratios against its target-only server come from
one run on one machine state. Modes are llamacpp-<spec type>_c1; llamacpp-none_c1 is the reference."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from db.store import Store
from engine.bench.setup import environment
from engine.engines import llamacpp
from engine.engines.client import GREEDY, one_request
from engine.engines.gguf_export import gguf_of
from engine.engines.llamacpp import LlamaCppConfig
from engine.engines.record import client_for, request_row
from engine.errors import PhoenixError
from engine.prompts.sets import load as load_prompts
from engine.queue.owned import owned


@dataclass
class EnginesConfig:
    spec_types: str = "none,ngram-simple,ngram-mod"  # one llama-server each; none is the reference
    model: str = "smollm2"  # the GGUF every server serves (see llamacpp start --model)
    prompts: str = "humaneval-test"
    limit: int | None = 20
    limit_per_column: int | None = field(
        default=None, metadata={"aliases": ["--limit-per-category"]}
    )  # Spec-Bench: the first N questions of each leaderboard column (first turns: a server keeps no conversation)
    max_new_tokens: int = 96
    chat: bool = True  # through the server's chat template, as Phoenix's --prompt-format auto does for SmolLM2
    draft_max: int = 8  # --spec-draft-n-max for the speculating servers (a type's -k<N> sets its own)
    draft: str = "smollm2-draft"  # draft-simple's draft: a named draft model (exported to GGUF once) or a .gguf
    head: str = "smollm2-eagle3"  # draft-eagle3's head: a named EAGLE-3 head (exported to GGUF once) or a .gguf
    port: int = 8100  # the first server's port; the next ones count up
    warmup: bool = True  # one request per server before the clock, stored as warm-up
    name: str = ""


def servers(cfg: EnginesConfig) -> list[LlamaCppConfig]:
    """One server per variant (llamacpp.variant: a spec type and its settings), none first; the draft-* types
    draft with Phoenix's own draft model or EAGLE-3 head, exported to GGUF on first use."""
    types = [t.strip() for t in cfg.spec_types.split(",") if t.strip()]
    if not types or types[0] != "none":
        raise PhoenixError("--spec-types must start with none, the target-only reference", field="spec_types")
    if len(set(types)) != len(types):
        raise PhoenixError(f"--spec-types names a variant twice: {cfg.spec_types}", field="spec_types")
    # --poll 0: by default a llama-server's threads spin for a while after each request, and side by side the next
    # server's request shares the two cores with them
    base = LlamaCppConfig(model=cfg.model, draft_max=cfg.draft_max, parallel=1, poll=0)
    out = []
    for i, text in enumerate(types):
        c = replace(llamacpp.variant(text, base), port=cfg.port + i)
        if c.spec_type in ("draft-simple", "draft-eagle3"):
            c.draft_model = str(gguf_of(cfg.head if c.spec_type == "draft-eagle3" else cfg.draft))
        out.append(c)
    return out


def draft_length(c: LlamaCppConfig) -> int:
    """The longest draft a server proposes: ngram-simple's size-m where it is set, else --spec-draft-n-max."""
    if c.spec_type == "none":
        return 0
    return c.ngram_m if c.spec_type == "ngram-simple" and c.ngram_m is not None else c.draft_max


def refused_draft(c: LlamaCppConfig, answer: dict) -> str | None:
    """A draft llama.cpp refused is not an error there: it logs one line and serves without speculation. A draft-*
    server whose answer drafted nothing is said so here, with its log's reason."""
    if not c.spec_type.startswith("draft-") or answer.get("error") or answer.get("draft_n") is not None:
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
    configs = servers(cfg)
    prompts = [p for p in load_prompts(cfg.prompts, cfg.limit, cfg.limit_per_column) if p.parent is None]
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
                "servers": [
                    {"spec_type": c.spec_type, "variant": v, "command": i["command"], "draft": c.draft_model or None}
                    for c, i, v in zip(configs, started, [t.strip() for t in cfg.spec_types.split(",") if t.strip()])
                ],
                "environment": environment(),
            },
            cfg.model,
            None,
            len(prompts) * len(configs),
        ).id
        with owned(store, run_id):  # heartbeat; Ctrl-C or SIGTERM: interrupted; an error: failed
            modes = [f"llamacpp-{t.strip()}_c1" for t in cfg.spec_types.split(",") if t.strip()]
            seq = 0
            if cfg.warmup:  # each server's first request loads its caches: stored, left out of every figure
                answers = [one_request(cl, prompts[0], cfg.max_new_tokens, cfg.chat) for cl in clients]
                for c, answer in zip(configs, answers):
                    refused = refused_draft(c, answer)
                    if refused:
                        raise PhoenixError(refused)
                warm = [request_row(run_id, seq + i, m, 0, a) for i, (m, a) in enumerate(zip(modes, answers))]
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
                            draft_length(c),
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
                    "variant": m.removeprefix("llamacpp-").removesuffix("_c1"),
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
