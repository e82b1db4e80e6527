"""The EAGLE-3 drafter: the head proposing k tokens from the target's own hidden states, beside the head itself."""

from __future__ import annotations

import torch

from engine.decode.drafters import Drafter, unsure
from engine.decode.eagle3.batch import propose_batch
from engine.decode.eagle3.head import HeadCache


class Eagle3Drafter(Drafter):
    """An EAGLE-3 head drafting from the target's own hidden states (the taps the target's passes return).

    Head position j pairs the target's taps at position j with the token at j+1 and predicts the token at j+2.
    ``observe`` is handed the taps of the positions each target pass cached (the prompt's first); ``reset`` runs
    the prompt's pairs; the first draft step runs every pair not yet seen, then each further step feeds back the
    head's pre-norm state. Speculative positions in the head's cache are cropped away at the next draft.
    """

    name = "eagle3"
    confident = True

    def __init__(self, head, embed, taps: tuple[int, ...]):
        self.head, self.embed, self.taps = head, embed, tuple(taps)
        self.cache = HeadCache()
        self.real = 0  # pairs in the cache that rest on the target's own taps
        self.pending: torch.Tensor | None = None  # taps [n, 3H] of cached target positions not yet paired

    def observe(self, features: torch.Tensor) -> None:
        self.pending = features if self.pending is None else torch.cat([self.pending, features])

    def reset(self, prompt_ids: list[int]) -> None:
        if self.pending is None or self.pending.shape[0] < len(prompt_ids):
            raise ValueError("the EAGLE-3 drafter needs the target's taps from the prefill")
        self.cache, self.real = HeadCache(), 0
        self.pending = self.pending[-len(prompt_ids) :]  # the prompt's own: nothing left of an aborted request
        if len(prompt_ids) > 1:  # the last prompt position waits for the first generated token
            self.catch_up(prompt_ids, upto=len(prompt_ids) - 1)

    def catch_up(self, seq: list[int], upto: int | None = None) -> torch.Tensor:
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

    def pick(self, prenorm: torch.Tensor) -> torch.Tensor:
        return self.head.to_target_ids(self.head.logits(prenorm)[0, -1].argmax())

    def propose(self, context: list[int], k: int) -> list[int]:
        self.cache.crop(self.real)
        h = self.catch_up(context)
        logits = self.head.logits(h)[0, -1]
        out = [self.head.to_target_ids(logits.argmax())]
        while len(out) < k and not unsure(logits, self.stop_below):
            positions = torch.tensor([[self.real + len(out) - 1]], device=h.device)
            h = self.head.step(self.embed(out[-1].view(1, 1)), h, positions, self.cache)
            logits = self.head.logits(h)[0, -1]
            out.append(self.head.to_target_ids(logits.argmax()))
        return torch.stack(out).tolist()

    def finish(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        self.pending = None

    def fork(self) -> Eagle3Drafter:
        """Its own head cache over the same head and embedding."""
        return Eagle3Drafter(self.head, self.embed, self.taps)

    def batch_key(self) -> object:
        return id(self.head)  # rows drafting with one head share its forwards

    @classmethod
    def propose_batch(cls, drafters, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        return propose_batch(list(drafters), contexts, ks)
