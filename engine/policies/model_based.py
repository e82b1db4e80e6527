"""The model-based policy: the break-even model fitted online, explored only where unsure."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.modes import DEFAULT_ARMS
from engine.policies.online_model import OnlineModel
from engine.policies.types import Decision, Observation, PolicyDefaults, decision_rng


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

    def choose(self, prompt_tokens: int | None = None, category: str | None = None) -> Decision:
        t = self.t
        if t < len(self.cold) or not self.model.ready:
            return Decision(t=t, arm=self.cold[min(t, len(self.cold) - 1)], explored=True, policy=self.name)
        mean = self.model.tokens_per_s(self.arms)[0]
        self.predicted = {a: float(v) for a, v in zip(self.arms, mean)}
        best = int(np.argmax(mean))  # first maximum: ties go to the smaller k
        rng = np.random.default_rng(decision_rng(self.seed, t).getrandbits(64))
        draws = self.model.tokens_per_s(self.arms, rng, self.draws)
        p_best = float(np.mean(np.argmax(draws, axis=1) == best))
        if p_best >= self.confidence:
            return Decision(t=t, arm=self.arms[best], explored=False, p_not_best=1.0 - p_best, policy=self.name)
        k = self.arms[int(np.argmax(draws[0]))]
        return Decision(t=t, arm=k, explored=k != self.arms[best], p_not_best=1.0 - p_best, policy=self.name)

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None:
        self.tally(k)
        if obs is not None:
            self.model.observe(obs)

    def snapshot(self) -> tuple[dict, dict]:
        return ({str(a): self.predicted.get(a, 0.0) for a in self.arms}, {str(a): self.counts[a] for a in self.arms})
