"""What a request asks of each token (vLLM's `sampling_params`): a frozen dataclass without torch, so configs and
the server's request parser can build it before anything loads. engine.decode.sampling applies it."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, replace

MAX_LOGPROBS = 20  # OpenAI's top_logprobs bound (vLLM's default max_logprobs is 20 too)
# Below this a temperature decodes greedily, as vLLM's _SAMPLING_EPS: logits / 1e-40 overflow float32 to inf, and
# the request sampled 'seenseenseen...' instead of the argmax it asked for in effect
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    """What a request asks of each token (vLLM's ``SamplingParams``, the fields Phoenix honours). Processors apply
    in transformers' order: temperature, top-k, top-p, min-p."""

    temperature: float = 0.0  # 0: greedy (the argmax)
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: every token
    min_p: float = 0.0
    seed: int | None = None  # None: one is drawn for the request (``resolved``)
    logprobs: int | None = None  # None: none; n >= 0: the picked token's logprob and the n most likely
    stop_token_ids: tuple[int, ...] = ()  # besides EOS: the output ends at (and keeps) any of these

    def __post_init__(self) -> None:
        if not (0.0 <= self.temperature <= 100.0):  # NaN fails this too
            raise ValueError(f"temperature must be in 0..100, got {self.temperature!r}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 or a positive count, got {self.top_k!r}")
        if not (0.0 <= self.min_p <= 1.0):
            raise ValueError(f"min_p must be in 0..1, got {self.min_p!r}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_LOGPROBS:
            raise ValueError(f"logprobs must be in 0..{MAX_LOGPROBS}, got {self.logprobs!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW or self.top_k == 1

    def resolved(self) -> SamplingParams:
        """With a seed: the request's own, or a fresh one (so every sampled request can be replayed)."""
        return self if self.seed is not None or self.greedy else replace(self, seed=secrets.randbits(63))


GREEDY = SamplingParams()
