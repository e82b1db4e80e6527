"""The engine core's prompt side (engine.decode.scheduler's): requests admitted into rows, each prompt looked up in
the prefix cache, then computed in chunks under the step's token budget, in arrival order; a prompt whose last
chunk is in emits its first token and joins the running batch. Chunks run in forwards of their own here, or inside
the verify's forward where the target mixes them in (engine.decode.mixed, the scheduler's ``_pass``)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from transformers import DynamicCache

from engine.decode.batch import PAD_ID, BatchCache, picked, roomy_cache, roomy_layers
from engine.decode.drafters import Drafter
from engine.decode.handoff import Row
from engine.decode.prefix import PrefixCache, kv_of, restore
from engine.decode.sequence import Request, Sequence
from engine.decode.spec import Pick, forward


class Intake:
    """What the scheduler's prompt side reads and calls of it (declared here for the type checker)."""

    target: Any
    drafters: Callable[[str], Drafter | None]
    eos_id: int | None
    max_batch: int
    long_prefill: int
    clock: Callable[[], float]
    prefix: PrefixCache | None
    keep_taps: tuple[int, ...]
    waiting: deque[Request]
    prefilling: list[Row]
    rows: list[Row]
    batch: BatchCache
    _cv: threading.Condition

    def _fail(self, rows: list[Row], exc: BaseException) -> None: ...
    def _end(self, row: Row, reason: str, error: str | None = None) -> None: ...
    def _emit(self, row: Row, tokens: list[int]) -> None: ...

    def _row(self, req: Request) -> Row:
        drafter = self.drafters(req.drafter) if req.drafter != "none" else None
        eos = None if req.ignore_eos else self.eos_id
        seq = Sequence(
            list(req.prompt_ids), req.max_new_tokens, eos, drafter, req.k or 0, req.sampling, req.stop, defer=True
        )
        seq.stats.prefill_s = seq.stats.draft_prefill_s = 0.0
        return Row(req, seq)

    def _admit(self) -> None:
        while len(self.rows) + len(self.prefilling) < self.max_batch:
            with self._cv:
                if not self.waiting:
                    return
                req = self.waiting.popleft()
            try:
                row = self._row(req)
            except Exception as exc:
                self._fail([Row(req, Sequence(list(req.prompt_ids), req.max_new_tokens, self.eos_id))], exc)
                continue
            if req.cancelled:
                self._end(row, "cancelled")
                continue
            row.queue_s = self.clock() - req.submitted
            row.cache = self._cached(row)
            self.prefilling.append(row)

    def _taps(self, seq: Sequence) -> tuple[int, ...]:
        """The layers a prompt's prefill keeps the hidden states of: its drafter's, else what the cache keeps."""
        return seq.taps or self.keep_taps

    def _cached(self, row: Row) -> DynamicCache:
        """The row's cache to prefill on: what the prefix cache holds of its prompt already, or an empty one."""
        salt = row.req.cache_salt
        hit = (
            self.prefix.lookup(row.seq.prompt_ids, bool(self._taps(row.seq)), salt) if self.prefix is not None else None
        )
        if hit is None:
            return roomy_cache(self.target.config)
        entry, length = hit
        kept = entry.features[:length] if entry.features is not None and self._taps(row.seq) else None
        row.seq.prefilled(length, kept)
        row.seq.stats.cached_tokens = length
        return restore(entry, length, self.target.config)

    def _chunks(self, budget: int) -> list[tuple[Row, list[int]]]:
        """The prompt chunks this step computes: in arrival order while the budget lasts, at least one so prompts
        always move, a long prompt's at most ``long_prefill`` tokens."""
        chunks: list[tuple[Row, list[int]]] = []
        for row in self.prefilling:
            if budget <= 0 and chunks:
                break
            chunks.append((row, row.seq.chunk(max(1, min(budget, self.long_prefill)))))
            budget -= len(chunks[-1][1])
        return chunks

    def _prefill(self, budget: int) -> int:
        """Prompt chunks in forwards of their own; the prompt tokens it computed. Prompts that start this step
        prefill their first chunks in one forward."""
        moved, fresh = 0, list[tuple[Row, list[int]]]()
        for row, ids in self._chunks(budget):
            if row.seq.computed == 0:
                fresh.append((row, ids))
                continue
            try:
                moved += self._chunk(row, len(ids))
            except Exception as exc:
                self.prefilling.remove(row)
                self._fail([row], exc)
        if fresh:
            moved += self._first_chunks(fresh)
        return moved

    def _first_chunks(self, fresh: list[tuple[Row, list[int]]]) -> int:
        """The first chunks of prompts that start this step: together in one forward where there are several."""
        start = self.clock()
        try:
            together = (
                prefill_together(
                    self.target,
                    [ids for _, ids in fresh],
                    self._taps(fresh[0][0].seq),
                    [row.seq.picker if not row.seq.to_prefill - len(ids) else None for row, ids in fresh],
                )
                if len(fresh) > 1 and len({self._taps(row.seq) for row, _ in fresh}) == 1
                else None
            )
        except Exception as exc:
            for row, _ in fresh:
                self.prefilling.remove(row)
            self._fail([row for row, _ in fresh], exc)
            return 0
        if together is None:
            moved = 0
            for row, ids in fresh:
                try:
                    moved += self._chunk(row, len(ids))
                except Exception as exc:
                    self.prefilling.remove(row)
                    self._fail([row], exc)
            return moved
        share = (self.clock() - start) / len(fresh)
        for (row, ids), (first, feats, cache) in zip(fresh, together):
            row.cache = cache
            self._chunked(row, ids, first, feats, share)
        return sum(len(ids) for _, ids in fresh)

    def _chunk(self, row: Row, budget: int) -> int:
        """The row's next chunk in a forward of its own."""
        start = self.clock()
        ids = row.seq.chunk(budget)
        assert row.cache is not None  # a prefilling row holds its own cache until it joins the batch
        last = len(ids) == row.seq.to_prefill  # only the prompt's last chunk picks the first token
        picks, feats = forward(self.target, row.cache, ids, 1, self._taps(row.seq), row.seq.picker if last else None)
        self._chunked(row, ids, picks[-1], feats, self.clock() - start)
        return len(ids)

    def _chunked(self, row: Row, ids: list[int], greedy: int | None, feats, seconds: float) -> None:
        """A chunk is in: count it; after the prompt's last one, the first token, and the row joins the batch."""
        seq, stats = row.seq, row.seq.stats
        seq.prefilled(len(ids), feats)
        stats.prefill_s = (stats.prefill_s or 0.0) + seconds
        if seq.to_prefill:
            return
        if self.prefix is not None and row.cache is not None:
            feats = torch.cat(seq.features) if seq.features and self._taps(seq) else None
            self.prefix.store(seq.prompt_ids, *kv_of(row.cache), feats, row.req.cache_salt)
        stats.ttft_s = self.clock() - row.req.submitted
        assert greedy is not None  # the prompt's last chunk always picks
        before = self.clock()
        self._emit(row, seq.start(greedy))
        if seq.drafter is not None and not seq.finished:
            stats.draft_prefill_s = self.clock() - before
        self.prefilling.remove(row)
        if seq.finished:
            self._end(row, seq.reason or "length")
            return
        assert row.cache is not None
        self.batch.add_row(row.cache, len(seq.prompt_ids))
        row.cache = None
        self.rows.append(row)


