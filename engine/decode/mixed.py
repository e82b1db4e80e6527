"""A batch's verify and waiting prompts' chunks in one forward: vLLM V1's mixed step (gpt-fast style: tensors in and
out, no I/O, logging or timing in here).

A step that runs its decode rows and a prompt's chunk as two forwards reads every weight twice and pays the small
verify's fixed costs (a GEMM per layer over a few rows, the Python per layer) on top of the chunk's. In one forward
the decode rows' tokens ride in the chunk's GEMMs, which a few hundred tokens keep busy anyway; attention still runs
per call, each over its own cache (engine.decode.runner.Runner.forward_parts). Under arrivals (a prompt joining a
busy batch) that is most steps with a prompt in them. transformers' modeling has no such call: there the scheduler
runs the two forwards as before.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache

from engine.decode.batch import BatchCache, verified, verify_call
from engine.decode.spec import Pick, read


@dataclass
class Chunk:
    """A prompt's next tokens to prefill onto its own cache: the taps its drafter reads, and its pick where this is
    the prompt's last chunk (its first token: the request's own, else None and the argmax)."""

    cache: DynamicCache
    ids: list[int]
    taps: tuple[int, ...]
    last: bool
    pick: Pick | None = None


def mixes(target) -> bool:
    """Whether ``target`` runs several calls as one forward (Phoenix's runner does; transformers' modeling not)."""
    return callable(getattr(target, "forward_parts", None))


def verify_and_prefill(
    target,
    batch: BatchCache,
    rows: list[list[int]],
    taps: tuple[int, ...],
    picks: list[Pick | None] | None,
    chunks: list[Chunk],
) -> tuple[list[list[int]], list[torch.Tensor | None], list[tuple[int | None, torch.Tensor | None]]]:
    """``verify_batch``'s answer for ``rows`` on ``batch``, and per chunk: the target's pick after it (its prompt's
    first token where it is the last chunk, else None) and its taps' hidden states, from one forward."""
    device = batch.valid.device
    calls = [verify_call(batch, rows)] + [
        dict(input_ids=torch.tensor([c.ids], device=device), cache=c.cache, logits_to_keep=1) for c in chunks
    ]
    outs = target.forward_parts(calls, bool(taps) or any(c.taps for c in chunks))
    chosen, feats = verified(batch, rows, outs[0], taps, picks)
    firsts = []
    for out, c in zip(outs[1:], chunks):
        got, taps_of = read(out, 1, c.taps, c.pick)
        firsts.append((got[-1] if c.last else None, taps_of))
    return chosen, feats, firsts
