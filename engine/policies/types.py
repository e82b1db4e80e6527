"""The policy seam: what a policy is told, what it answers, and the Protocol every policy
and wrapper implements.

``t`` is the 0-based index of a decision among one policy's decisions in a run (warm-up
requests excluded). Decision t draws from its own RNG seeded with (seed, t), so a resumed
run, which replays the recorded observations, chooses exactly as an uninterrupted one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engine.measure import Measured

# A per-pass controller: given the pass that just finished (engine.decode.spec.PassOutcome: proposed, accepted;
# None before the first), the k for the next verification pass. It keeps its own state within the request.
PassController = Callable[[object], int]


@dataclass(frozen=True, kw_only=True)
class Decision:
    t: int
    arm: int  # what the policy chose: a k (a bandit over k), or the index of a drafter arm (--drafter-arms)
    explored: bool  # the choice departs from the policy's current best estimate
    policy: str = ""
    epsilon: float | None = None  # epsilon_greedy: the exploration probability of this decision (1.0 in its warm start)
    p_not_best: float | None = None  # model_based: posterior probability that its predicted best arm is not the best
    fallback: bool = False  # the safety fallback chose k=0
    event: str | None = None  # 'fallback_engaged' | 'fallback_recovered' on the first decision after the change


@dataclass(kw_only=True)
class Observation(Measured):
    """What a policy may learn from one finished request: the request as measured (engine.measure, plain numbers
    only) and the reward it was given."""

    reward: float  # tokens/sec
    category: str | None = None  # the prompt's category (Spec-Bench's column group), where the set has one


@runtime_checkable
class Policy(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def arms(self) -> tuple[int, ...]: ...

    @property
    def t(self) -> int:
        """Decisions made so far (warm-up excluded)."""

    def choose(self, prompt_tokens: int | None = None, category: str | None = None) -> Decision: ...

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None: ...

    def snapshot(self) -> tuple[dict, dict]:
        """(per-arm estimate, per-arm count), keyed by str(k), for the recorded step."""

    def pass_controller(self, decision: Decision) -> PassController | None:
        """None keeps decision.arm for the whole request."""

    def pass_rule(self, decision: Decision) -> PassController | None:
        """The policy's own per-pass rule, which pass granularity uses instead of the online model; None if it
        has none. Never consulted at request granularity."""

    def observe_reference(self, tokens_per_s: float) -> None:
        """A target-only request of the same run finished at this speed."""


@dataclass
class PassState:
    """What a per-pass controller remembers within one request."""

    ok: float = 0.0  # accepted drafts seen in this request
    fail: float = 0.0  # passes that rejected a draft
    ema: float | None = None
    idx: int = 0


def clean_reward(reward: float) -> float:
    if not math.isfinite(reward):
        return 0.0  # a broken timing must not poison the estimates
    return max(-1e12, min(1e12, reward))


def decision_rng(seed: int, t: int) -> random.Random:
    return random.Random(f"{seed}:{t}")


class PolicyDefaults:
    """What a policy does unless it says otherwise: one k per request, no use for target-only
    references, and the per-arm tally every policy keeps."""

    arms: tuple[int, ...]
    counts: dict[int, int]
    t: int

    def pass_controller(self, decision: Decision) -> PassController | None:
        return None  # request granularity unless wrapped by PassAdaptive

    def pass_rule(self, decision: Decision) -> PassController | None:
        return None  # no rule of its own: pass granularity uses the online model

    def observe_reference(self, tokens_per_s: float) -> None:
        pass  # only the fallback wrapper uses target-only references

    def tally(self, k: int) -> None:
        if k not in self.counts:
            raise ValueError(f"arm {k} is not in {self.arms}")
        self.counts[k] += 1
        self.t += 1
