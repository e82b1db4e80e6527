"""Plain entities returned by the store. ORM objects never leave db/."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from engine.measure import (  # noqa: F401  (PositionCount, StepRecord: re-exported)
    Measured,
    PositionCount,
    StepRecord,
    mean_acceptance_length,
    tokens_per_pass,
)


class StoreError(Exception):
    """A database problem the user can fix; the message says how."""

    exit_code = 2


STALE_AFTER_S = 30.0  # a running run without a heartbeat this long reads 'interrupted'


@dataclass
class RunInfo:
    id: int
    name: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    config: dict
    target: str
    draft: str | None
    progress_done: int
    progress_total: int
    error: str | None = None
    worker_id: str | None = None
    heartbeat_at: datetime | None = None
    cancel_requested: bool = False
    tags: list[str] = field(default_factory=list)
    note: str | None = None
    archived: bool = False
    bench: Any = None  # the typed bench config (engine.bench.config.BenchConfig) when the store was given its parser
    config_error: str | None = None  # why the stored bench config did not parse (bench is then None), never hidden


@dataclass(frozen=True)
class RunFilter:
    """Which runs a list shows: each field narrows it, empty means any. Every value is a bound parameter."""

    name: str = ""  # part of the run's name
    model: str = ""  # part of the target's or the draft's name
    status: str = ""  # the status as readers see it: a running run whose worker stopped beating reads 'interrupted'
    tag: str = ""  # one tag, exactly
    archived: bool = False  # include archived runs
    stale_after_s: float | None = None  # seconds without a heartbeat before 'interrupted'; None: the store's default


@dataclass(kw_only=True)
class BanditRecord:
    t: int
    explored: bool
    chosen_k: int
    arm_means: dict
    arm_counts: dict
    reward: float
    epsilon: float | None = None  # epsilon-greedy only
    p_not_best: float | None = None  # model-based only
    policy: str | None = None
    fallback: bool = False
    arm: str | None = None  # a drafter-choosing policy's arm (its mode, e.g. ngram_4); None when it chose k (0018)


@dataclass(kw_only=True)
class RequestRecord(Measured):
    """A recorded request: what was measured (engine.measure: counts, per-position counts, the time split), and
    where it belongs, what it produced and how it was judged."""

    run_id: int
    seq: int
    mode: str
    prompt_id: str
    tokens_per_s: float  # stored: a server's figure is the client's, which the counts alone do not give
    output_text: str
    output_sha256: str
    identical: bool | None = None
    diverged_at: int | None = None
    trace_id: str | None = None
    warmup: bool = False
    error: str | None = None  # why the request failed (a server's answer); None when it succeeded
    drafter: str | None = None  # what drafted: none, model, ngram, suffix or eagle3 (0018); None before
    turn: int | None = None  # the conversation turn of a multi-turn prompt (1, 2, ...), None for one-turn sets (0019)
    category: str | None = None  # the prompt's category (Spec-Bench's 13), None where the set has none (0019)
    prompt_text: str | None = None  # stored once per (run, prompt) in run_prompts (0022), not in the request row
    queue_s: float | None = None  # served by Phoenix: waiting before its prefill (0024); None otherwise
    batch_size: float | None = None  # served by Phoenix: the mean batch its passes ran in (0024); None otherwise
    cached_tokens: int | None = None  # served by Phoenix: prompt tokens its prefix cache served (0027); None otherwise
    bandit: BanditRecord | None = None
    id: int | None = None
    created_at: datetime | None = None


@dataclass
class WatchInterval:
    """A live server's counters over one interval of `engines watch`, as deltas."""

    seq: int
    seconds: float
    drafts: int
    draft_tokens: int
    accepted: int
    generation_tokens: int
    per_position: list[int] = field(default_factory=list)  # accepted at each draft position, vLLM's meaning

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def tokens_per_s(self) -> float:
        return self.generation_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class ModeSummary:
    mode: str
    n: int
    mean_latency_s: float
    p50_latency_s: float
    p95_latency_s: float
    tokens_per_s: float  # the mean of per-request tokens/s (engine.analysis.compare.TOKENS_PER_S)
    proposed: int
    accepted: int
    draft_s: float
    verify_s: float
    identical_n: int
    checked_n: int
    passes: int = 0
    output_tokens: int = 0
    drafts: int = 0  # passes that drafted at least one token (vLLM's num_drafts)
    failed: int = 0  # requests that ended in an error: left out of every figure above
    speedup: Any = None  # the paired per-prompt speedup against target-only (engine.analysis.speedup.Spread)
    acceptance_ci: tuple[float, float] | None = None  # Wilson's 95% interval for accepted / proposed

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """vLLM's: 1 + accepted / drafting passes (engine.measure)."""
        return mean_acceptance_length(self.accepted, self.drafts)

    @property
    def tokens_per_pass(self) -> float | None:
        """Tokens per verify pass, every pass counted (engine.measure): 1.00 for target-only."""
        return tokens_per_pass(self.accepted, self.passes)


@dataclass
class QueueState:
    """Where a queued run stands: what is ahead of it, who serves the queue, and the request time an ETA rests on."""

    position: int  # 1 = next to be claimed
    queued_ahead_requests: int
    running: int  # runs in progress now (each with a live heartbeat)
    running_left_requests: int
    running_workers: list[str]
    mean_request_s: float | None  # over the target's latest measured requests, warm-up left out
    measured_n: int
    ahead_s: float | None = None  # the requests ahead, each priced by its own run's target; None: one is unmeasured

    def eta_s(self, own_requests: int, workers: int) -> float | None:
        """Seconds until this run is done: every request ahead of it (at its own target's time) and its own,
        shared among the workers."""
        if self.mean_request_s is None or self.ahead_s is None or workers <= 0:
            return None
        return (self.ahead_s + own_requests * self.mean_request_s) / workers


@dataclass
class DistillInfo:
    id: int
    created_at: datetime
    finished_at: datetime | None
    status: str
    config: dict
    out_dir: str
    losses: list
    stage_seconds: dict
    before_run_id: int | None
    after_run_id: int | None
    evaluation: dict | None
    error: str | None
