"""Benchmark runner: every mode through the same prompts, every request recorded.

Modes run interleaved per prompt (target first), so slow drift of a noisy
machine hits all modes alike. One warm-up request per mode is stored with
warmup=1 and left out of every figure.
"""
from __future__ import annotations

import random
from contextlib import nullcontext
import re
import uuid
from dataclasses import dataclass, field

from db.entities import BanditRecord, PositionCount, RequestRecord
from db.store import Store
from engine.bandit import DEFAULT_ARMS, Observation
from engine.policy_wrappers import GRANULARITIES, FallbackConfig, make_policy, policy_names
from engine.errors import PhoenixError
from engine.prompts import Prompt
from engine.runner import K_MAX, Decoder, first_divergence, sha256_ids
from engine.telemetry import SentryConfig, Telemetry, utcnow

MODE_RE = re.compile(r"^(target|bandit(?::([a-z0-9_]+))?(?::(request|pass))?|(fixed|ngram|hf)_(\d+))$")


@dataclass
class BenchConfig:
    target: str = "embedded"  # 'embedded', a model directory or a cached HF id
    draft: str | None = "embedded"  # None for model-free runs
    drafter: str = "model"  # what fixed_<k> and bandit draft with: model | ngram
    prompts: str = "humaneval-test"  # humaneval-test | humaneval-train | humaneval | FILE.jsonl
    limit: int | None = 20  # first N prompts of the set
    max_new_tokens: int = 128
    modes: list[str] = field(default_factory=lambda: ["target", "fixed_4", "bandit"])
    arms: list[int] = field(default_factory=lambda: list(DEFAULT_ARMS))
    policy: str = "epsilon_greedy"  # what plain 'bandit' runs; 'bandit:<policy>[:pass]' modes name their own
    granularity: str = "request"  # request | pass: may k change between verification passes of one request
    fallback: bool = False  # drop to k=0 while speculation runs slower than target-only
    fallback_window: int = 8  # speculative requests averaged before judging
    fallback_margin: float = 0.05  # how much slower than target-only counts as slower
    fallback_probe_every: int = 4  # while fallen back, every Nth request probes the policy's choice
    seed: int = 42  # bandit decisions and shadow sampling
    name: str = ""  # defaults to the modes joined
    shadow_rate: float = 0.1  # share re-decoded target-only when 'target' mode is absent
    device: str = "auto"
    dtype: str = "auto"
    allow_pickle: bool = False
    max_new_tokens_cap: int = 1024  # keeps a web form from becoming a DoS lever
    max_prompts: int = 500


def parse_mode(mode: str, drafter: str) -> tuple[str, int | None]:
    """(backend, k) for a mode string; k is None for the bandit."""
    m = MODE_RE.match(mode)
    if not m:
        raise PhoenixError(f"unknown mode {mode!r}: use target, fixed_<k>, ngram_<k>, hf_<k>, bandit or bandit:<policy>[:pass]")
    if mode == "target":
        return "model", 0
    if mode.startswith("bandit"):
        return drafter, None
    kind, k = m.group(4), int(m.group(5))
    if not 1 <= k <= K_MAX:
        raise PhoenixError(f"mode {mode!r}: k must be in 1..{K_MAX}")
    return {"fixed": drafter, "ngram": "ngram", "hf": "hf"}[kind], k


def bandit_spec(mode: str, cfg: BenchConfig) -> tuple[str, str]:
    """(policy, granularity) of a bandit mode: 'bandit' takes --policy and --granularity."""
    m = MODE_RE.match(mode)
    return m.group(2) or cfg.policy, m.group(3) or cfg.granularity


