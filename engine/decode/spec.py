"""The hot path: speculative decoding in a few small verbs (gpt-fast style).

No I/O, logging or database calls in here; a request's state and counting live in its ``Sequence``
(engine.decode.sequence), which the batched step (engine.decode.scheduler) uses too. Each function returns
tensors or plain stats. Rejected drafts are dropped by cropping the KV cache, nothing else: a ``DynamicCache``
drops the tensors' tail, a preallocated ``StaticCache`` moves its write position back (its stale slots are
masked, then overwritten).

Accounting follows vLLM (engine.measure): for draft position i (0-based) a pass counts as ``proposed`` if it
drafted a token there, and as ``accepted`` if the first i+1 drafted tokens were all accepted.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache

from engine.decode.drafters import Drafter
from engine.decode.sampling import argmax
from engine.decode.sampling_params import GREEDY, SamplingParams
from engine.decode.sequence import PassOutcome, RequestStats, Sequence


def sync(device: torch.device) -> None:
    """Make timer reads honest on asynchronous devices."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Clock:
    """The measured loop's timer, outside the verbs: seconds since the last lap, read after syncing an
    asynchronous device. ``Clock(None)`` is off: a lap costs nothing, syncs nothing and reads 0."""

    def __init__(self, device: torch.device | None):
        self.device = device
        self.last = time.perf_counter() if device is not None else 0.0

    def lap(self) -> float:
        if self.device is None:
            return 0.0
        sync(self.device)
        now = time.perf_counter()
        seconds, self.last = now - self.last, now
        return seconds


# The target's token after each of a forward's kept positions, from their logits ([n, V]): a request's own
# (``Sequence.pick``: sampled, or scored for logprobs); None: the argmax.
Pick = Callable[[torch.Tensor], list[int]]


def forward(
    model, cache: Cache, ids: list[int], keep: int, taps: tuple[int, ...] = (), pick: Pick | None = None
) -> tuple[list[int], torch.Tensor | None]:
    """Run ``ids`` through ``model`` on top of ``cache``: the picks after the last ``keep`` positions, and the hidden
    states of the ``taps`` layers at every position, concatenated ([len(ids), len(taps)·H]), from the same pass."""
    x = torch.tensor([ids], device=model.device)
    out = model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=keep, output_hidden_states=bool(taps))
    return read(out, keep, taps, pick)


def read(out, keep: int, taps: tuple[int, ...] = (), pick: Pick | None = None) -> tuple[list[int], torch.Tensor | None]:
    """A one-row forward's answer (``forward``'s, or one call's of a mixed forward): the picks after its last
    ``keep`` positions and its taps' hidden states."""
    feats = torch.cat([out.hidden_states[i][0] for i in taps], dim=-1) if taps else None
    logits = out.logits[0][-keep:]
    return (pick(logits) if pick is not None else argmax(logits).tolist()), feats


def prefill(
    target, cache: Cache, prompt_ids: list[int], taps: tuple[int, ...] = (), pick: Pick | None = None
) -> tuple[int, torch.Tensor | None]:
    """Fill the target cache with the prompt; the first generated token (and the prompt's taps)."""
    picks, feats = forward(target, cache, prompt_ids, keep=1, taps=taps, pick=pick)
    return picks[-1], feats


def verify(
    target, cache: Cache, pending: int, drafted: list[int], taps: tuple[int, ...] = (), pick: Pick | None = None
) -> tuple[list[int], torch.Tensor | None]:
    """One target pass over the pending token and the drafts: the target's pick after each (and their taps)."""
    return forward(target, cache, [pending] + drafted, keep=len(drafted) + 1, taps=taps, pick=pick)


def accepted_prefix(drafted: list[int], predicted: list[int]) -> int:
    n = 0
    while n < len(drafted) and drafted[n] == predicted[n]:
        n += 1
    return n


def accept(cache: Cache, drafted: list[int], predicted: list[int], feats: torch.Tensor | None) -> PassOutcome:
    """Keep the agreeing prefix plus the target's own next token; rejection means the cache stops advancing. With
    sampling, ``predicted`` holds the target's sampled picks (engine.decode.sampling), so this is the
    speculative-sampling rule for point-mass drafts."""
    n = accepted_prefix(drafted, predicted)
    if len(drafted) > n:
        cache.crop(-(len(drafted) - n))
    return PassOutcome(drafted[:n] + [predicted[n]], len(drafted), n, feats[: n + 1] if feats is not None else None)


# A per-pass choice of k from the pass that just finished (None before the first), as transformers hands its
# candidate generator ``num_matches``; a controller keeps whatever else it needs itself.
ChooseK = Callable[[PassOutcome | None], int]


def generate(
    target,
    drafter: Drafter | None,
    prompt_ids: list[int],
    k: int,
    max_new_tokens: int,
    eos_id: int | None,
    choose_k: ChooseK | None = None,
    cache: Cache | None = None,
    timed: bool = True,
    sampling: SamplingParams = GREEDY,
    stop=None,
) -> RequestStats:
    """Decoding with speculation, one request (greedy, or sampled exactly in distribution with ``sampling``): the
    engine core's ``Sequence`` on a single-row cache; k=0 is target-only through the same code.

    ``choose_k`` (optional) picks k before each pass from the last pass, for policies that adapt within a request;
    it must stay cheap and pure. ``stop``: the request's stop strings (engine.decode.sequence.StopCheck). ``cache``
    is an empty cache to fill (a preallocated static one, engine.decode.compiled); a growing ``DynamicCache`` by
    default. ``timed=False`` runs without the clock: no
    device syncs, every time 0.
    """
    clock = Clock(target.device if timed else None)
    drafting = drafter is not None and (k > 0 or choose_k is not None)
    s = Sequence(list(prompt_ids), max_new_tokens, eos_id, drafter if drafting else None, k, sampling, stop)
    stats = s.stats
    stats.prefill_s, stats.draft_prefill_s, stats.ttft_s = 0.0, 0.0, 0.0
    cache = cache if cache is not None else DynamicCache(config=target.config)
    first, feats = prefill(target, cache, prompt_ids, s.taps, s.picker)
    stats.ttft_s = stats.prefill_s = clock.lap()
    s.prefilled(len(prompt_ids), feats)
    s.start(first)
    if s.drafter is not None and not s.finished:
        stats.draft_prefill_s = clock.lap()
    last: PassOutcome | None = None
    between = 0.0  # the loop's own bookkeeping between passes: in the latency, in neither draft nor verify
    while not s.finished:
        step_k = s.cap(choose_k(last) if choose_k else k)
        between += clock.lap()
        drafted = s.propose(step_k)
        stats.draft_s += clock.lap()
        predicted, feats = verify(target, cache, s.pending, drafted, s.taps, s.picker)
        last = accept(cache, drafted, predicted, feats)
        stats.verify_s += clock.lap()
        s.advance(last)
    between += clock.lap()
    # the laps tile the request's wall time, so their sum is its latency
    stats.latency_s = (
        (stats.prefill_s or 0.0) + (stats.draft_prefill_s or 0.0) + stats.draft_s + stats.verify_s + between
    )
    return stats
