"""The reward-only bandits: epsilon-greedy (Phoenix's published policy), UCB1, Thompson."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.modes import DEFAULT_ARMS
from engine.policies.types import Decision, Observation, PolicyDefaults, clean_reward, decision_rng


@dataclass
class ArmStats(PolicyDefaults):
    """Running count, mean and sum of squares per arm; the base of the reward-only bandits."""

    arms: tuple[int, ...] = DEFAULT_ARMS
    seed: int = 42
    t: int = 0
    means: dict[int, float] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    m2: dict[int, float] = field(default_factory=dict)

    def __post_init__(self):
        self.arms = tuple(self.arms)
        for a in self.arms:
            self.means.setdefault(a, 0.0)
            self.counts.setdefault(a, 0)
            self.m2.setdefault(a, 0.0)

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None:
        self.tally(k)
        reward = clean_reward(reward)
        delta = reward - self.means[k]
        self.means[k] += delta / self.counts[k]
        self.m2[k] += delta * (reward - self.means[k])  # Welford: numerically stable variance

    def snapshot(self) -> tuple[dict, dict]:
        return ({str(a): self.means[a] for a in self.arms}, {str(a): self.counts[a] for a in self.arms})

    def best_mean(self) -> int:
        return max(self.arms, key=lambda a: (self.means[a], -a))  # ties go to the smaller k

    def untried(self) -> int | None:
        return next((a for a in self.arms if self.counts[a] == 0), None)


@dataclass
class EpsilonGreedy(ArmStats):
    """Phoenix's published policy.

    Every arm is first tried twice (round robin, decisions t = 0 .. 2*len(arms)-1,
    recorded with epsilon 1.0). After that, decision t explores with probability
    eps_t = max(0.05, 0.3 * 0.97**t), choosing an arm uniformly; otherwise it takes
    the arm with the best running mean reward (ties go to the smaller k).
    Update: n_a += 1; mean_a += (r - mean_a) / n_a.
    """

    tries_each: int = 2
    eps_start: float = 0.3
    eps_decay: float = 0.97
    eps_floor: float = 0.05
    name: str = "epsilon_greedy"

    def epsilon(self, t: int) -> float:
        return max(self.eps_floor, self.eps_start * self.eps_decay**t)

    def choose(self, prompt_tokens: int | None = None, category: str | None = None) -> Decision:
        t = self.t
        if t < self.tries_each * len(self.arms):
            return Decision(t=t, arm=self.arms[t % len(self.arms)], explored=True, epsilon=1.0, policy=self.name)
        rng = decision_rng(self.seed, t)
        eps = self.epsilon(t)
        if rng.random() < eps:
            return Decision(t=t, arm=rng.choice(self.arms), explored=True, epsilon=eps, policy=self.name)
        return Decision(t=t, arm=self.best_mean(), explored=False, epsilon=eps, policy=self.name)


@dataclass
class UCB1(ArmStats):
    """UCB1 (Auer et al. 2002) on tokens/sec normalised by the largest reward seen,
    so rewards lie in [0, 1] as the bound assumes. Each arm is tried once first."""

    name: str = "ucb1"
    max_reward: float = 0.0

    def update(self, k: int, reward: float, obs: Observation | None = None) -> None:
        super().update(k, reward, obs)
        self.max_reward = max(self.max_reward, clean_reward(reward))

    def index(self, a: int) -> float:
        scale = self.max_reward or 1.0
        return self.means[a] / scale + math.sqrt(2.0 * math.log(max(self.t, 1)) / self.counts[a])

    def choose(self, prompt_tokens: int | None = None, category: str | None = None) -> Decision:
        first = self.untried()
        if first is not None:
            return Decision(t=self.t, arm=first, explored=True, policy=self.name)
        k = max(self.arms, key=lambda a: (self.index(a), -a))
        return Decision(t=self.t, arm=k, explored=k != self.best_mean(), policy=self.name)


@dataclass
class Thompson(ArmStats):
    """Gaussian Thompson sampling on tokens/sec: arm a's mean is drawn from
    N(mean_a, s_a^2 / n_a), with s_a the arm's sample deviation (the pooled one
    while an arm has fewer than two rewards). Each arm is tried once first."""

    name: str = "thompson"

    def spread(self, a: int) -> float:
        if self.counts[a] >= 2:
            return math.sqrt(self.m2[a] / (self.counts[a] - 1))
        pooled = [math.sqrt(self.m2[b] / (self.counts[b] - 1)) for b in self.arms if self.counts[b] >= 2]
        if pooled:
            return sum(pooled) / len(pooled)
        return abs(self.means[a]) * 0.5 + 1e-9  # a wide prior until any arm has two rewards

    def choose(self, prompt_tokens: int | None = None, category: str | None = None) -> Decision:
        first = self.untried()
        if first is not None:
            return Decision(t=self.t, arm=first, explored=True, policy=self.name)
        rng = decision_rng(self.seed, self.t)
        draws = {a: rng.gauss(self.means[a], self.spread(a) / math.sqrt(self.counts[a])) for a in self.arms}
        k = max(self.arms, key=lambda a: (draws[a], -a))
        return Decision(t=self.t, arm=k, explored=k != self.best_mean(), policy=self.name)
