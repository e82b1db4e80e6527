"""The hot path: greedy speculative decoding in a few small verbs (gpt-fast style).

No I/O, logging or database calls in here. Each function returns tensors or plain
stats. Rejected drafts are dropped by cropping the KV cache, nothing else: a ``DynamicCache`` drops the tensors'
tail, a preallocated ``StaticCache`` moves its write position back (its stale slots are masked, then overwritten).

Accounting follows vLLM (engine.measure): for draft position i (0-based) a pass counts as ``proposed`` if it
drafted a token there, and as ``accepted`` if the first i+1 drafted tokens were all accepted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache

from engine.measure import Measured


class Drafter(Protocol):
    """Every drafter: a name and up to k tokens to follow ``context``, which ends with the pending token (the last
    token the target emitted, not cached yet). Fewer than k, or none, is a valid proposal.

    The stateful part is optional, each hook called only where a drafter has it (``hook``):
    - ``reset(prompt_ids)``: a new request over this prompt;
    - ``rollback(final_len)``: the first ``final_len`` tokens of the context are final, so anything cached beyond
      them (the drafts the target rejected) goes; a drafter with its own KV cache needs it;
    - ``taps`` and ``observe(features)``: a drafter that reads the target's hidden states (EAGLE-3) names the
      layers and is handed their states at the positions each target pass cached, the prompt's first;
    - ``finish(prompt_ids, output_ids)``: the request ended (after the clock), for drafters that learn across
      requests (the suffix trees' global tree);
    - ``source``: a drafter with several sources (the hybrid) names the one behind its last proposal, and the
      request counts each source's passes apart.
    """

    name: str

    def propose(self, context: list[int], k: int) -> list[int]: ...


def hook(drafter, name: str, *args) -> None:
    """Call a drafter's optional hook where it has one."""
    fn = getattr(drafter, name, None)
    if fn is not None:
        fn(*args)


def taps_of(drafter) -> tuple[int, ...]:
    return tuple(getattr(drafter, "taps", ()) or ()) if drafter is not None else ()


@dataclass(kw_only=True)
class RequestStats(Measured):
    """The decoder's request as it goes: the measured shape (engine.measure) plus the output so far and each
    pass's draft length. ``output_tokens`` follows ``output_ids`` (``emit``)."""

    output_ids: list[int] = field(default_factory=list)
    k_per_pass: list[int] = field(default_factory=list)

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.latency_s if self.latency_s > 0 else 0.0

    def emit(self, new: list[int], eos_id: int | None, max_new: int) -> bool:
        """Append ``new`` up to EOS or the token budget; True when the request is done."""
        done = append_until_done(self.output_ids, new, eos_id, max_new)
        self.output_tokens = len(self.output_ids)
        return done

    def count_pass(self, proposed: int, accepted: int) -> None:
        super().count_pass(proposed, accepted)
        self.k_per_pass.append(proposed)


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


def forward(
    model, cache: Cache, ids: list[int], keep: int, taps: tuple[int, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run ``ids`` through ``model`` on top of ``cache``: greedy ids of the last ``keep`` positions, and the hidden
    states of the ``taps`` layers at every position, concatenated ([len(ids), len(taps)·H]), from the same pass."""
    x = torch.tensor([ids], device=model.device)
    out = model(input_ids=x, cache=cache, use_cache=True, logits_to_keep=keep, output_hidden_states=bool(taps))
    feats = torch.cat([out.hidden_states[i][0] for i in taps], dim=-1) if taps else None
    return out.logits[0].argmax(dim=-1), feats


def prefill(target, cache: Cache, prompt_ids: list[int], taps: tuple[int, ...] = ()) -> tuple[int, torch.Tensor | None]:
    """Fill the target cache with the prompt; the first generated token (and the prompt's taps)."""
    greedy, feats = forward(target, cache, prompt_ids, keep=1, taps=taps)
    return int(greedy[-1]), feats


def draft(drafter: Drafter | None, context: list[int], k: int) -> list[int]:
    """Up to k proposed tokens (none without a drafter or at k = 0)."""
    return list(drafter.propose(context, k))[:k] if (drafter is not None and k > 0) else []


def verify(
    target, cache: Cache, pending: int, drafted: list[int], taps: tuple[int, ...] = ()
) -> tuple[list[int], torch.Tensor | None]:
    """One target pass over the pending token and the drafts: its greedy pick after each (and their taps)."""
    greedy, feats = forward(target, cache, [pending] + drafted, keep=len(drafted) + 1, taps=taps)
    return greedy.tolist(), feats


def accepted_prefix(drafted: list[int], predicted: list[int]) -> int:
    n = 0
    while n < len(drafted) and drafted[n] == predicted[n]:
        n += 1
    return n


@dataclass(frozen=True)
class PassOutcome:
    """What one verification pass did: the tokens it added and what a policy learns from it."""

    new: list[int]  # accepted drafts plus the target's own next token
    proposed: int
    accepted: int
    features: torch.Tensor | None = None  # taps of the positions the target kept (pending + accepted drafts)


def accept(cache: Cache, drafted: list[int], predicted: list[int], feats: torch.Tensor | None) -> PassOutcome:
    """Keep the agreeing prefix plus the target's own next token; rejection means the cache stops advancing."""
    n = accepted_prefix(drafted, predicted)
    if len(drafted) > n:
        cache.crop(-(len(drafted) - n))
    return PassOutcome(drafted[:n] + [predicted[n]], len(drafted), n, feats[: n + 1] if feats is not None else None)


def speculative_step(target, cache: Cache, drafter: Drafter | None, seq: list[int], k: int) -> PassOutcome:
    """Draft up to k tokens, verify them in one pass, keep the agreeing prefix plus the target's own next token.
    ``seq`` ends with the pending (not yet cached) token."""
    drafted = draft(drafter, seq, k)
    predicted, feats = verify(target, cache, seq[-1], drafted, taps_of(drafter))
    return accept(cache, drafted, predicted, feats)


def append_until_done(out: list[int], new: list[int], eos_id: int | None, max_new: int) -> bool:
    """Append ``new`` to ``out`` up to EOS or the token budget; True when done."""
    for tok in new:
        out.append(tok)
        if tok == eos_id or len(out) >= max_new:
            return True
    return False


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
) -> RequestStats:
    """Greedy decoding with speculation; k=0 is target-only through the same code.

    ``choose_k`` (optional) picks k before each pass from the last pass, for policies that adapt within a request;
    it must stay cheap and pure. ``cache`` is an empty cache to fill (a preallocated static one,
    engine.decode.compiled); a growing ``DynamicCache`` by default. ``timed=False`` runs without the clock: no
    device syncs, every time 0.
    """
    clock = Clock(target.device if timed else None)
    stats = RequestStats(prompt_tokens=len(prompt_ids), k=k, prefill_s=0.0, draft_prefill_s=0.0, ttft_s=0.0)
    cache = cache if cache is not None else DynamicCache(config=target.config)
    drafting = drafter is not None and (k > 0 or choose_k is not None)
    taps = taps_of(drafter) if drafting else ()
    first, feats = prefill(target, cache, prompt_ids, taps)
    stats.ttft_s = stats.prefill_s = clock.lap()
    seq = list(prompt_ids) + [first]
    out = stats.output_ids
    done = stats.emit([first], eos_id, max_new_tokens)
    drafting = drafting and not done
    if drafting:
        if feats is not None:
            hook(drafter, "observe", feats)
        hook(drafter, "reset", list(prompt_ids))
        stats.draft_prefill_s = clock.lap()
    last: PassOutcome | None = None
    between = 0.0  # the loop's own bookkeeping between passes: in the latency, in neither draft nor verify
    while not done:
        step_k = choose_k(last) if choose_k else k
        step_k = max(0, min(step_k, max_new_tokens - len(out) - 1))
        between += clock.lap()
        drafted = draft(drafter if drafting else None, seq, step_k)
        stats.draft_s += clock.lap()
        predicted, feats = verify(target, cache, seq[-1], drafted, taps if drafting else ())
        last = accept(cache, drafted, predicted, feats)
        stats.verify_s += clock.lap()
        stats.count_pass(last.proposed, last.accepted)
        if drafted and (source := getattr(drafter, "source", None)):  # a hybrid says which of its sources drafted
            stats.count_source(source, last.proposed, last.accepted)
        seq += last.new
        if drafting:
            hook(drafter, "rollback", len(seq) - 1)
            if last.features is not None:
                hook(drafter, "observe", last.features)
        done = stats.emit(last.new, eos_id, max_new_tokens)
    between += clock.lap()
    # the laps tile the request's wall time, so their sum is its latency
    stats.latency_s = (
        (stats.prefill_s or 0.0) + (stats.draft_prefill_s or 0.0) + stats.draft_s + stats.verify_s + between
    )
    if drafting:
        hook(drafter, "finish", list(prompt_ids), list(out))  # after the clock: bookkeeping for later requests
    return stats
