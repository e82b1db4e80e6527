"""Executing a benchmark run against the store: run or resume it, and its results table.

Modes run interleaved per prompt (target first), so slow drift of a noisy machine
hits all modes alike. One warm-up request per mode is stored with warmup=1 and left
out of every figure.
"""
from __future__ import annotations

import random
from typing import Callable

from tqdm import tqdm

from db.entities import ModeSummary
from db.queries import mode_summaries
from db.store import Store
from engine.bench.config import BenchConfig, validate
from engine.bench.recorder import Recorder
from engine.bench.request import make_state, ordered_modes, replay_policies, run_one
from engine.decode.decoder import Decoder
from engine.decode.loading import load_pair
from engine.decode.prompts import load as load_prompts
from engine.errors import PhoenixError


def load_decoder(cfg: BenchConfig) -> Decoder:
    pair = load_pair(cfg.target, cfg.draft, cfg.device, cfg.dtype, cfg.allow_pickle)
    return Decoder(pair, max_new_cap=cfg.max_new_tokens_cap)


def encode_all(decoder: Decoder, prompts, max_new_tokens: int, prompt_format: str = "auto") -> dict[str, list[int]]:
    """Token ids per prompt id, each checked against the target's context."""
    encoded = {p.id: decoder.encode(p.text, prompt_format) for p in prompts}
    for ids in encoded.values():
        decoder.check_fits(ids, max_new_tokens)
    return encoded


def execute(store: Store, run_id: int, cfg: BenchConfig, decoder: Decoder | None = None,
            should_stop: Callable[[], bool] | None = None, progress: bool = True,
            on_request: Callable | None = None, telemetry=None) -> str:
    """Run (or continue) a run; returns its final status. Rows written are never lost."""
    validate(cfg)
    prompts = load_prompts(cfg.prompts, cfg.limit)
    try:
        decoder = decoder or load_decoder(cfg)
        encoded = encode_all(decoder, prompts, cfg.max_new_tokens, cfg.prompt_format)
    except PhoenixError as exc:
        store.set_status(run_id, "failed", str(exc))
        raise
    decoder.start_run(cfg.suffix)
    store.merge_config(run_id, {"device": decoder.pair.device, "dtype": decoder.pair.dtype,
                                "prompt_format": decoder.prompt_format(cfg.prompt_format)})
    state = make_state(decoder, cfg, telemetry)
    existing = store.requests(run_id, include_warmup=True)
    done = {(r.prompt_id, r.mode) for r in existing if not r.warmup}
    warmed = {r.mode for r in existing if r.warmup}
    state.seq = max((r.seq for r in existing), default=-1) + 1
    state.reference.update({r.prompt_id: r.output_sha256 for r in existing if r.mode == "target" and not r.warmup})
    replay_policies(dict(store.bandit_steps(run_id)), state, existing)
    store.set_status(run_id, "running")
    modes = ordered_modes(cfg.modes)
    plan = [(p, m) for p in prompts for m in modes if (p.id, m) not in done]
    shadow_rng = random.Random(f"shadow:{cfg.seed}:{len(done)}") if "target" not in modes else None
    recorder = Recorder(store, run_id, progress_start=len(done))
    status = "running"
    bar = tqdm(total=len(plan), desc=f"run {run_id}", unit="req", disable=not progress)
    try:
        for mode in modes:
            if mode not in warmed:
                rec, _ = run_one(state, run_id, cfg, prompts[0], encoded[prompts[0].id], mode, True, None)
                recorder.put(rec)
        for prompt, mode in plan:
            if should_stop and should_stop():
                status = "cancelled"
                break
            rec, stats = run_one(state, run_id, cfg, prompt, encoded[prompt.id], mode, False, shadow_rng)
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
            store.set_status(run_id, status)
        _report_acceptance(store, run_id, state.telemetry)
    return status


def _report_acceptance(store: Store, run_id: int, telemetry) -> None:
    try:
        rows = [m for m in mode_summaries(store, run_id) if m.proposed]
        telemetry.run_acceptance(run_id, sum(m.accepted for m in rows), sum(m.proposed for m in rows))
        telemetry.flush()
    except Exception:
        pass  # telemetry must never turn a finished run into a failed one


def _close(recorder: Recorder) -> None:
    try:
        recorder.close()
    except Exception:
        pass  # the run is already failing; its first error is the one to report


def format_table(rows: list[ModeSummary]) -> str:
    head = f"{'mode':<12}{'n':>5}{'mean lat (s)':>14}{'p50 (s)':>10}{'p95 (s)':>10}{'tok/s':>9}{'accept':>9}{'draft %':>9}{'identical':>11}{'speedup':>9}"
    lines = [head, "-" * len(head)]
    for m in rows:
        acc = "n/a" if m.acceptance is None else f"{m.acceptance:.1%}"
        share = m.draft_s / (m.draft_s + m.verify_s) if (m.draft_s + m.verify_s) else 0.0
        ident = f"{m.identical_n}/{m.checked_n}" if m.checked_n else "n/a"
        speed = "n/a" if m.speedup is None else f"{m.speedup:.2f}x"
        lines.append(f"{m.mode:<12}{m.n:>5}{m.mean_latency_s:>14.3f}{m.p50_latency_s:>10.3f}{m.p95_latency_s:>10.3f}"
                     f"{m.tokens_per_s:>9.2f}{acc:>9}{share:>9.0%}{ident:>11}{speed:>9}")
    return "\n".join(lines)


def report(store: Store, run_id: int) -> str:
    return format_table(mode_summaries(store, run_id))
