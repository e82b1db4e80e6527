"""One request of a run: choose k, decode, judge identity, teach the policy, build the record.

Database-free: records go to the caller (the run's Recorder); telemetry wraps each
request outside the decode loop.
"""

from __future__ import annotations

import random
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

from db.entities import BanditRecord, RequestRecord
from engine.bench.config import BenchConfig
from engine.decode.decoder import Decoder, identity
from engine.decode.sequence import Request
from engine.measure import measured
from engine.modes import Mode
from engine.observe.sentry import Telemetry
from engine.policies.registry import make_policy
from engine.policies.types import Observation, Policy
from engine.prompts.sets import Prompt, category_group
from engine.record.rows import make_record, new_trace_id


def ordered_modes(modes: list[str]) -> list[str]:
    return sorted(modes, key=lambda m: Mode.parse(m).kind != "target")  # target first: it is the reference


@dataclass
class RunState:
    """What a run carries between requests: references, policy, sequence numbers."""

    decoder: Decoder
    policies: dict[str, Policy]  # bandit mode -> its policy
    telemetry: Telemetry = field(default_factory=Telemetry.off)
    reference: dict[str, list[int] | str] = field(default_factory=dict)
    seq: int = 0
    arm_labels: list[str] = field(default_factory=list)  # --drafter-arms: a policy's arm i is arm_labels[i]
    answers: dict[str, str] = field(default_factory=dict)  # target-only text by prompt id: a next turn's context
    prompts: dict[str, Prompt] = field(default_factory=dict)  # the run's prompts by id (a later turn finds its parent)
    cpu_s: dict[str, float] = field(default_factory=dict)  # per mode: the process's CPU seconds its measured requests
    # took (time.process_time: every thread of this process, the decode's included), the cost per token
    cpu_tokens: dict[str, int] = field(default_factory=dict)  # per mode: the output tokens those seconds produced
    cpu_each: dict[str, list[float]] = field(default_factory=dict)  # per mode: each timed request's (or group's)
    # CPU seconds per 1,000 tokens: the cost's spread

    def timed(self, mode: str, cpu: float, tokens: int) -> None:
        """Measured requests' CPU seconds and the output tokens they produced, counted together (a cost never divides
        one session's seconds by another's tokens)."""
        self.cpu_s[mode] = self.cpu_s.get(mode, 0.0) + cpu
        self.cpu_tokens[mode] = self.cpu_tokens.get(mode, 0) + tokens
        if tokens > 0:
            self.cpu_each.setdefault(mode, []).append(1000.0 * cpu / tokens)

    def arm(self, decision_k: int, run_drafter: str) -> tuple[str, int, bool]:
        """(drafter, k, confident?) of a bandit's choice: its k with the run's drafter, or the drafter arm it
        indexes."""
        if not self.arm_labels:
            return run_drafter, decision_k, False
        mode = Mode.parse(self.arm_labels[decision_k])
        return mode.drafter(run_drafter, self.decoder.pair.draft is not None), mode.k or 0, mode.confident

    def labelled(self, per_arm: dict) -> dict:
        """A policy's per-arm snapshot keyed by what the arm is: str(k), or the drafter arm's label."""
        return {self.arm_labels[int(a)]: v for a, v in per_arm.items()} if self.arm_labels else per_arm


def check_identity(rec: RequestRecord, output_ids: list[int], reference) -> None:
    """Fill rec.identical / rec.diverged_at against a target-only reference."""
    if reference is None:
        return
    if isinstance(reference, str):  # only the sha is known (a resumed run)
        rec.identical = rec.output_sha256 == reference
        return
    rec.identical, rec.diverged_at = identity(output_ids, reference)


