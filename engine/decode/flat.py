"""A forward's tokens flattened: the batch's real tokens as rows of one [N, ...] tensor (what Phoenix's runner's
linear layers see, never a padding row), and back into [B, n, ...] where attention or a caller needs the batch's
shape. ``flat`` holds the real tokens' indices in the [B * n] grid, or None where every position is real. Also which
columns each row's tokens attend (``causal_mask``), and where a prefill on an empty cache can attend row by row
without one (``fresh_rows``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


def grow(x: torch.Tensor, rows: int) -> torch.Tensor:
    """``x`` with zero rows appended up to ``rows``."""
    return x if len(x) >= rows else torch.cat([x, x.new_zeros(rows - len(x), *x.shape[1:])])


def take(x: torch.Tensor, flat: torch.Tensor | None) -> torch.Tensor:
    return x if flat is None else x.index_select(0, flat)


def pad(x: torch.Tensor, B: int, n: int, flat: torch.Tensor | None) -> torch.Tensor:
    """Flat rows back into [B, n, ...], padding positions zero (masked wherever they are read)."""
    if flat is None:
        return x.view(B, n, *x.shape[1:])
    out = x.new_zeros(B * n, *x.shape[1:])
    out.index_copy_(0, flat, x)
    return out.view(B, n, *x.shape[1:])


class States(Sequence):
    """A forward's hidden states (transformers' ``hidden_states``: the input to each layer, then the final norm's
    output), each put back into [B, n, H] when it is read: a drafter reads its taps, three of 31 on SmolLM2, and a
    prefill of several prompts padded every layer's states (a zeroed [B * n, H] tensor and a copy each) for them."""

    def __init__(self, flat_states: list[torch.Tensor], B: int, n: int, flat: torch.Tensor | None):
        self._states, self._shape, self._flat = flat_states, (B, n), flat

    def __len__(self) -> int:
        return len(self._states)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return pad(self._states[i], *self._shape, self._flat)


@dataclass
class Part:
    """One call's share of a forward that runs several (engine.decode.runner.Runner.forward_parts): its rows'
    shape, its own cache, which positions are real (``flat``), how its tokens attend (``fresh``: row by row on an
    empty cache; else ``mask``), the logits it keeps, and where its real tokens start among the forward's."""

    B: int
    n: int
    cache: Any
    mask: torch.Tensor | None
    flat: torch.Tensor | None
    fresh: list[int] | None
    real: int
    keep: int
    start: int


def fresh_rows(keep: torch.Tensor | None, B: int, n: int) -> list[int] | None:
    """Each row's token count where a forward on an empty cache holds each row's tokens as its last columns (one
    prompt, or prompts right-aligned as engine.decode.intake.prefill_together puts them); None where the valid
    tokens lie otherwise (the mask then says which attend)."""
    if keep is None:
        return [n] * B
    lengths = keep.sum(1)
    suffix = torch.arange(n, device=keep.device)[None, :] >= (n - lengths)[:, None]
    return lengths.tolist() if bool((suffix == keep).all()) and bool((lengths > 0).all()) else None


def causal_mask(attention_mask: torch.Tensor | None, B: int, n: int, old: int, device) -> torch.Tensor | None:
    """[B, 1, n, old + n] booleans: a new token sees the valid columns up to its own; None where it sees all
    (one new token and no mask). A query sees itself whatever the mask says, so a padding query never attends to
    nothing (its softmax would be NaN, and NaN keys reach the valid rows through later layers)."""
    if attention_mask is None and n == 1:
        return None
    cols = torch.arange(old + n, device=device)
    own = old + torch.arange(n, device=device)
    allowed = cols[None, :] <= own[:, None]  # [n, S]
    if attention_mask is not None:
        allowed = allowed[None] & attention_mask.bool()[:, None, :]
    else:
        allowed = allowed[None].expand(B, n, old + n)
    allowed = allowed | (cols[None, None, :] == own[None, :, None])
    return allowed[:, None]
