"""Drafters behind one small interface: reset, draft, commit.

``seq`` always ends with the pending token: the last token the target emitted,
whose KV is not cached yet. ``commit(valid_len)`` says how many leading tokens of
``seq`` are now final, so a drafter can drop whatever it cached beyond them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache

from engine.decode.eagle3 import HeadCache


class ModelDrafter:
    """A small causal LM with its own KV cache, kept in step with the target's."""

    name = "model"
    taps: tuple[int, ...] = ()  # no target hidden states needed

    def __init__(self, model, vocab_limit: int | None = None):
        self.model = model
        self.vocab_limit = vocab_limit  # propose only ids the target also has (padded output layers differ)
        self.cache: Cache | None = None
        self.cache_len = 0
        self.new_cache: Callable[[], Cache] | None = None  # an empty static cache for the next request; None: dynamic

    def reset(self, prompt_ids: list[int], features=None) -> None:
        self.cache = self.new_cache() if self.new_cache else DynamicCache(config=self.model.config)
        self.cache_len = 0
        self._feed(prompt_ids)

    def _feed(self, ids: list[int]) -> torch.Tensor:
        x = torch.tensor([ids], device=self.model.device)
        logits = self.model(input_ids=x, cache=self.cache, use_cache=True, logits_to_keep=1).logits
        self.cache_len += len(ids)
        return logits[0, -1, : self.vocab_limit].argmax()

    def draft(self, seq: list[int], k: int) -> list[int]:
        # After a full accept the cache lags by one drafted token; feeding every
        # uncached token of seq in the first call catches it up in the same pass.
        tok = self._feed(seq[self.cache_len :])
        out = [tok]
        for _ in range(k - 1):
            logits = self.model(input_ids=tok.view(1, 1), cache=self.cache, use_cache=True).logits
            self.cache_len += 1
            tok = logits[0, -1, : self.vocab_limit].argmax()
            out.append(tok)
        return torch.stack(out).tolist()

    def commit(self, valid_len: int, features=None) -> None:
        extra = self.cache_len - valid_len
        if extra > 0 and self.cache is not None:
            self.cache.crop(-extra)
            self.cache_len = valid_len

    def finish(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        pass


class NgramDrafter:
    """Model-free prompt lookup: find the latest earlier match of the last n tokens
    (n from ``max_n`` down to ``min_n``) and propose what followed it."""

    name = "ngram"
    taps: tuple[int, ...] = ()  # no target hidden states needed

    def __init__(self, max_n: int = 3, min_n: int = 1):
        if not 1 <= min_n <= max_n:
            raise ValueError("ngram sizes need 1 <= min_n <= max_n")
        self.max_n, self.min_n = max_n, min_n

    def reset(self, prompt_ids: list[int], features=None) -> None:
        pass

    def draft(self, seq: list[int], k: int) -> list[int]:
        L = len(seq)
        for n in range(min(self.max_n, L - 1), self.min_n - 1, -1):
            tail = seq[L - n :]
            first = tail[0]
            for start in range(L - n - 1, -1, -1):
                if seq[start] == first and seq[start : start + n] == tail:
                    follow = seq[start + n : start + n + k]
                    if follow:
                        return follow
        return []

    def commit(self, valid_len: int, features=None) -> None:
        pass

    def finish(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        pass


class Eagle3Drafter:
    """An EAGLE-3 head drafting from the target's own hidden states (the taps the target's passes return).

    Head position j pairs the target's taps at position j with the token at j+1 and predicts the token at j+2.
    ``reset`` runs the prompt's pairs; ``commit`` hands over the taps of the positions the target just cached; the
    first draft step runs every pair not yet seen, then each further step feeds back the head's pre-norm state.
    Speculative positions in the head's cache are cropped away at the next draft.
    """

    name = "eagle3"

    def __init__(self, head, embed, taps: tuple[int, ...]):
        self.head, self.embed, self.taps = head, embed, tuple(taps)
        self.cache = HeadCache()
        self.real = 0  # pairs in the cache that rest on the target's own taps
        self.pending: torch.Tensor | None = None  # taps [n, 3H] of cached target positions not yet paired

    def reset(self, prompt_ids: list[int], features: torch.Tensor | None = None) -> None:
        if features is None:
            raise ValueError("the EAGLE-3 drafter needs the target's taps from the prefill")
        self.cache, self.real = HeadCache(), 0
        self.pending = features
        if len(prompt_ids) > 1:  # the last prompt position waits for the first generated token
            self._run(prompt_ids, upto=len(prompt_ids) - 1)

    def _run(self, seq: list[int], upto: int | None = None) -> torch.Tensor:
        """Pair pending taps with the tokens after them; the pre-norm states of those positions."""
        assert self.pending is not None
        n = self.pending.shape[0] if upto is None else upto - self.real
        feats, self.pending = self.pending[:n], self.pending[n:]
        tokens = torch.tensor([seq[self.real + 1 : self.real + 1 + n]], device=feats.device)
        positions = torch.arange(self.real, self.real + n, device=feats.device).unsqueeze(0)
        hidden = self.head.fc(feats.unsqueeze(0).to(self.head.fc.weight.dtype))
        out = self.head.step(self.embed(tokens), hidden, positions, self.cache)
        self.real += n
        return out[:, -1:]

    def _pick(self, prenorm: torch.Tensor) -> torch.Tensor:
        return self.head.to_target_ids(self.head.logits(prenorm)[0, -1].argmax())

    def draft(self, seq: list[int], k: int) -> list[int]:
        self.cache.crop(self.real)
        h = self._run(seq)
        tok = self._pick(h)
        out = [tok]
        for i in range(1, k):
            positions = torch.tensor([[self.real + i - 1]], device=h.device)
            h = self.head.step(self.embed(tok.view(1, 1)), h, positions, self.cache)
            tok = self._pick(h)
            out.append(tok)
        return torch.stack(out).tolist()

    def commit(self, valid_len: int, features: torch.Tensor | None = None) -> None:
        if features is not None:
            self.pending = features if self.pending is None else torch.cat([self.pending, features])

    def finish(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        self.pending = None
