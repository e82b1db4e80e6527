"""Drafters behind one small interface (engine.decode.spec.Drafter): ``propose(context, k)``, and the optional
hooks a drafter with state needs.

``context`` always ends with the pending token: the last token the target emitted, whose KV is not cached yet.
The draft model keeps its own KV cache in step (``reset``, ``rollback``); prompt lookup keeps nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache


def unsure(logits: torch.Tensor, threshold: float) -> bool:
    """The drafter's top probability is under ``threshold``: a confident drafter stops after this token
    (transformers' assistant_confidence_threshold keeps the unsure token and drafts no further)."""
    return bool(threshold > 0 and torch.softmax(logits.float(), dim=-1).max() < threshold)


class ModelDrafter:
    """A small causal LM with its own KV cache, kept in step with the target's."""

    name = "model"

    def __init__(self, model, vocab_limit: int | None = None):
        self.model = model
        self.vocab_limit = vocab_limit  # propose only ids the target also has (padded output layers differ)
        self.stop_below = 0.0  # a -conf mode's confidence threshold for this request; 0: always draft k
        self.cache: Cache | None = None
        self.cache_len = 0
        self.new_cache: Callable[[], Cache] | None = None  # an empty static cache for the next request; None: dynamic

    def reset(self, prompt_ids: list[int]) -> None:
        self.cache = self.new_cache() if self.new_cache else DynamicCache(config=self.model.config)
        self.cache_len = 0
        self._feed(prompt_ids)

    def _feed(self, ids: list[int]) -> torch.Tensor:
        """The logits after ``ids``, fed on top of the cache."""
        x = torch.tensor([ids], device=self.model.device)
        logits = self.model(input_ids=x, cache=self.cache, use_cache=True, logits_to_keep=1).logits
        self.cache_len += len(ids)
        return logits[0, -1, : self.vocab_limit]

    def propose(self, context: list[int], k: int) -> list[int]:
        # After a full accept the cache lags by one drafted token; feeding every
        # uncached token of the context in the first call catches it up in the same pass.
        logits = self._feed(context[self.cache_len :])
        out = [logits.argmax()]
        while len(out) < k and not unsure(logits, self.stop_below):
            logits = self.model(input_ids=out[-1].view(1, 1), cache=self.cache, use_cache=True).logits
            self.cache_len += 1
            logits = logits[0, -1, : self.vocab_limit]
            out.append(logits.argmax())
        return torch.stack(out).tolist()

    def rollback(self, final_len: int) -> None:
        """The first ``final_len`` context tokens are final: drop the cached drafts the target rejected."""
        extra = self.cache_len - final_len
        if extra > 0 and self.cache is not None:
            self.cache.crop(-extra)
            self.cache_len = final_len


class NgramDrafter:
    """Model-free prompt lookup: find the latest earlier match of the last n tokens
    (n from ``max_n`` down to ``min_n``) and propose what followed it."""

    name = "ngram"

    def __init__(self, max_n: int = 3, min_n: int = 1):
        if not 1 <= min_n <= max_n:
            raise ValueError("ngram sizes need 1 <= min_n <= max_n")
        self.max_n, self.min_n = max_n, min_n

    def propose(self, context: list[int], k: int) -> list[int]:
        seq, L = context, len(context)
        for n in range(min(self.max_n, L - 1), self.min_n - 1, -1):
            tail = seq[L - n :]
            first = tail[0]
            for start in range(L - n - 1, -1, -1):
                if seq[start] == first and seq[start : start + n] == tail:
                    follow = seq[start + n : start + n + k]
                    if follow:
                        return follow
        return []
