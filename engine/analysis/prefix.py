"""A served run's prefix cache, from its requests' rows: the share of requests it served part of their prompt, the
share of prompt tokens it served, and the time to first token with a hit against without (each median with its n).
One definition, for the dashboard and the findings alike."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


def is_hit(cached_tokens: int) -> bool:
    """A request the cache served: at least one prompt token taken from it (the one definition of a hit)."""
    return cached_tokens > 0


@dataclass(frozen=True)
class PrefixSummary:
    requests: int
    hits: int  # requests that took at least one prompt token from the cache
    prompt_tokens: int
    cached_tokens: int
    ttft_hit_s: float | None  # median time to first token of the requests with a hit
    ttft_miss_s: float | None  # ... of the requests without one

    @property
    def hit_rate(self) -> float:
        return self.hits / self.requests if self.requests else 0.0

    @property
    def token_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def ttft_ratio(self) -> float | None:
        """Median TTFT with a hit over without: below 1, the time the cache saved."""
        if self.ttft_hit_s is None or not self.ttft_miss_s:
            return None
        return self.ttft_hit_s / self.ttft_miss_s


def summary(rows: list[tuple[int | None, int, float | None]]) -> PrefixSummary | None:
    """``rows``: (cached tokens, prompt tokens, TTFT in seconds) per answered request; None where no request
    recorded its cached tokens (a run without a prefix cache, or recorded before it was kept)."""
    kept = [(c, p, t) for c, p, t in rows if c is not None]
    if not kept:
        return None
    hit = [t for c, _, t in kept if is_hit(c) and t is not None]
    miss = [t for c, _, t in kept if not is_hit(c) and t is not None]
    return PrefixSummary(
        requests=len(kept),
        hits=sum(1 for c, _, _ in kept if is_hit(c)),
        prompt_tokens=sum(p for _, p, _ in kept),
        cached_tokens=sum(c for c, _, _ in kept),
        ttft_hit_s=statistics.median(hit) if hit else None,
        ttft_miss_s=statistics.median(miss) if miss else None,
    )
