"""Executing a benchmark run against the store: run or resume it.

Modes run interleaved per prompt (target first, the others in alternating order), so slow drift of a noisy
machine hits all modes alike. One warm-up request per mode is stored with warmup=1 and left out of every figure.
Every output is checked against target-only on the same prompt in the same dtype; a divergence keeps its position.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict

from tqdm import tqdm

from db.store import Store
from engine.bench.batched import groups, run_group
from engine.bench.config import BenchConfig
from engine.bench.request import RunState, make_state, ordered_modes, replay_policies, run_one
from engine.decode import fast_attention
from engine.decode.compiled import finish, graph_count
from engine.decode.decoder import Decoder
from engine.decode.loading import fingerprint, load_pair, prepare
from engine.errors import PhoenixError
from engine.modes import K_MAX, Mode
from engine.prompts.sets import Prompt
from engine.prompts.sets import load as load_prompts
from engine.record.writer import Recorder


def load_decoder(cfg: BenchConfig) -> Decoder:
    pair = load_pair(cfg.target, cfg.draft, cfg.device, cfg.dtype, cfg.allow_pickle)
    graphs = cfg.compile or cfg.freeze or cfg.fast != "off" or cfg.cache == "static"  # a graph packs its own
    prepare(pair, "off" if graphs else cfg.pack, "transformers" if graphs else cfg.runner)
    return Decoder(pair, max_new_cap=cfg.max_new_tokens_cap, cache=cfg.cache)


def cache_positions(cfg: BenchConfig, prompts: list[Prompt], encoded: dict[str, list[int]]) -> int:
    """One static cache size for the whole run, so compiled graphs see one shape: the longest prompt plus its
    answer and the longest verify; a run with second turns leaves room for a first turn and its answer too."""
    longest = max((len(ids) for ids in encoded.values()), default=0)
    later = any(p.parent is not None for p in prompts)
    return (2 if later else 1) * (longest + cfg.max_new_tokens) + K_MAX + 1


def prepare_cache_and_compile(store: Store, run_id: int, cfg: BenchConfig, decoder: Decoder, positions: int) -> int:
    """Static cache and compile, before any clock; returns the graph count after the warm-up (recompiles are
    counted against it)."""
    if cfg.cache == "static" or cfg.compile:
        decoder.cache, decoder.cache_positions = "static", positions
    if not cfg.compile:
        return 0
    stats = decoder.compile(cfg.k_max(), positions, freeze=cfg.freeze)
    if stats.error:
        print(f"compile failed on this platform, the run goes on eager: {stats.error}")
    store.merge_config(run_id, {"compile": finish(stats, graph_count())})
    return graph_count()


def encode_all(decoder: Decoder, prompts, max_new_tokens: int, prompt_format: str = "auto") -> dict[str, list[int]]:
    """Token ids per prompt id, each checked against the target's context. A later turn of a conversation is
    encoded when its turn comes (``encode_turn``): its context holds the target's own earlier answers."""
    encoded = {p.id: decoder.encode(p.text, prompt_format) for p in prompts if p.parent is None}
    for ids in encoded.values():
        decoder.check_fits(ids, max_new_tokens)
    return encoded


def encode_turn(state: RunState, cfg: BenchConfig, prompt: Prompt, encoded: dict[str, list[int]]) -> list[int]:
    """A later turn's ids: the earlier user turns with the target-only answers this target gave them, then this
    turn. An answer this run has not recorded (no target mode, or a resumed run) is decoded target-only once."""
    if prompt.id in encoded:
        return encoded[prompt.id]
    chain = [prompt]
    while chain[0].parent is not None:
        chain.insert(0, state.prompts[chain[0].parent])
    for earlier, _ in zip(chain, chain[1:]):
        if earlier.id not in state.answers:
            ids = encode_turn(state, cfg, earlier, encoded)
            state.answers[earlier.id] = state.decoder.text(state.decoder.run(ids, 0, cfg.max_new_tokens))
    history = tuple((p.text, state.answers[p.id]) for p in chain[:-1])
    ids = state.decoder.encode(prompt.text, cfg.prompt_format, history)
    state.decoder.check_fits(ids, cfg.max_new_tokens)
    encoded[prompt.id] = ids
    return ids


def interleaved(modes: list[str], i: int) -> list[str]:
    """The order of modes on the i-th prompt: target first (it is the reference), the rest reversed on every
    other prompt, so a mode's place in the sequence, and the drift of a noisy machine along it, evens out."""
    head, rest = modes[:1] if modes[:1] == ["target"] else [], [m for m in modes if m != "target"]
    return head + (rest if i % 2 == 0 else rest[::-1])


