"""Draft-length policies, part 2: the model-based policy, the acceptance-threshold
baseline, and the wrappers (prompt-length context, per-pass k, safety fallback).

All pure and seeded like engine.bandit. Every policy answers choose(prompt_tokens),
update(k, reward, obs), snapshot(), pass_controller(decision) and
observe_reference(tokens_per_s).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

import numpy as np

from engine.bandit import (DEFAULT_ARMS, UCB1, Decision, EpsilonGreedy, Observation, PolicyDefaults, Thompson,
                           decision_rng)
from engine.online_model import OnlineModel


@dataclass
class ModelBased(PolicyDefaults):
    """Fit per-position acceptance and the pass cost online (engine.online_model) and
    take the k with the best predicted tokens/sec. It explores only when the fit is
    unsure: if fewer than ``confidence`` of the posterior draws agree on the best
    arm, it plays one Thompson draw among them. Cold start: the largest arm (it
    observes every position), then the smallest drafting arm (it pins the slope)."""

    arms: tuple[int, ...] = DEFAULT_ARMS
    seed: int = 42
    confidence: float = 0.9
    draws: int = 256
    name: str = "model_based"
    t: int = 0
    model: OnlineModel = field(default_factory=OnlineModel)
    counts: dict[int, int] = field(default_factory=dict)
    predicted: dict[int, float] = field(default_factory=dict)

    def __post_init__(self):
        self.arms = tuple(sorted(self.arms))
        self.counts = {a: self.counts.get(a, 0) for a in self.arms}
        drafting = [a for a in self.arms if a > 0]
        self.cold = list(dict.fromkeys([max(self.arms)] + drafting[:1]))

    def choose(self, prompt_tokens: int | None = None) -> Decision:
        t = self.t
        if t < len(self.cold) or not self.model.ready:
            return Decision(t, self.cold[min(t, len(self.cold) - 1)], True, 1.0, self.name)
        mean = self.model.tokens_per_s(self.arms)[0]
        self.predicted = {a: float(v) for a, v in zip(self.arms, mean)}
        best = int(np.argmax(mean))  # first maximum: ties go to the smaller k
        rng = np.random.default_rng(decision_rng(self.seed, t).getrandbits(64))
        draws = self.model.tokens_per_s(self.arms, rng, self.draws)
        p_best = float(np.mean(np.argmax(draws, axis=1) == best))
        if p_best >= self.confidence:
            return Decision(t, self.arms[best], False, 1.0 - p_best, self.name)
        k = self.arms[int(np.argmax(draws[0]))]
        return Decision(t, k, k != self.arms[best], 1.0 - p_best, self.name)

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None:
        self.tally(k)
        if obs is not None:
            self.model.observe(obs)

    def snapshot(self) -> tuple[dict, dict]:
        return ({str(a): self.predicted.get(a, 0.0) for a in self.arms}, {str(a): self.counts[a] for a in self.arms})


@dataclass
class EmaHysteresis(PolicyDefaults):
    """The acceptance-threshold controller of serving stacks: an EMA of each
    request's acceptance rate steps k up one drafting arm above ``up`` and down one
    below ``down``. It never drafts zero: acceptance is unobservable there."""

    arms: tuple[int, ...] = DEFAULT_ARMS
    seed: int = 42
    alpha: float = 0.3  # EMA weight of the newest rate
    up: float = 0.8
    down: float = 0.5
    name: str = "ema_hysteresis"
    t: int = 0
    ema: float | None = None
    counts: dict[int, int] = field(default_factory=dict)

    def __post_init__(self):
        self.arms = tuple(sorted(self.arms))
        self.ladder = [a for a in self.arms if a > 0] or [self.arms[0]]
        self.idx = (len(self.ladder) - 1) // 2
        self.counts = {a: self.counts.get(a, 0) for a in self.arms}

    @staticmethod
    def step(ema, idx, rate, alpha, up, down, top) -> tuple[float, int]:
        ema = rate if ema is None else (1 - alpha) * ema + alpha * rate
        if ema > up and idx < top:
            idx += 1
        elif ema < down and idx > 0:
            idx -= 1
        return ema, idx

    def choose(self, prompt_tokens: int | None = None) -> Decision:
        return Decision(self.t, self.ladder[self.idx], False, 0.0, self.name)

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None:
        self.tally(k)
        if obs is not None and obs.proposed:
            self.ema, self.idx = self.step(self.ema, self.idx, obs.accepted / obs.proposed, self.alpha, self.up,
                                           self.down, len(self.ladder) - 1)

    def snapshot(self) -> tuple[dict, dict]:
        return ({str(a): (self.ema or 0.0) if a == self.ladder[self.idx] else 0.0 for a in self.arms},
                {str(a): self.counts[a] for a in self.arms})

    def pass_controller(self, decision: Decision):
        """Within a request, a private copy of the EMA steps k after every pass."""
        state = {"ema": self.ema, "idx": self.ladder.index(decision.k) if decision.k in self.ladder else self.idx,
                 "p": 0, "a": 0}

        def choose_k(stats) -> int:
            if stats.passes:
                p, a = stats.proposed - state["p"], stats.accepted - state["a"]
                state["p"], state["a"] = stats.proposed, stats.accepted
                if p:
                    state["ema"], state["idx"] = self.step(state["ema"], state["idx"], a / p, self.alpha, self.up,
                                                           self.down, len(self.ladder) - 1)
            return self.ladder[state["idx"]]

        return choose_k


BASE_POLICIES = {"epsilon_greedy": EpsilonGreedy, "ucb1": UCB1, "thompson": Thompson, "model_based": ModelBased,
                 "ema_hysteresis": EmaHysteresis}
CONTEXT_EDGES = (96, 192)  # prompt tokens: 34 / 93 / 37 of HumanEval's 164 prompts with the embedded tokenizer


@dataclass
class Contextual(PolicyDefaults):
    """One independent copy of a base policy per prompt-length bucket."""

    base: str
    arms: tuple[int, ...] = DEFAULT_ARMS
    seed: int = 42
    edges: tuple[int, ...] = CONTEXT_EDGES
    t: int = 0
    inners: dict = field(default_factory=dict)
    last: int = 0

    def __post_init__(self):
        self.name = f"contextual_{self.base}"

    def inner(self, prompt_tokens: int | None):
        b = bisect.bisect_right(self.edges, prompt_tokens or 0)
        if b not in self.inners:
            self.inners[b] = BASE_POLICIES[self.base](arms=self.arms, seed=self.seed * 100 + b)
        self.last = b
        return self.inners[b]

    def choose(self, prompt_tokens: int | None = None) -> Decision:
        return replace(self.inner(prompt_tokens).choose(prompt_tokens), t=self.t, policy=self.name)

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None:
        self.inner(obs.prompt_tokens if obs else None).update(k, reward, obs)
        self.t += 1

    def snapshot(self) -> tuple[dict, dict]:
        return self.inner_last().snapshot()

    def inner_last(self):
        return self.inners.get(self.last) or self.inner(None)

    def pass_controller(self, decision: Decision):
        return self.inner_last().pass_controller(decision)
