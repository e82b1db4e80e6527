"""How much one drafter's acceptance at a draft position rose over another's on the same prompts (issue 67: a head
fine-tuned on traffic against the head it started from). The figure is each run's pooled rate at that position
(engine.measure's unconditional meaning: accepted / proposed, summed over the prompts both runs answered), and its
interval a paired bootstrap over prompts of the same difference, so the figure and its interval are one statistic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.analysis.stats import against_goal

RESAMPLES = 2000


@dataclass(frozen=True)
class Gain:
    base: float  # the first run's pooled rate at the position, over the shared prompts
    other: float  # the second run's
    diff: float  # other - base
    low: float  # the paired bootstrap's 95% interval of diff
    high: float
    prompts: int  # prompts both runs drafted at the position
    proposed: tuple[int, int]  # drafts at the position behind each rate

    def verdict(self, goal: float) -> str:
        return against_goal(self.diff, self.low, goal)


def counts(requests, mode: str, position: int) -> dict[str, tuple[int, int]]:
    """Per prompt id, (proposed, accepted) at ``position`` over the run's answered requests in ``mode``."""
    out: dict[str, tuple[int, int]] = {}
    for r in requests:
        if r.warmup or r.error is not None or r.mode != mode:
            continue
        at = next((p for p in r.positions if p.position == position), None)
        if at is None or not at.proposed:
            continue
        proposed, accepted = out.get(r.prompt_id, (0, 0))
        out[r.prompt_id] = (proposed + at.proposed, accepted + at.accepted)
    return out


def gain(base: dict[str, tuple[int, int]], other: dict[str, tuple[int, int]], alpha: float = 0.05) -> Gain | None:
    """``other``'s rate minus ``base``'s over their shared prompts; None with fewer than two shared prompts."""
    shared = sorted(set(base) & set(other))
    if len(shared) < 2:
        return None
    b = np.array([base[p] for p in shared], dtype=float)
    o = np.array([other[p] for p in shared], dtype=float)

    def rate(x: np.ndarray) -> np.ndarray:  # rows of (proposed, accepted) -> pooled rate per resample
        return x[..., 1].sum(axis=-1) / x[..., 0].sum(axis=-1)

    picks = np.random.default_rng(0).integers(0, len(shared), size=(RESAMPLES, len(shared)))  # seeded: same page
    diffs = rate(o[picks]) - rate(b[picks])
    low, high = np.quantile(diffs, [alpha / 2, 1 - alpha / 2])
    rb, ro = float(rate(b)), float(rate(o))
    return Gain(rb, ro, ro - rb, float(low), float(high), len(shared), (int(b[:, 0].sum()), int(o[:, 0].sum())))


def rate(per_prompt: dict[str, tuple[int, int]], alpha: float = 0.05) -> tuple[float, float, float] | None:
    """One run's pooled rate at a position with a bootstrap interval over its prompts (drafts within a prompt are not
    independent, so no binomial interval): (rate, low, high); None with fewer than two prompts."""
    if len(per_prompt) < 2:
        return None
    x = np.array([per_prompt[p] for p in sorted(per_prompt)], dtype=float)
    picks = np.random.default_rng(0).integers(0, len(x), size=(RESAMPLES, len(x)))
    draws = x[picks][..., 1].sum(axis=-1) / x[picks][..., 0].sum(axis=-1)
    low, high = np.quantile(draws, [alpha / 2, 1 - alpha / 2])
    return float(x[:, 1].sum() / x[:, 0].sum()), float(low), float(high)


def of_runs(store, base: tuple[int, str], other: tuple[int, str], position: int = 0) -> Gain | None:
    """The gain of (run, mode) ``other`` over (run, mode) ``base`` at ``position``, paired by prompt."""
    return gain(
        counts(store.requests(base[0]), base[1], position), counts(store.requests(other[0]), other[1], position)
    )
