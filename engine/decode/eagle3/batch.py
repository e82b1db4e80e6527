"""EAGLE-3 drafting batched across rows: the server's rows that draft with one head share its forwards.

A row's first draft step catches up on the target positions its last pass cached (1 + its accepted drafts, a
different number per row), so it runs on its own, as in ``Eagle3Drafter.propose``. Every further step feeds one
token per row: those run as one forward for every row still drafting, each row's query attending only to its own
cache (padded to the longest, the padding masked). The proposals are each row's own ``propose``'s, up to
floating-point reassociation in the batched GEMMs; the output never depends on them (verification decides).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:  # the drafter calls this module: its type only, no import at run time
    from engine.decode.eagle3.drafter import Eagle3Drafter


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
    picks = head.to_target_ids(head.logits(prenorm)[:, -1].argmax(dim=-1))
    return [(prenorm[j : j + 1], picks[j]) for j in range(len(rows))]
