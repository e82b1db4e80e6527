"""The hybrid drafter: the suffix trees where their match is confident, the EAGLE-3 head everywhere else.

Prompt lookup is right when the answer copies its context and the head when it does not, and both change within one
answer, so the choice is made pass by pass (ArcticInference serves this hybrid: suffix decoding when its match
score is high, its model speculator otherwise). The suffix trees' score of a draft is the sum of its tokens' path
probabilities, the number of tokens the trees expect the target to accept; the trees draft when that score is at
least ``min_score``. The head sees the target's taps of every pass, the ones the suffix trees drafted included, so
it is in step whenever it is asked. ``source`` names who drafted the last proposal, for the per-source counts.
"""

from __future__ import annotations

from engine.decode.config import HybridConfig
from engine.decode.drafters import Drafter
from engine.decode.eagle3 import Eagle3Drafter
from engine.decode.suffix import SuffixDrafter


class HybridDrafter(Drafter):
    """hybrid_<k>: up to k tokens from the suffix trees when their score reaches ``min_score``, else up to
    ``head_k`` from the head (fewer for a -conf mode, which stops the head when it is unsure)."""

    name = "hybrid"
    SOURCES = ("suffix", "eagle3")
    confident = True

    def __init__(self, suffix: SuffixDrafter, head: Eagle3Drafter, cfg: HybridConfig | None = None):
        self.suffix, self.head, self.cfg = suffix, head, cfg or HybridConfig()
        self.taps = head.taps
        self.source: str | None = None

    @property
    def stop_below(self) -> float:
        return self.head.stop_below

    @stop_below.setter
    def stop_below(self, threshold: float) -> None:
        self.head.stop_below = threshold

    def propose(self, context: list[int], k: int) -> list[int]:
        tokens, score = self.suffix.speculate(context, k)
        if tokens and score >= self.cfg.min_score:
            self.source = "suffix"
            return tokens
        self.source = "eagle3"
        return self.head.propose(context, min(k, self.cfg.head_k))

    def observe(self, features) -> None:
        self.head.observe(features)

    def reset(self, prompt_ids: list[int]) -> None:
        self.suffix.reset(prompt_ids)
        self.head.reset(prompt_ids)
        self.source = None

    def finish(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        self.suffix.finish(prompt_ids, output_ids)
        self.head.finish(prompt_ids, output_ids)

    def fork(self) -> HybridDrafter:
        """A drafter for another request decoded at the same time: its own request tree and head cache, the
        run's global tree and the head's weights shared."""
        return HybridDrafter(self.suffix.fork(), self.head.fork(), self.cfg)
