"""The EAGLE-3 drafter: the head proposing k tokens from the target's own hidden states, beside the head itself."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.decode.drafters import Drafter, unsure
from engine.decode.eagle3.head import HeadCache
from engine.decode.packed import project
from engine.decode.runner import bucket
from engine.decode.sampling import argmax


class Eagle3Drafter(Drafter):
    """An EAGLE-3 head drafting from the target's own hidden states (the taps the target's passes return).

    Head position j pairs the target's taps at position j with the token at j+1 and predicts the token at j+2.
    ``observe`` is handed the taps of the positions each target pass cached (the prompt's first); the first draft
    step runs every pair not yet seen, the prompt's included, then each further step feeds back the head's pre-norm
    state. ``reset`` only keeps the prompt's taps: a row that never drafts (a server under load, where the tuner
    turns speculation off) never pays for the head's prompt pass, which cost every such request about 9 ms on
    SmolLM2 (a third of a step at 8 rows: the tuner made 0.95 of its own "off" there, run #621). Speculative
    positions in the head's cache are cropped away at the next draft.
    """

    name = "eagle3"
    confident = True

    def __init__(self, head, embed, taps: tuple[int, ...]):
        self.head, self.embed, self.taps = head, embed, tuple(taps)
        self.cache = HeadCache()
        self.real = 0  # pairs in the cache that rest on the target's own taps
        self.pending: list[torch.Tensor] = []  # taps [n, 3H] of cached target positions not yet paired, in order

    def observe(self, features: torch.Tensor) -> None:
        self.pending.append(features)  # joined when read: a row that drafts nothing for long copies nothing

    def _unpaired(self) -> torch.Tensor | None:
        if len(self.pending) > 1:
            self.pending = [torch.cat(self.pending)]
        return self.pending[0] if self.pending else None

    def reset(self, prompt_ids: list[int]) -> None:
        taps = self._unpaired()
        if taps is None or taps.shape[0] < len(prompt_ids):
            raise ValueError("the EAGLE-3 drafter needs the target's taps from the prefill")
        self.cache, self.real = HeadCache(), 0
        self.pending = [taps[-len(prompt_ids) :]]  # the prompt's own: nothing left of an aborted request

    def catch_up(self, seq: list[int]) -> torch.Tensor:
        """Pair pending taps with the tokens after them; the pre-norm state of the last. The positions go in
        pieces whose sizes are the runner's buckets (a 157-token prompt: 144, 12 and 1), so the head meets the
        few GEMM shapes ``warm`` ran before the server was ready, never a new one per prompt length (each new
        shape cost oneDNN a kernel build, and a server's first sweep paid for every one)."""
        taps = self._unpaired()
        assert taps is not None
        out = None
        for size in pieces(taps.shape[0]):
            feats, taps = taps[:size], taps[size:]
            tokens = torch.tensor([seq[self.real + 1 : self.real + 1 + size]], device=feats.device)
            positions = torch.arange(self.real, self.real + size, device=feats.device).unsqueeze(0)
            hidden = project(self.head.fc, feats.unsqueeze(0).to(self.head.fc.weight.dtype))
            out = self.head.step(self.embed(tokens), hidden, positions, self.cache)
            self.real += size
        self.pending = [taps] if len(taps) else []
        assert out is not None
        return out[:, -1:]

    def pick(self, prenorm: torch.Tensor) -> torch.Tensor:
        return self.head.to_target_ids(argmax(self.head.logits(prenorm)[0, -1]))

    def propose(self, context: list[int], k: int) -> list[int]:
        self.cache.crop(self.real)
        h = self.catch_up(context)
        logits = self.head.logits(h)[0, -1]
        out = [self.head.to_target_ids(argmax(logits))]
        while len(out) < k and not unsure(logits, self.stop_below):
            positions = torch.tensor([[self.real + len(out) - 1]], device=h.device)
            h = self.head.step(self.embed(out[-1].view(1, 1)), h, positions, self.cache)
            logits = self.head.logits(h)[0, -1]
            out.append(self.head.to_target_ids(argmax(logits)))
        return torch.stack(out).tolist()

    def finish(self, prompt_ids: list[int], output_ids: list[int]) -> None:
        self.pending = []

    def fork(self) -> Eagle3Drafter:
        """Its own head cache over the same head and embedding."""
        return Eagle3Drafter(self.head, self.embed, self.taps)

    def batch_key(self) -> object:
        return id(self.head)  # rows drafting with one head share its forwards

    @classmethod
    def propose_batch(cls, drafters, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        return propose_batch(list(drafters), contexts, ks)


MAX_PIECE = 512  # the largest piece: a long prompt goes in several
SIZES = sorted({bucket(n) for n in range(1, MAX_PIECE + 1)}, reverse=True)  # every piece size, the largest first


def pieces(n: int) -> list[int]:
    """``n`` positions as bucket sizes (engine.decode.runner.bucket), the largest first; [0] for none."""
    if n <= 0:
        return [n]
    out = []
    while n > 0:
        size = next(s for s in SIZES if s <= n)
        out.append(size)
        n -= size
    return out


def warm(drafter: Eagle3Drafter) -> list[int]:
    """The head's catch-up run once at every piece size on a throwaway copy of ``drafter``, so no request's prompt
    pass builds a kernel; the sizes run."""
    weight = drafter.head.fc.weight
    with torch.inference_mode():
        for size in SIZES:
            d = drafter.fork()
            d.pending = [torch.zeros(size, weight.shape[1], dtype=weight.dtype, device=weight.device)]
            d.catch_up([0] * (size + 1))
    return SIZES


# Drafting batched across rows. the server's rows that draft with one head share its forwards. A row's first draft
# step catches up on the target positions its last pass cached (1 + its accepted drafts, a different number per row),
# so it runs on its own, as in ``Eagle3Drafter.propose``. Every further step feeds one token per row: those run as one
# forward for every row still drafting, each row's query attending only to its own cache (padded to the longest, the
# padding masked). The proposals are each row's own ``propose``'s, up to floating-point reassociation in the batched
# GEMMs; the output never depends on them (verification decides).


def propose_batch(drafters: list[Eagle3Drafter], contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
    """Each row's ``ks[i]`` drafts (none where k is 0). All drafters share one head and embedding."""
    out: list[list[int]] = [[] for _ in drafters]
    states: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # row -> (pre-norm state, last token)
    for i, (d, context, k) in enumerate(zip(drafters, contexts, ks)):
        if k > 0:
            d.cache.crop(d.real)
            h = d.catch_up(context)
            tok = d.pick(h)
            out[i].append(int(tok))
            states[i] = (h, tok)
    for step in range(1, max(ks, default=0)):
        rows = [i for i in states if ks[i] > step]
        if not rows:
            break
        picked = _step(drafters, rows, states, step)
        for i, (h, tok) in zip(rows, picked):
            states[i] = (h, tok)
            out[i].append(int(tok))
    return out


def _step(drafters: list[Eagle3Drafter], rows: list[int], states: dict, step: int) -> list[tuple]:
    """One head forward for ``rows``, a token each at position real + step - 1 of its own cache."""
    first = drafters[rows[0]]
    head, embed = first.head, first.embed
    hidden = torch.cat([states[i][0] for i in rows])  # [R, 1, H]
    tokens = torch.stack([states[i][1] for i in rows]).view(len(rows), 1)
    positions = torch.tensor([[drafters[i].real + step - 1] for i in rows], device=hidden.device)
    q, k, v = head.qkv(embed(tokens), hidden, positions)
    keys, values = [], []
    for j, i in enumerate(rows):
        kj, vj = drafters[i].cache.append(k[j : j + 1], v[j : j + 1])
        keys.append(kj)
        values.append(vj)
    longest = max(kj.shape[2] for kj in keys)
    mask = torch.zeros(len(rows), 1, 1, longest, dtype=torch.bool, device=q.device)
    for j, kj in enumerate(keys):
        mask[j, :, :, : kj.shape[2]] = True
    padded_k = torch.cat([F.pad(kj, (0, 0, 0, longest - kj.shape[2])) for kj in keys])
    padded_v = torch.cat([F.pad(vj, (0, 0, 0, longest - vj.shape[2])) for vj in values])
    attn = F.scaled_dot_product_attention(q, padded_k, padded_v, attn_mask=mask, enable_gqa=True)
    prenorm = head.after_attention(attn.transpose(1, 2), hidden)
    picks = head.to_target_ids(argmax(head.logits(prenorm)[:, -1]))
    return [(prenorm[j : j + 1], picks[j]) for j in range(len(rows))]