def validate(cfg: BenchConfig) -> BenchConfig:
    """Every option checked before anything loads or is written."""
    if not cfg.modes:
        raise PhoenixError("--modes is empty: pass e.g. target,fixed_4,bandit")
    if len(set(cfg.modes)) != len(cfg.modes):
        raise PhoenixError(f"--modes repeats a mode: {','.join(cfg.modes)}")
    if cfg.drafter not in ("model", "ngram"):
        raise PhoenixError(f"--drafter must be model or ngram, got {cfg.drafter!r}")
    for mode in cfg.modes:
        backend, _ = parse_mode(mode, cfg.drafter)
        if backend in ("model", "hf") and mode != "target" and not cfg.draft:
            raise PhoenixError(f"mode {mode!r} needs a draft model: pass --draft, or use ngram_<k> modes")
    if not cfg.arms:
        raise PhoenixError("--arms is empty: pass e.g. 0,2,4,6,8")
    if len(set(cfg.arms)) != len(cfg.arms):
        raise PhoenixError(f"--arms repeats an arm: {','.join(map(str, cfg.arms))}")
    bad = [a for a in cfg.arms if not 0 <= a <= K_MAX]
    if bad:
        raise PhoenixError(f"--arms {bad[0]} is out of range: arms must be in 0..{K_MAX}")
    if cfg.granularity not in GRANULARITIES:
        raise PhoenixError(f"--granularity must be request or pass, got {cfg.granularity!r}")
    for mode in [m for m in cfg.modes if m.startswith("bandit")] or ["bandit"]:
        policy, _ = bandit_spec(mode, cfg)
        if policy not in policy_names():
            raise PhoenixError(f"unknown policy {policy!r} in {mode if mode != 'bandit' else '--policy'}: use {', '.join(policy_names())}")
    if cfg.fallback_window < 1 or cfg.fallback_probe_every < 1 or not 0 <= cfg.fallback_margin < 1:
        raise PhoenixError("--fallback-window and --fallback-probe-every must be >= 1 and --fallback-margin in [0, 1)")
    if not 1 <= cfg.max_new_tokens <= cfg.max_new_tokens_cap:
        raise PhoenixError(f"--max-new-tokens must be in 1..{cfg.max_new_tokens_cap}, got {cfg.max_new_tokens}")
    if cfg.limit is not None and not 1 <= cfg.limit <= cfg.max_prompts:
        raise PhoenixError(f"--limit must be in 1..{cfg.max_prompts}, got {cfg.limit}")
    if not 0.0 <= cfg.shadow_rate <= 1.0:
        raise PhoenixError(f"--shadow-rate must be in 0..1, got {cfg.shadow_rate}")
    return cfg


def ordered_modes(modes: list[str]) -> list[str]:
    return sorted(modes, key=lambda m: m != "target")  # target first: it is the reference


def new_trace_id() -> str:
    return uuid.uuid4().hex


@dataclass
class RunState:
    """What a run carries between requests: references, policy, sequence numbers."""

    decoder: Decoder
    policies: dict[str, object]  # bandit mode -> its policy
    telemetry: Telemetry = field(default_factory=lambda: Telemetry(False, SentryConfig()))
    reference: dict[str, list[int] | str] = field(default_factory=dict)
    seq: int = 0


def make_record(run_id: int, seq: int, mode: str, k: int, prompt: Prompt, stats, text: str, warmup: bool,
                trace_id: str) -> RequestRecord:
    return RequestRecord(
        run_id=run_id, seq=seq, mode=mode, k=k, prompt_id=prompt.id, prompt_tokens=stats.prompt_tokens,
        output_tokens=stats.output_tokens, latency_s=stats.latency_s,
        ttft_s=None if stats.ttft_s != stats.ttft_s else stats.ttft_s, tokens_per_s=stats.tokens_per_s,
        proposed=stats.proposed, accepted=stats.accepted, passes=stats.passes, draft_s=stats.draft_s,
        verify_s=stats.verify_s, output_text=text, output_sha256=sha256_ids(stats.output_ids),
        trace_id=trace_id, warmup=warmup,
        positions=[PositionCount(i, p, a) for i, (p, a) in enumerate(zip(stats.per_position_proposed, stats.per_position_accepted))],
    )


def check_identity(rec: RequestRecord, output_ids: list[int], reference) -> None:
    """Fill rec.identical / rec.diverged_at against a target-only reference."""
    if reference is None:
        return
    if isinstance(reference, str):  # only the sha is known (a resumed run)
        rec.identical = rec.output_sha256 == reference
        return
    pos = first_divergence(output_ids, reference)
    rec.identical = pos is None
    rec.diverged_at = pos