def execute(
    store: Store,
    run_id: int,
    cfg: BenchConfig,
    decoder: Decoder | None = None,
    should_stop: Callable[[], bool] | None = None,
    progress: bool = True,
    on_request: Callable | None = None,
    telemetry=None,
) -> str:
    """Run (or continue) a run; returns its final status. Rows written are never lost. ``cfg`` was validated
    where it entered (the CLI, the form, or ``config.stored`` for a queued or resumed run)."""
    prompts = load_prompts(cfg.prompts, cfg.limit, cfg.limit_per_column)
    try:
        decoder = decoder or load_decoder(cfg)
        encoded = encode_all(decoder, prompts, cfg.max_new_tokens, cfg.prompt_format)
        for parsed in map(Mode.parse, cfg.modes + cfg.drafter_arms):  # a head passed as a draft model fails here
            if not (parsed.is_bandit and cfg.drafter_arms):
                decoder.check_drafter(
                    parsed.drafter(cfg.drafter, decoder.pair.draft is not None), parsed.loop or "phoenix"
                )
    except PhoenixError as exc:
        store.set_status(run_id, "failed", str(exc))
        raise
    decoder.start_run(cfg.suffix, cfg.hybrid)
    # The stored config says what ran: auto resolved to the device, dtype and prompt format actually used.
    resolved = {
        "device": decoder.pair.device,
        "dtype": decoder.pair.dtype,
        "prompt_format": decoder.prompt_format(cfg.prompt_format),
        "runner": decoder.pair.runner,
    }
    # the draft's weights as loaded: which head or draft ran (a build stage changes a head under the same name)
    store.merge_config(
        run_id,
        {
            "bench": {**asdict(cfg), **resolved},
            "packed": decoder.pair.packed,  # what --pack auto chose: a fact of the run, not an option to resume with
            "attention": fast_attention.describe(decoder.pair.dtype),  # a decode step's: Phoenix's kernel or SDPA
            "draft_sha256": fingerprint(decoder.pair.draft),
            "models": decoder.pair.cards(),  # each model's card: family, size, vocabulary, source and hash
        },
    )
    state = make_state(decoder, cfg, telemetry)
    state.prompts = {p.id: p for p in prompts}
    existing = store.requests(run_id, include_warmup=True)
    done = {(r.prompt_id, r.mode) for r in existing if not r.warmup}
    warmed = {r.mode for r in existing if r.warmup}
    state.seq = max((r.seq for r in existing), default=-1) + 1
    state.reference.update({r.prompt_id: r.output_sha256 for r in existing if r.mode == "target" and not r.warmup})
    state.answers.update({r.prompt_id: r.output_text for r in existing if r.mode == "target" and not r.warmup})
    replay_policies(dict(store.bandit_steps(run_id)), state, existing)
    store.set_status(run_id, "running")
    modes = ordered_modes(cfg.modes)
    plan = [(p, m) for i, p in enumerate(prompts) for m in interleaved(modes, i) if (p.id, m) not in done]
    shadow_rng = random.Random(f"shadow:{cfg.seed}:{len(done)}") if "target" not in modes else None
    recorder = Recorder(store, run_id, progress_start=len(done))
    status, graphs_at_start = "running", 0
    bar = tqdm(total=len(plan), desc=f"run {run_id}", unit="req", disable=not progress)
    try:
        graphs_at_start = prepare_cache_and_compile(store, run_id, cfg, decoder, cache_positions(cfg, prompts, encoded))
        n = cfg.concurrency
        first = [p for p in prompts if p.parent is None][:n]
        for mode in modes:
            if mode not in warmed:
                ids = [encoded[p.id] for p in first]
                for rec, _ in (
                    run_group(state, run_id, cfg, first, ids, mode, True)
                    if n > 1
                    else [run_one(state, run_id, cfg, first[0], ids[0], mode, True, None)]
                ):
                    recorder.put(rec)
        steps = groups(plan, n) if n > 1 else ((mode, [prompt]) for prompt, mode in plan)
        for mode, group in steps:
            if should_stop and should_stop():
                status = "cancelled"
                break
            ids = [encode_turn(state, cfg, prompt, encoded) for prompt in group]
            if n > 1:
                results = run_group(state, run_id, cfg, group, ids, mode, False, shadow_rng)
            else:
                results = [run_one(state, run_id, cfg, group[0], ids[0], mode, False, shadow_rng)]
            recorder.check()
            for rec, stats in results:
                recorder.put(rec)
                if on_request:
                    on_request(rec, stats)
                bar.update(1)
        if status == "running":
            status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    except PhoenixError as exc:
        status = "failed"
        _close(recorder)
        store.set_status(run_id, status, str(exc))
        raise
    except Exception as exc:
        status = "failed"
        _close(recorder)
        store.set_status(run_id, status, f"{type(exc).__name__}: {exc}")
        raise
    finally:
        bar.close()  # before any error line, so that line is the last one printed
        if status in ("done", "cancelled", "interrupted"):
            recorder.close()
            stored = store.get_run(run_id)
            kept = (stored.config if stored else {}) or {}  # a resumed run adds to what its earlier sessions spent
            spent, counted = kept.get("cpu_s") or {}, kept.get("cpu_tokens") or {}
            total = {m: spent.get(m, 0.0) + state.cpu_s.get(m, 0.0) for m in {*spent, *state.cpu_s}}
            tokens = {m: counted.get(m, 0) + state.cpu_tokens.get(m, 0) for m in {*counted, *state.cpu_tokens}}
            each = kept.get("cpu_each") or {}
            spread = {m: (each.get(m) or []) + state.cpu_each.get(m, []) for m in {*each, *state.cpu_each}}
            store.merge_config(run_id, {"cpu_s": total, "cpu_tokens": tokens, "cpu_each": spread})
            if cfg.compile:
                store.merge_config(run_id, {"compile": finish(decoder.compile_stats, graphs_at_start)})
            store.set_status(run_id, status)
        _report_acceptance(store, run_id, state.telemetry)
    return status


def _report_acceptance(store: Store, run_id: int, telemetry) -> None:
    try:
        rows = [m for m in store.mode_summaries(run_id) if m.proposed]
        telemetry.run_acceptance(run_id, sum(m.accepted for m in rows), sum(m.proposed for m in rows))
        telemetry.flush()
    except Exception:
        pass  # telemetry must never turn a finished run into a failed one


def _close(recorder: Recorder) -> None:
    try:
        recorder.close()
    except Exception:
        pass  # the run is already failing; its first error is the one to report