def prefill_together(
    target, chunks: list[list[int]], taps: tuple[int, ...] = (), picks: list[Pick | None] | None = None
) -> list[tuple[int, torch.Tensor | None, DynamicCache]] | None:
    """Several prompts' first chunks in one forward (wider GEMMs, one read of the weights): each row right-aligned,
    its padding first and masked, so every row's last token sits in the last column and one position of logits a
    row is computed. Each row's columns then become a cache of its own, as if it had been prefilled alone; per row:
    the target's pick after its chunk (``picks``: a row's own, else the argmax), its taps, its cache. None where
    the model's cache layers are not all plain full-attention ones (the caller prefills one by one)."""
    cache = roomy_cache(target.config)
    layers = roomy_layers(cache)
    if layers is None:
        return None
    device = target.device
    n = max(len(c) for c in chunks)
    ids = torch.full((len(chunks), n), PAD_ID, dtype=torch.long, device=device)
    valid = torch.zeros(len(chunks), n, dtype=torch.bool, device=device)
    for b, c in enumerate(chunks):
        ids[b, n - len(c) :] = torch.tensor(c, device=device)
        valid[b, n - len(c) :] = True
    pad = torch.tensor([n - len(c) for c in chunks], device=device)
    positions = (torch.arange(n, device=device)[None, :] - pad[:, None]).clamp(min=0)
    out = target(
        input_ids=ids,
        cache=cache,
        use_cache=True,
        attention_mask=valid.long(),
        position_ids=positions,
        logits_to_keep=1,
        output_hidden_states=bool(taps),
    )
    firsts = picked(out.logits[:, -1:], [1] * len(chunks), picks)
    feats = torch.cat([out.hidden_states[i] for i in taps], dim=-1) if taps else None
    rows = []
    for b, c in enumerate(chunks):
        row = roomy_cache(target.config)
        for mine, theirs in zip(roomy_layers(row) or [], layers):
            keys, values = theirs.keys, theirs.values
            assert keys is not None and values is not None  # the forward filled every layer
            mine.lazy_initialization(keys, values)
            mine.keys, mine.values = keys[b : b + 1, :, n - len(c) :], values[b : b + 1, :, n - len(c) :]
        rows.append((firsts[b][0], feats[b, n - len(c) :] if feats is not None else None, row))
    return rows