def run_one(state: RunState, run_id: int, cfg: BenchConfig, prompt: Prompt, ids: list[int], mode: str,
            warmup: bool, shadow_rng: random.Random | None) -> tuple[RequestRecord, object]:
    """Decode one (prompt, mode) and build its record; updates the policy."""
    backend, k = parse_mode(mode, cfg.drafter)
    decision, choose_k = None, None
    if k is None:
        policy = state.policies[mode]
        decision = policy.choose(len(ids)) if not warmup else None
        k = decision.k if decision else max(cfg.arms)
        choose_k = policy.pass_controller(decision) if decision else None
        if decision is not None and decision.event:
            state.telemetry.policy_event(run_id, mode, decision.event)
    trace_id, start = new_trace_id(), utcnow()
    span = nullcontext() if warmup else state.telemetry.request(mode, k, run_id, cfg.target, cfg.draft, trace_id)
    with span as txn:
        stats = state.decoder.run(ids, k, cfg.max_new_tokens, backend if (k or choose_k) else "model", choose_k)
        rec = make_record(run_id, state.seq, mode, k, prompt, stats, state.decoder.text(stats), warmup, trace_id)
        state.seq += 1
        if warmup:
            return rec, stats
        judge(state, cfg, rec, stats, prompt, ids, mode, decision, shadow_rng)
        state.telemetry.finish_request(txn, rec, stats, start)
    if rec.bandit is not None:
        state.telemetry.bandit_decision(run_id, rec.bandit)
    return rec, stats


def judge(state: RunState, cfg: BenchConfig, rec: RequestRecord, stats, prompt: Prompt, ids: list[int], mode: str,
          decision, shadow_rng: random.Random | None) -> None:
    """Identity against target-only, and the policy update with its recorded step."""
    k = rec.k
    if mode == "target":
        state.reference[prompt.id] = stats.output_ids
        rec.identical, rec.diverged_at = True, None
        for policy in state.policies.values():
            policy.observe_reference(rec.tokens_per_s)
    elif prompt.id in state.reference:
        check_identity(rec, stats.output_ids, state.reference[prompt.id])
    elif shadow_rng is not None and shadow_rng.random() < cfg.shadow_rate:
        ref = state.decoder.run(ids, 0, cfg.max_new_tokens, "model").output_ids
        check_identity(rec, stats.output_ids, ref)
    if decision is not None:
        policy = state.policies[mode]
        policy.update(k, rec.tokens_per_s, observation(rec))
        means, counts = policy.snapshot()
        rec.bandit = BanditRecord(decision.t, decision.epsilon, decision.explored, k, means, counts, rec.tokens_per_s,
                                  bandit_spec(mode, cfg)[0], decision.fallback)


def observation(rec: RequestRecord) -> Observation:
    """What a policy learns from a request, built from the stored record so a replay sees the same numbers."""
    return Observation(k=rec.k, reward=rec.tokens_per_s, prompt_tokens=rec.prompt_tokens, output_tokens=rec.output_tokens,
                       passes=rec.passes, proposed=rec.proposed, accepted=rec.accepted, latency_s=rec.latency_s,
                       ttft_s=rec.ttft_s or 0.0, draft_s=rec.draft_s, verify_s=rec.verify_s,
                       per_position_proposed=[p.proposed for p in rec.positions],
                       per_position_accepted=[p.accepted for p in rec.positions])


def replay_policies(store: Store, run_id: int, state: RunState, records: list[RequestRecord]) -> None:
    """Bring every policy to where the interrupted run left it, by replaying its observations in order."""
    steps = {seq: step for seq, step in store.bandit_steps(run_id)}
    for rec in sorted(records, key=lambda r: r.seq):
        if rec.warmup:
            continue
        if rec.mode == "target":
            for policy in state.policies.values():
                policy.observe_reference(rec.tokens_per_s)
        elif rec.mode in state.policies and rec.seq in steps:
            step = steps[rec.seq]
            state.policies[rec.mode].update(step.chosen_k, step.reward, observation(rec))


def make_state(decoder: Decoder, cfg: BenchConfig, telemetry: Telemetry | None = None) -> RunState:
    fallback = (FallbackConfig(cfg.fallback_window, cfg.fallback_margin, cfg.fallback_probe_every)
                if cfg.fallback else None)
    policies = {}
    for mode in cfg.modes:
        if mode.startswith("bandit"):
            name, granularity = bandit_spec(mode, cfg)
            policies[mode] = make_policy(name, cfg.arms, cfg.seed, granularity, fallback)
    return RunState(decoder=decoder, policies=policies, telemetry=telemetry or Telemetry(False, SentryConfig()))
