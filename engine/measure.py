"""One request as measured, the one shape the decoder fills, the store keeps (``db.entities.RequestRecord`` adds
where it belongs) and the policies learn from (``engine.policies.types.Observation`` adds the reward).

Nothing here imports anything: every layer may build on it, ``db`` included. Counts follow vLLM: for draft position
i (0-based) a pass counts as ``proposed`` if it drafted a token there, as ``accepted`` if its first i+1 drafts were
all accepted (the unconditional definition), and as ``reached`` if it proposed position i with 0..i-1 accepted (the
denominator of position i's conditional rate when the draft length varies pass by pass).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields


@dataclass
class PositionCount:
    position: int
    proposed: int
    accepted: int
    reached: int | None = None  # None in rows recorded before migration 0015 kept it


@dataclass(kw_only=True)
class Measured:
    k: int = 0  # the request's draft length (a server's: its most frequent one)
    prompt_tokens: int = 0
    output_tokens: int = 0
    proposed: int = 0
    accepted: int = 0
    passes: int = 0
    positions: list[PositionCount] = field(default_factory=list)
    # Times split so that the break-even model sees decode passes only: prefill_s is the target's prompt pass,
    # draft_prefill_s the drafter's own reset; None where a loop or server does not expose one, never NaN
    prefill_s: float | None = None
    draft_prefill_s: float | None = None
    draft_s: float = 0.0  # drafting, decode passes only
    verify_s: float = 0.0  # target verification, decode passes only
    ttft_s: float | None = None
    latency_s: float = 0.0
    # A drafter with several sources (hybrid: the suffix trees or the EAGLE-3 head) counts each source's passes
    # apart: {source: {"passes": n, "proposed": [...], "accepted": [...], "reached": [...]}} per position, the
    # counts' meaning as above; None where one source drafted every pass
    per_source: dict[str, dict] | None = None

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None

    def count_pass(self, proposed: int, accepted: int) -> None:
        """One verification pass that drafted ``proposed`` tokens and accepted the first ``accepted``."""
        for i in range(len(self.positions), proposed):
            self.positions.append(PositionCount(i, 0, 0, 0))
        for p in self.positions[:proposed]:
            p.proposed += 1
            p.reached = (p.reached or 0) + int(accepted >= p.position)
            p.accepted += int(accepted > p.position)
        self.proposed += proposed
        self.accepted += accepted
        self.passes += 1

    def count_source(self, source: str, proposed: int, accepted: int) -> None:
        """The pass just counted was drafted by ``source``."""
        if self.per_source is None:
            self.per_source = {}
        tally = self.per_source.setdefault(source, {"passes": 0, "proposed": [], "accepted": [], "reached": []})
        tally["passes"] += 1
        for key, n in (("proposed", proposed), ("accepted", accepted), ("reached", min(accepted + 1, proposed))):
            counts = tally[key]
            counts.extend([0] * (proposed - len(counts)))
            for i in range(n):
                counts[i] += 1

    # the per-position counts as lists, position 0 first
    @property
    def per_position_proposed(self) -> list[int]:
        return [p.proposed for p in self.positions]

    @property
    def per_position_accepted(self) -> list[int]:
        return [p.accepted for p in self.positions]

    @property
    def per_position_reached(self) -> list[int]:
        return [p.reached or 0 for p in self.positions]


def mean_acceptance_length(accepted: float, drafts: float) -> float | None:
    """vLLM's mean acceptance length: 1 + accepted / drafts, where drafts are the verify passes that drafted at
    least one token (as vLLM counts them, a pass that drafted nothing is no speculative step); the bonus token
    included. None where nothing was drafted. The one definition: responses, counters, pages and reports read it."""
    return 1.0 + accepted / drafts if drafts else None


def tokens_per_pass(accepted: float, passes: float) -> float | None:
    """Tokens per verify pass, every pass counted (Spec-Bench's "mean accepted tokens" per decoding step): 1 +
    accepted / passes, so 1.00 for target-only. Not vLLM's mean acceptance length, which counts drafting passes."""
    return 1.0 + accepted / passes if passes else None


def cpu_per_1k_tokens(cpu_s: float | None, output_tokens: int) -> float | None:
    """The cost of output: CPU seconds (every thread of the process that served them) per 1,000 output tokens; None
    where the CPU time is unknown or nothing was produced."""
    return 1000.0 * cpu_s / output_tokens if cpu_s is not None and output_tokens > 0 else None


def usd_per_1k_tokens(usd_per_hour: float | None, output_tokens_per_s: float | None) -> float | None:
    """The money cost of output on hardware rented by the hour: its price over the output it makes in that hour, per
    1,000 tokens (a load level's output throughput: the whole machine's output at that load); None where either is
    unknown."""
    if not usd_per_hour or not output_tokens_per_s or output_tokens_per_s <= 0:
        return None
    return 1000.0 * usd_per_hour / 3600.0 / output_tokens_per_s


def cost_text(cpu_s: float | None, timed_tokens: int, all_tokens: int, spread: list[float] | None = None) -> str:
    """A cost as a page says it: CPU seconds per 1,000 output tokens over the tokens whose CPU time was read, the
    spread where there is one (blocks or requests), and what is missing where the CPU time covers only part of the
    tokens (a killed session's, a server that did not say). "" where nothing was timed."""
    value = cpu_per_1k_tokens(cpu_s, timed_tokens)
    if value is None:
        return ""
    text = f"{value:.1f}"
    if spread and len(spread) >= 2:
        text += f" ({min(spread):.1f}-{max(spread):.1f})"
    if all_tokens > timed_tokens:
        text += f", CPU timed for {timed_tokens:,} of {all_tokens:,} tokens"
    return text


def draft_share(draft_s: float, verify_s: float) -> float:
    """Drafting's share of the decode passes' time: draft / (draft + verify), prefills apart (0 where nothing ran)."""
    total = draft_s + verify_s
    return draft_s / total if total else 0.0


MEASURED = tuple(f.name for f in fields(Measured))


def measured(source: Measured) -> dict:
    """The measured fields of any request shape, to build another from (positions copied, never shared)."""
    out = {name: getattr(source, name) for name in MEASURED}
    out["positions"] = [PositionCount(p.position, p.proposed, p.accepted, p.reached) for p in source.positions]
    per_source = source.per_source
    out["per_source"] = (
        {name: {key: list(v) if isinstance(v, list) else v for key, v in t.items()} for name, t in per_source.items()}
        if per_source
        else None
    )
    return out


@dataclass
class StepRecord:
    """One batched step of the engine core (engine.decode.scheduler), plain: the server stores it as a ``serve_steps``
    row as it is (db.store), so it is defined here, once, where decode and db both may read it."""

    step: int
    at_s: float
    batch: int
    width: int
    drafter: str
    k: int | None  # the tuner's k for the main drafter; None where every row fixed its own
    explored: bool | None
    estimate: float | None
    estimate_off: float | None
    draft_s: float
    verify_s: float
    proposed: int
    accepted: int
    emitted: int
    prefill_tokens: int = 0  # prompt tokens this step prefilled beside the verify
    rows_off: int = 0  # rows held at k = 0 this step by their own acceptance (engine.decode.steps.RowAcceptance)


def vllm_request_metrics(
    drafted: list[int],
    accepted: list[int],
    num_spec_tokens: int,
    ttft_s: float | None,
    latency_s: float,
    queue_s: float,
    output_tokens: int,
) -> dict:
    """A request's ``metrics`` in vLLM's per-request shape (``PerRequestMetrics``, vLLM PR 48915, at the ``detailed``
    level), from its passes' drafted and accepted counts: AIPerf and vLLM's tooling read it unchanged. As vLLM
    counts them, a pass that drafted nothing is no speculative step; the histogram is indexed by accepted drafts
    (the bonus token excluded), ``mean_acceptance_length`` includes the bonus token."""
    steps = [(d, a) for d, a in zip(drafted, accepted) if d > 0]
    size = max([num_spec_tokens] + [d for d, _ in steps])
    histogram = [0] * (size + 1)
    for _, a in steps:
        histogram[a] += 1
    n_accepted, n_drafted = sum(a for _, a in steps), sum(d for d, _ in steps)
    decode_s = max(0.0, latency_s - (ttft_s or 0.0))
    speculative = {
        "mean_acceptance_length": mean_acceptance_length(n_accepted, len(steps)) or 1.0,
        "draft_acceptance_rate": n_accepted / n_drafted if n_drafted else 0.0,
        "acceptance_histogram": histogram,
        "num_spec_steps": len(steps),
        "num_accepted_draft_tokens": n_accepted,
        "num_draft_tokens": n_drafted,
        "num_spec_tokens": size,
        "per_step_accepted": [a for _, a in steps],
        "per_step_drafted": [d for d, _ in steps],
    }
    return {
        "time_to_first_token_ms": ttft_s * 1000 if ttft_s is not None else None,
        "generation_time_ms": latency_s * 1000,
        "queue_time_ms": queue_s * 1000,
        "mean_itl_ms": decode_s * 1000 / (output_tokens - 1) if output_tokens > 1 else None,
        "tokens_per_second": output_tokens / latency_s if latency_s > 0 else None,
        "speculative_decoding": speculative if steps or num_spec_tokens else None,
    }


def sha256_text(text: str) -> str:
    """The output's fingerprint, one definition for every loop, serving engine and imported file: servers return
    text, not ids."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
