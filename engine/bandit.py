"""Draft-length policies. Pure and seeded: no I/O, no clock, no global RNG.

``t`` is the 0-based index of a decision among all bandit decisions of one run
(warm-up requests excluded). Decision t uses its own RNG seeded with (seed, t),
so a resumed run makes exactly the choices an uninterrupted one would.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

DEFAULT_ARMS = (0, 2, 4, 6, 8)


@dataclass
class Decision:
    t: int
    k: int
    explored: bool
    epsilon: float


@dataclass
class EpsilonGreedy:
    """Phoenix's published policy.

    Every arm is first tried twice (round robin, decisions t = 0 .. 2*len(arms)-1,
    recorded with epsilon 1.0). After that, decision t explores with probability
    eps_t = max(0.05, 0.3 * 0.97**t), choosing an arm uniformly; otherwise it takes
    the arm with the best running mean reward (ties go to the smaller k).
    Update: n_a += 1; mean_a += (r - mean_a) / n_a.
    """

    arms: tuple[int, ...] = DEFAULT_ARMS
    seed: int = 42
    tries_each: int = 2
    eps_start: float = 0.3
    eps_decay: float = 0.97
    eps_floor: float = 0.05
    t: int = 0
    means: dict[int, float] = field(default_factory=dict)
    counts: dict[int, int] = field(default_factory=dict)
    name: str = "epsilon_greedy"

    def __post_init__(self):
        self.arms = tuple(self.arms)
        for a in self.arms:
            self.means.setdefault(a, 0.0)
            self.counts.setdefault(a, 0)

    def epsilon(self, t: int) -> float:
        return max(self.eps_floor, self.eps_start * self.eps_decay ** t)

    def choose(self) -> Decision:
        t = self.t
        warm = self.tries_each * len(self.arms)
        if t < warm:
            return Decision(t, self.arms[t % len(self.arms)], True, 1.0)
        rng = random.Random(f"{self.seed}:{t}")
        eps = self.epsilon(t)
        if rng.random() < eps:
            return Decision(t, rng.choice(self.arms), True, eps)
        best = max(self.arms, key=lambda a: (self.means[a], -a))
        return Decision(t, best, False, eps)

    def update(self, k: int, reward: float) -> None:
        if k not in self.counts:
            raise ValueError(f"arm {k} is not in {self.arms}")
        if not math.isfinite(reward):
            reward = 0.0  # a broken timing must not poison the mean
        reward = max(-1e12, min(1e12, reward))
        self.counts[k] += 1
        self.means[k] += (reward - self.means[k]) / self.counts[k]
        self.t += 1

    def snapshot(self) -> tuple[dict, dict]:
        return ({str(a): self.means[a] for a in self.arms}, {str(a): self.counts[a] for a in self.arms})

    def restore(self, t_next: int, means: dict, counts: dict) -> None:
        self.t = t_next
        self.means = {a: float(means.get(str(a), 0.0)) for a in self.arms}
        self.counts = {a: int(counts.get(str(a), 0)) for a in self.arms}


POLICIES = {"epsilon_greedy": EpsilonGreedy}


def make_policy(name: str, arms, seed: int):
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}")
    return POLICIES[name](arms=tuple(arms), seed=seed)
