"""The break-even model fitted online from what requests report.

Acceptance: vLLM's unconditional per-position rates U_i (the share of passes
whose first i+1 drafts were all accepted), counted over every pass that drafted
position i. Expected tokens per pass at k drafts: E(k) = 1 + sum_{i<k} U_i; no
parametric shape is assumed where positions were observed, and the last
observed conditional rate extends it past them.

Cost of one pass at k drafts: tau(k) = v0 + v1*k + d*k, where d is draft
seconds per drafted token (measured directly) and v0 + v1*k is the verify pass,
fitted by weighted least squares on each request's mean drafts per pass
against its verify seconds per pass (arm 0 included: it pins v0).
Predicted tokens/sec at k: E(k) / tau(k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from engine.modes import K_MAX as K_LIMIT
from engine.policies.types import Observation


@dataclass
class CostPoint:
    k_mean: float  # drafts per pass
    verify_per_pass: float  # seconds
    weight: float  # passes


@dataclass
class OnlineModel:
    pos_proposed: list[int] = field(default_factory=lambda: [0] * K_LIMIT)
    pos_accepted: list[int] = field(default_factory=lambda: [0] * K_LIMIT)
    pos_requests: list[int] = field(default_factory=lambda: [0] * K_LIMIT)  # requests that drafted position i
    draft_s: float = 0.0
    drafted: int = 0
    points: list[CostPoint] = field(default_factory=list)

    def observe(self, obs: Observation) -> None:
        for i, (p, a) in enumerate(zip(obs.per_position_proposed[:K_LIMIT], obs.per_position_accepted[:K_LIMIT])):
            self.pos_proposed[i] += p
            self.pos_accepted[i] += a
            self.pos_requests[i] += 1 if p else 0
        self.draft_s += max(0.0, obs.draft_s)
        self.drafted += obs.proposed
        passes = obs.passes
        verify = obs.verify_s  # decode passes only: the prefill is kept apart, and is the same for every arm
        if passes > 0 and verify > 0 and math.isfinite(verify):
            self.points.append(CostPoint(obs.proposed / passes, verify / passes, float(passes)))

    @property
    def ready(self) -> bool:
        return bool(self.points) and self.pos_proposed[0] > 0

    def acceptance_draws(self, rng: np.random.Generator | None, n: int) -> np.ndarray:
        """(n, K_LIMIT) unconditional rates: posterior draws, or the means when rng is None.

        Passes of one request share its prompt, so they are not independent draws: acceptance
        varies far more between prompts than between passes. The posterior therefore counts
        each request that drafted position i as one observation of its pooled rate."""
        prop = np.array(self.pos_proposed, dtype=float)
        acc = np.array(self.pos_accepted, dtype=float)
        mean = (acc + 1) / (prop + 2)
        if rng is None:
            u = mean[None, :]
        else:
            n_eff = np.array(self.pos_requests, dtype=float)
            u = rng.beta(mean * n_eff + 1, (1 - mean) * n_eff + 1, size=(n, K_LIMIT))
        seen = int(np.count_nonzero(prop))
        u = np.minimum.accumulate(u, axis=1)  # U_i cannot rise with i
        if 0 < seen < K_LIMIT:
            prev = u[:, seen - 2] if seen >= 2 else np.ones(len(u))
            ratio = np.clip(u[:, seen - 1] / np.maximum(prev, 1e-9), 0.0, 1.0)
            for i in range(seen, K_LIMIT):
                u[:, i] = u[:, i - 1] * ratio
        return u

    def cost_fit(self) -> tuple[float, float, float, float]:
        """(v0, v1, se_v0, se_v1) of verify seconds per pass = v0 + v1 * drafts per pass."""
        x = np.array([p.k_mean for p in self.points])
        y = np.array([p.verify_per_pass for p in self.points])
        w = np.array([p.weight for p in self.points])
        mean_y = float(np.average(y, weights=w))
        floor = 0.05 * mean_y / math.sqrt(len(self.points))  # few points cannot claim certainty
        if np.ptp(x) < 0.5:  # one arm seen: the slope is not identified yet
            return mean_y, 0.0, floor, 0.05 * mean_y
        X = np.stack([np.ones_like(x), x], axis=1)
        W = np.diag(w)
        xtwx = X.T @ W @ X
        beta = np.linalg.solve(xtwx, X.T @ W @ y)
        resid = y - X @ beta
        dof = max(1, len(x) - 2)
        sigma2 = float(resid @ W @ resid) / dof
        cov = sigma2 * np.linalg.inv(xtwx)
        se0, se1 = (math.sqrt(max(v, 0.0)) for v in np.diag(cov))
        return float(beta[0]), float(beta[1]), max(se0, floor), max(se1, floor / 4)

    def draft_cost(self) -> float:
        return self.draft_s / self.drafted if self.drafted else 0.0

    def tokens_per_s(self, arms, rng: np.random.Generator | None = None, n: int = 1) -> np.ndarray:
        """(n, len(arms)) predicted tokens/sec; posterior draws when rng is given."""
        u = self.acceptance_draws(rng, n)
        c0, c1, se0, se1 = self.cost_fit()
        v0: float | np.ndarray = c0
        v1: float | np.ndarray = c1
        if rng is not None:
            v0 = rng.normal(c0, se0, size=(u.shape[0], 1))
            v1 = rng.normal(c1, se1, size=(u.shape[0], 1))
        d = self.draft_cost()
        cum = np.concatenate([np.zeros((u.shape[0], 1)), np.cumsum(u, axis=1)], axis=1)
        ks = np.array(arms)
        expected = 1.0 + cum[:, ks]
        tau = np.maximum(v0 + (v1 + d) * ks[None, :], 1e-6)
        return expected / tau

    def conditional_acceptance(self) -> float:
        """Per-token acceptance a of the geometric model, from the same counts."""
        prop, acc = self.pos_proposed, self.pos_accepted
        # passes that reached position i with every earlier draft accepted: prop_i * U_{i-1}, where
        # U_{i-1} comes from its own denominator (arms mix, so counts at i-1 and i cover different passes)
        reached = [prop[0]] + [prop[i] * acc[i - 1] / prop[i - 1] if prop[i - 1] else 0.0 for i in range(1, K_LIMIT)]
        successes = sum(acc)
        return (successes + 1) / (sum(reached) + 2)
