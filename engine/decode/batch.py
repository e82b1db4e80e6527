"""Batched verification, the hot path of Phoenix's server (gpt-fast style: small verbs, tensors in and out, no
I/O, logging or timing in here).

Rows share one KV cache of width T, each with its own valid columns (``BatchCache.valid``) and its own length (the
tokens it has cached, which set its next positions). A verify appends every row's pending token and drafts at the
same columns, right-padded to the widest row; rejected drafts and padding stay in place, masked, and are
overwritten when the cache is compacted: never zeroed (a zeroed key would still add e^0 to the softmax
denominator). Attention sees each row's valid columns only, and RoPE was applied with the row's own positions
before caching, so a row's columns may sit anywhere in the cache. Rows may have different k, k = 0 included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from engine.decode.sampling import argmax
from engine.decode.sequence import PassOutcome
from engine.decode.spec import Pick, accepted_prefix

PAD_ID = 0  # the input id of padding columns: masked, so any id serves
SPARE = 64  # free columns a layer keeps beyond its tokens, so a step's tokens are written in place


class RoomyLayer(DynamicLayer):
    """A full-attention cache layer whose keys and values are views of buffers with spare columns and spare rows:
    a step's tokens are written in place, where ``DynamicLayer`` concatenates, copying the whole cache every step
    (at 16 rows of about 200 tokens that copy was 17% of a step's CPU time: SmolLM2 bf16, 2-core Xeon with AMX,
    2026-12-02). A request joining the batch is written into the next spare row (``join``) and one leaving takes
    the last row into its place (``move_rows``): a concatenation or an ``index_select`` copied every row's cache,
    and its adoption copied it again (at 16 rows of 300 tokens, SmolLM2 bf16, a join cost 60 ms and a leave 46 ms,
    more than a decode step: 2-core Zen 4, 2026-12-06). Whatever assigns ``keys``/``values`` otherwise (compaction,
    a prefix restore) is adopted at the next update; a crop keeps a prefix view of the same buffer, adopted
    without a copy."""

    _k: torch.Tensor | None = None
    _v: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self._adopt(key_states)
        b, n = key_states.shape[0], key_states.shape[-2]
        self._reserve(b, length + n)
        assert self._k is not None and self._v is not None
        self._k[:b, :, length : length + n].copy_(key_states)
        self._v[:b, :, length : length + n].copy_(value_states)
        self._view(b, length + n)
        return self.keys, self.values

    def join(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """One more row, the last: ``keys``/``values`` [1, H, L, D] (a request prefilled on its own); every row is
        then as wide as the widest, its new columns zeros (masked: no row attends to them, and a zero is finite)."""
        self._adopt(keys)
        assert self.keys is not None
        b, t, length = self.keys.shape[0], self.keys.shape[-2], keys.shape[-2]
        width = max(t, length)
        self._reserve(b + 1, width)
        assert self._k is not None and self._v is not None
        for buf, new in ((self._k, keys), (self._v, values)):
            buf[:b, :, t:width].zero_()
            buf[b, :, :length].copy_(new[0])
            buf[b, :, length:width].zero_()
        self._view(b + 1, width)

    def move_rows(self, moves: list[tuple[int, int]], rows: int) -> None:
        """Each (source, destination) row copied in place, then the first ``rows`` rows are the cache."""
        assert self.keys is not None
        self._adopt(self.keys)
        assert self._k is not None and self._v is not None
        t = self.keys.shape[-2]
        for src, dst in moves:
            self._k[dst, :, :t].copy_(self._k[src, :, :t])
            self._v[dst, :, :t].copy_(self._v[src, :, :t])
        self._view(rows, t)

    def _held(self) -> tuple[torch.Tensor, torch.Tensor]:
        assert self.keys is not None and self.values is not None
        return self.keys, self.values

    def _view(self, rows: int, cols: int) -> None:
        assert self._k is not None and self._v is not None
        self.keys, self.values = self._k[:rows, :, :cols], self._v[:rows, :, :cols]

    def _adopt(self, like: torch.Tensor) -> int:
        """The tokens cached now; ``keys``/``values`` moved into buffers of this layer's own if they are not views
        of them."""
        keys = self.keys
        if keys is None or keys.dim() != 4 or keys.shape[-2] == 0:
            shape = (like.shape[0], like.shape[1], SPARE, like.shape[3])
            self._k, self._v = like.new_empty(shape), like.new_empty(shape)
            self._view(like.shape[0], 0)
            return 0
        buf = self._k
        if buf is None or keys.data_ptr() != buf.data_ptr() or keys.stride() != buf.stride():
            self._reserve(keys.shape[0], keys.shape[-2], self._held())
        elif keys.shape[1] != buf.shape[1] or keys.shape[0] > buf.shape[0] or keys.shape[-2] > buf.shape[-2]:
            self._reserve(keys.shape[0], keys.shape[-2], self._held())
        return keys.shape[-2]

    def _reserve(self, rows: int, cols: int, source: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """Room for ``rows`` rows of ``cols`` columns, what is cached kept (``source``: keys and values to move in,
        from outside the buffers). Rows grow to twice what they held and columns by half, so joins and steps
        rarely copy."""
        old = self._k
        if source is None:
            assert old is not None
            if old.shape[0] >= rows and old.shape[-2] >= cols:
                return
        keys, values = source or self._held()
        held_rows, held_cols = (old.shape[0], old.shape[-2]) if old is not None else (0, 0)
        room_rows = held_rows if rows <= held_rows else max(rows, 2 * held_rows)
        room_cols = held_cols if cols <= held_cols else max(cols + SPARE, (held_cols * 3) // 2)
        shape = (room_rows, keys.shape[1], room_cols, keys.shape[3])
        new_k, new_v = keys.new_empty(shape), values.new_empty(shape)
        b, t = keys.shape[0], keys.shape[-2]
        new_k[:b, :, :t].copy_(keys)
        new_v[:b, :, :t].copy_(values)
        self._k, self._v = new_k, new_v
        self._view(b, t)


def roomy_cache(config) -> DynamicCache:
    """A growing cache for the batched step: its full-attention layers write a step's tokens in place."""
    cache = DynamicCache(config=config)
    cache.layers = [RoomyLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def unbatchable(model) -> str | None:
    """Why this model's rows cannot share one batch cache, or None where they can: rows of different lengths sit in
    one cache by their valid columns, which only full-attention layers keep whole. A sliding-window layer (Gemma 2
    and 3, Mistral's first release) drops its oldest columns, so its rows decode one at a time, each exact."""
    config = getattr(model, "config", None)
    try:
        layers = DynamicCache(config=config).layers if config is not None else []
    except Exception:  # a config transformers' cache cannot read: the model's own forward would fail first
        return None
    odd = sorted({type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer})
    return f"{', '.join(odd)} cache layers (sliding-window attention)" if odd else None


def roomy_layers(cache: DynamicCache) -> list[RoomyLayer] | None:
    """The cache's layers where every one is a RoomyLayer (a plain full-attention model); None otherwise."""
    layers = list(cache.layers)
    return cast(list[RoomyLayer], layers) if all(type(layer) is RoomyLayer for layer in layers) else None


@dataclass
class BatchCache:
    """A ``DynamicCache`` over B rows plus which of its T columns each row may attend to."""

    cache: DynamicCache
    valid: torch.Tensor  # [B, T] bool: the row's cached tokens, in order
    lengths: list[int]  # tokens each row has cached: its next position

    @classmethod
    def empty(cls, device: torch.device) -> BatchCache:
        return cls(DynamicCache(), torch.zeros(0, 0, dtype=torch.bool, device=device), [])

    @property
    def rows(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        return int(self.valid.shape[1])

    def _layers(self) -> list:
        return _kv_layers(self.cache)

    def add_row(self, row: DynamicCache, length: int) -> None:
        """Join a request prefilled on its own (``row``: one row, ``length`` columns, all valid) as the last row."""
        if self.rows == 0:
            self.cache = row
            self.valid = torch.ones(1, length, dtype=torch.bool, device=self.valid.device)
            self.lengths = [length]
            return
        width = max(self.width, length)
        roomy = roomy_layers(self.cache)
        if roomy is not None:  # into each layer's spare row: no row already in the batch is copied
            for layer, theirs in zip(roomy, _kv_layers(row)):
                layer.join(theirs.keys, theirs.values)
        else:
            self._pad_to(width)
            for mine, theirs in zip(self._layers(), _kv_layers(row)):
                mine.keys = torch.cat([mine.keys, _pad_columns(theirs.keys, width)], dim=0)
                mine.values = torch.cat([mine.values, _pad_columns(theirs.values, width)], dim=0)
        extra = torch.zeros(self.rows, width - self.width, dtype=torch.bool, device=self.valid.device)
        row_valid = torch.zeros(1, width, dtype=torch.bool, device=self.valid.device)
        row_valid[0, :length] = True
        self.valid = torch.cat([torch.cat([self.valid, extra], dim=1), row_valid], dim=0)
        self.lengths.append(length)

    def _pad_to(self, width: int) -> None:
        """Grow every layer's rows to ``width`` columns, the new ones masked (``add_row`` masks them)."""
        for layer in self._layers():
            layer.keys = _pad_columns(layer.keys, width)
            layer.values = _pad_columns(layer.values, width)

    def keep_rows(self, keep: list[int]) -> list[int]:
        """Only these rows stay (by index, ascending: finished or cancelled requests leave at once); returns the
        rows' order now, as their old indices, which the caller's own list of rows follows. Where every layer is
        roomy, a row leaving takes the last rows into its place, one row copied for each (``leave_moves``);
        otherwise the kept rows are selected in order."""
        if keep == list(range(self.rows)):
            return keep
        if not keep:  # the next row to join brings its own cache
            self.valid = self.valid[:0, :0]
            self.lengths = []
            return []
        roomy = roomy_layers(self.cache)
        if roomy is not None:
            moves, order = leave_moves(keep)
            for layer in roomy:
                layer.move_rows(moves, len(order))
        else:
            order = list(keep)
            idx = torch.tensor(keep, device=self.valid.device)
            for layer in self._layers():
                layer.keys = layer.keys.index_select(0, idx)
                layer.values = layer.values.index_select(0, idx)
        self.valid = self.valid.index_select(0, torch.tensor(order, device=self.valid.device))
        self.lengths = [self.lengths[i] for i in order]
        self.compact_if_sparse()
        return order

    def trim(self) -> None:
        """Drop the columns at the end that no row attends to (a lone row's rejected drafts, the padding of the
        widest rows' rejections): the cache is then cropped as a single-stream one is, and a batch without holes
        needs no mask at all."""
        if not self.rows:
            return
        used = self.valid.any(dim=0).nonzero()
        keep = int(used[-1]) + 1 if len(used) else 0
        if keep < self.width:
            self.cache.crop(keep - self.width)
            self.valid = self.valid[:, :keep]

    def compact_if_sparse(self, slack: int = 64) -> None:
        """Move each row's valid columns to the left, in order, once masked columns outnumber ``slack`` beyond the
        longest row: the cache then costs what its tokens need. Positions were applied before caching, so nothing
        a row attends to changes but where its columns sit."""
        longest = max(self.lengths, default=0)
        if self.width - longest <= slack:
            return
        order = torch.argsort((~self.valid).to(torch.int8), dim=1, stable=True)[:, :longest]  # valid columns first
        for layer in self._layers():
            b, h, _, d = layer.keys.shape
            gather = order[:, None, :, None].expand(b, h, longest, d)
            layer.keys = layer.keys.gather(2, gather)
            layer.values = layer.values.gather(2, gather)
        lengths = torch.tensor(self.lengths, device=self.valid.device)
        self.valid = torch.arange(longest, device=self.valid.device)[None, :] < lengths[:, None]


def leave_moves(keep: list[int]) -> tuple[list[tuple[int, int]], list[int]]:
    """Rows ``keep`` (ascending) of a batch, packed into its first ``len(keep)`` rows by moving the kept rows from
    beyond into the places the leaving ones free: the (source, destination) moves and the order that results, as
    old indices. Rows already in place stay there."""
    n, kept = len(keep), set(keep)
    holes = [i for i in range(n) if i not in kept]
    order = list(range(n))
    moves = list(zip([i for i in keep if i >= n], holes))
    for src, dst in moves:
        order[dst] = src
    return moves, order


def _kv_layers(cache: DynamicCache) -> list:
    """The cache's attention layers that hold keys and values (a full-attention model's every layer)."""
    return [layer for layer in cache.layers if getattr(layer, "keys", None) is not None]


def _pad_columns(x: torch.Tensor, width: int) -> torch.Tensor:
    """[B, H, T, D] grown to ``width`` columns with zeros that stay masked."""
    if x.shape[2] >= width:
        return x
    return torch.cat([x, x.new_zeros(x.shape[0], x.shape[1], width - x.shape[2], x.shape[3])], dim=2)


def picked(logits: torch.Tensor, lengths: list[int], picks: list[Pick | None] | None) -> list[list[int]]:
    """Each row's picks at its first ``lengths[b]`` positions: the batch's argmax, or the row's own pick."""
    greedy = argmax(logits)
    own = picks or [None] * len(lengths)
    return [
        pick(logits[b, :n]) if pick is not None else greedy[b, :n].tolist()
        for b, (n, pick) in enumerate(zip(lengths, own))
    ]


def verify_batch(
    target,
    batch: BatchCache,
    rows: list[list[int]],
    taps: tuple[int, ...] = (),
    picks: list[Pick | None] | None = None,
) -> tuple[list[list[int]], list[torch.Tensor | None]]:
    """One target forward over every row's tokens (its pending token, then its drafts): each row's pick (its own,
    else the argmax) after each of its tokens, and the taps' hidden states at those positions. Every row's columns
    are appended and counted valid; ``accept_batch`` masks what the row rejects."""
    out = target(**verify_call(batch, rows), use_cache=True, output_hidden_states=bool(taps))
    return verified(batch, rows, out, taps, picks)


def verify_call(batch: BatchCache, rows: list[list[int]]) -> dict:
    """The forward's arguments for a verify of ``rows`` on ``batch``: right-padded ids, their positions, the mask."""
    n = max(len(r) for r in rows)
    device = batch.valid.device
    ids = torch.full((len(rows), n), PAD_ID, dtype=torch.long, device=device)
    for b, r in enumerate(rows):
        ids[b, : len(r)] = torch.tensor(r, device=device)
    new_valid = _new_columns(rows, device)
    lengths = torch.tensor(batch.lengths, device=device)
    positions = lengths[:, None] + torch.arange(n, device=device)[None, :]
    # no hole and no padding (a lone row, or rows in step): no mask, the single-stream path itself
    plain = bool(batch.valid.all()) and all(len(r) == n for r in rows)
    mask = None if plain else torch.cat([batch.valid, new_valid], dim=1).long()
    return dict(input_ids=ids, cache=batch.cache, attention_mask=mask, position_ids=positions)


def verified(
    batch: BatchCache, rows: list[list[int]], out, taps: tuple[int, ...], picks: list[Pick | None] | None
) -> tuple[list[list[int]], list[torch.Tensor | None]]:
    """The verify's picks and taps per row from the forward's output; the rows' new columns counted valid."""
    chosen = picked(out.logits, [len(r) for r in rows], picks)
    batch.valid = torch.cat([batch.valid, _new_columns(rows, batch.valid.device)], dim=1)
    batch.lengths = [length + len(r) for length, r in zip(batch.lengths, rows)]
    if not taps:
        return chosen, [None] * len(rows)
    feats = torch.cat([out.hidden_states[i] for i in taps], dim=-1)
    return chosen, [feats[b, : len(r)] for b, r in enumerate(rows)]


def _new_columns(rows: list[list[int]], device) -> torch.Tensor:
    """[B, n] booleans: which of a verify's right-padded columns hold each row's tokens."""
    valid = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.bool, device=device)
    for b, r in enumerate(rows):
        valid[b, : len(r)] = True
    return valid


def accept_batch(
    batch: BatchCache, drafted: list[list[int]], predicted: list[list[int]], feats: list[torch.Tensor | None]
) -> list[PassOutcome]:
    """Per row: keep the agreeing prefix plus the target's own next token; the rejected drafts' columns are masked
    where they are (the row's length stops advancing), as a single-stream cache is cropped."""
    outcomes = []
    width = batch.width
    n = max(len(d) for d in drafted) + 1
    for b, (d, p, f) in enumerate(zip(drafted, predicted, feats)):
        a = accepted_prefix(d, p)
        rejected = len(d) - a
        if rejected:
            start = width - n + 1 + a  # the row's columns start at width - n: its pending token, then its drafts
            batch.valid[b, start : start + rejected] = False
            batch.lengths[b] -= rejected
        outcomes.append(PassOutcome(d[:a] + [p[a]], len(d), a, f[: a + 1] if f is not None else None))
    batch.trim()
    return outcomes
