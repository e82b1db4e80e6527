"""A forward's tokens flattened: the batch's real tokens as rows of one [N, ...] tensor (what Phoenix's runner's
linear layers see, never a padding row), and back into [B, n, ...] where attention or a caller needs the batch's
shape. ``flat`` holds the real tokens' indices in the [B * n] grid, or None where every position is real."""

from __future__ import annotations

from collections.abc import Sequence

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