def run_one(
    state: RunState,
    run_id: int,
    cfg: BenchConfig,
    prompt: Prompt,
    ids: list[int],
    mode: str,
    warmup: bool,
    shadow_rng: random.Random | None,
) -> tuple[RequestRecord, object]:
    """Decode one (prompt, mode) and build its record; updates the policy."""
    parsed = Mode.parse(mode)
    drafter, k = parsed.drafter(cfg.drafter, state.decoder.pair.draft is not None), parsed.k or 0
    confident = parsed.confident
    decision, choose_k = None, None
    if parsed.is_bandit:
        policy = state.policies[mode]
        decision = policy.choose(len(ids), category_group(prompt.category)) if not warmup else None
        drafter, k, confident = state.arm(decision.arm if decision else max(cfg.policy_arms()), cfg.drafter)
        choose_k = policy.pass_controller(decision) if decision else None
        if decision is not None and decision.event:
            state.telemetry.policy_event(run_id, mode, decision.event)
    trace_id = new_trace_id()
    span = nullcontext() if warmup else state.telemetry.request(mode, k, run_id, cfg.target, cfg.draft, trace_id)
    with span as txn:
        threshold = cfg.confidence_threshold if confident else 0.0
        cpu_before = time.process_time()
        stats = state.decoder.run(
            ids,
            k,
            cfg.max_new_tokens,
            drafter,
            parsed.loop or "phoenix",
            choose_k,
            confidence=threshold,
            sampling=cfg.sampling(prompt.id),
        )
        cpu = time.process_time() - cpu_before
        rec = make_record(run_id, state.seq, mode, k, prompt, stats, state.decoder.text(stats), warmup, trace_id)
        rec.drafter = drafter if (k > 0 or choose_k) else "none"
        state.seq += 1
        if warmup:
            return rec, stats
        state.timed(mode, cpu, rec.output_tokens)
        judge(state, cfg, rec, stats, prompt, ids, mode, decision, shadow_rng)
        state.telemetry.finish_request(txn, rec)
    if rec.bandit is not None:
        state.telemetry.bandit_decision(run_id, rec.bandit)
    return rec, stats


def judge(
    state: RunState,
    cfg: BenchConfig,
    rec: RequestRecord,
    stats,
    prompt: Prompt,
    ids: list[int],
    mode: str,
    decision,
    shadow_rng: random.Random | None,
) -> None:
    """Identity against target-only, and the policy update with its recorded step."""
    if mode == "target":
        state.reference[prompt.id] = stats.output_ids
        state.answers[prompt.id] = rec.output_text
        rec.identical, rec.diverged_at = True, None
        for policy in state.policies.values():
            policy.observe_reference(rec.tokens_per_s)
    elif prompt.id in state.reference:
        check_identity(rec, stats.output_ids, state.reference[prompt.id])
    elif shadow_rng is not None and shadow_rng.random() < cfg.shadow_rate:
        # no clock: not measured; the prompt's own seed, so a sampled output is checked token for token too
        ask = Request(ids, cfg.max_new_tokens, sampling=cfg.sampling(prompt.id))
        check_identity(rec, stats.output_ids, state.decoder.reference(ask))
    if decision is not None:
        policy = state.policies[mode]
        policy.update(decision.arm if state.arm_labels else rec.k, rec.tokens_per_s, observation(rec))
        means, counts = policy.snapshot()
        rec.bandit = BanditRecord(
            t=decision.t,
            epsilon=decision.epsilon,
            p_not_best=decision.p_not_best,
            explored=decision.explored,
            chosen_k=rec.k,
            arm_means=state.labelled(means),
            arm_counts=state.labelled(counts),
            reward=rec.tokens_per_s,
            policy=cfg.bandit_spec(Mode.parse(mode))[0],
            fallback=decision.fallback,
            arm=state.arm_labels[decision.arm] if state.arm_labels else None,
        )


def observation(rec: RequestRecord) -> Observation:
    """What a policy learns from a request, built from the stored record so a replay sees the same numbers."""
    return Observation(**measured(rec), reward=rec.tokens_per_s, category=category_group(rec.category))


def replay_policies(steps: dict[int, BanditRecord], state: RunState, records: list[RequestRecord]) -> None:
    """Bring every policy to where the interrupted run left it, by replaying its observations in order.
    ``steps`` maps a request's seq to its recorded bandit step."""
    for rec in sorted(records, key=lambda r: r.seq):
        if rec.warmup:
            continue
        if rec.mode == "target":
            for policy in state.policies.values():
                policy.observe_reference(rec.tokens_per_s)
        elif rec.mode in state.policies and rec.seq in steps:
            step = steps[rec.seq]
            arm = (
                state.arm_labels.index(step.arm) if state.arm_labels and step.arm in state.arm_labels else step.chosen_k
            )
            state.policies[rec.mode].update(arm, step.reward, observation(rec))


def make_state(decoder: Decoder, cfg: BenchConfig, telemetry: Telemetry | None = None) -> RunState:
    policies = {}
    for mode in cfg.parsed_modes():
        if mode.is_bandit:
            name, granularity = cfg.bandit_spec(mode)
            policies[mode.text] = make_policy(name, cfg.policy_arms(), cfg.seed, granularity, cfg.fallback)
    return RunState(
        decoder=decoder,
        policies=policies,
        telemetry=telemetry or Telemetry.off(),
        arm_labels=[a.text for a in cfg.arm_modes()],
    )
