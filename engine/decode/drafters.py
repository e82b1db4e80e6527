"""Drafters behind one small typed interface, ``Drafter``: ``propose(context, k)``, and the parts a drafter with
state overrides (transformers' candidate generator is two explicit methods; no capability is looked up by name).

``context`` always ends with the pending token: the last token the target emitted, whose KV is not cached yet.
The draft model keeps its own KV cache in step (``reset``, ``rollback``); prompt lookup keeps nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache

from engine.decode.sampling import argmax


def unsure(logits: torch.Tensor, threshold: float) -> bool:
    """The drafter's top probability is under ``threshold``: a confident drafter stops after this token
    (transformers' assistant_confidence_threshold keeps the unsure token and drafts no further)."""
    return bool(threshold > 0 and torch.softmax(logits.float(), dim=-1).max() < threshold)


class Drafter:
    """Every drafter: a name and up to k tokens to follow ``context``. Fewer than k, or none, is a valid proposal.

    The stateful parts do nothing here; a drafter with state overrides the ones it needs, and the request's
    ``Sequence`` (engine.decode.sequence) calls them in one order: ``observe`` (the prefill's taps), ``reset``,
    then per pass ``propose``, ``rollback``, ``observe``; ``finish`` when the request ended.
    - ``taps``: the target layers whose hidden states the drafter reads (EAGLE-3); ``observe(features)`` is
      handed their states at the positions each target pass cached, the prompt's first;
    - ``rollback(final_len)``: the first ``final_len`` tokens of the context are final; drafts cached beyond go;
    - ``finish(prompt_ids, output_ids)``: for drafters that learn across requests (the suffix trees' global tree);
    - ``source``: a drafter with several sources (the hybrid) names the one behind its last proposal;
    - ``confident``: it has probabilities, so a -conf mode may stop it early (``stop_below``);
    - ``fork()``: a drafter for another request decoded at the same time (itself where it keeps no state);
    - ``batch_key()`` / ``propose_batch``: rows whose drafters share a key propose together in one call;
    - ``deferrable``: ``reset`` may wait until the first pass that drafts (engine.decode.sequence.Sequence.defer).
    """

    name = "drafter"
    taps: tuple[int, ...] = ()
    source: str | None = None
    confident = False
    stop_below = 0.0  # a -conf mode's confidence threshold for this request; 0: always draft k
    deferrable = False  # its ``reset`` may wait for the first pass that drafts (it reads only the prompt's ids)

    def propose(self, context: list[int], k: int) -> list[int]:
        raise NotImplementedError

    def reset(self, prompt_ids: list[int]) -> None:
        pass

    def observe(self, features: torch.Tensor) -> None:
        pass

    def rollback(self, final_len: int) -> None:
        pass

    def finish(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        pass

    def fork(self) -> Drafter:
        return self

    def options(self) -> tuple[str, ...]:
        """The drafters a per-step choice picks among (engine.decode.choice); () for a drafter that is one."""
        return ()

    def use(self, kind: str) -> None:
        """Propose with ``kind`` from now on (a choice's member); nothing for a drafter that is one."""

    def batch_key(self) -> object | None:
        """Drafters with the same key (not None) may draft their rows together through ``propose_batch``."""
        return None

    @classmethod
    def propose_batch(cls, drafters: Sequence[Drafter], contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        return [d.propose(c, k) if k > 0 else [] for d, c, k in zip(drafters, contexts, ks)]


class ModelDrafter(Drafter):
    """A small causal LM with its own KV cache, kept in step with the target's."""

    name = "model"
    confident = True
    deferrable = True  # ``propose`` feeds every context token the cache lacks, whenever the prompt pass ran

    def __init__(self, model, vocab_limit: int | None = None):
        self.model = model
        self.vocab_limit = vocab_limit  # propose only ids the target also has (padded output layers differ)
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
        out = [argmax(logits)]
        while len(out) < k and not unsure(logits, self.stop_below):
            logits = self.model(input_ids=out[-1].view(1, 1), cache=self.cache, use_cache=True).logits
            self.cache_len += 1
            logits = logits[0, -1, : self.vocab_limit]
            out.append(argmax(logits))
        return torch.stack(out).tolist()

    def rollback(self, final_len: int) -> None:
        """The first ``final_len`` context tokens are final: drop the cached drafts the target rejected."""
        extra = self.cache_len - final_len
        if extra > 0 and self.cache is not None:
            self.cache.crop(-extra)
            self.cache_len = final_len

    def fork(self) -> ModelDrafter:
        """Its own KV cache over the same weights."""
        return ModelDrafter(self.model, self.vocab_limit)


class NgramDrafter(Drafter):
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
