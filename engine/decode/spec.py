"""The hot path: greedy speculative decoding in a few small verbs (gpt-fast style).

No I/O, logging or database calls in here. Each function returns tensors or plain
stats. Rejected drafts are dropped by cropping the KV cache, nothing else: a ``DynamicCache`` drops the tensors'
tail, a preallocated ``StaticCache`` moves its write position back (its stale slots are masked, then overwritten).

Accounting follows vLLM: for draft position i (0-based) a pass counts as
``proposed`` if it drafted a token there, and as ``accepted`` if the first i+1
drafted tokens were all accepted (the unconditional definition).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache


class Drafter(Protocol):
    name: str
    taps: tuple[int, ...]  # target layers whose hidden states it reads (EAGLE-3); empty for token-only drafters

    # features: the taps [positions, 3H] of the target pass just run (prefill for reset, verify for commit)
    def reset(self, prompt_ids: list[int], features=None) -> None: ...

    def draft(self, seq: list[int], k: int) -> list[int]: ...

    def commit(self, valid_len: int, features=None) -> None: ...

    def finish(self, prompt_ids: list[int], output_ids: list[int]) -> None: ...  # the request ended


@dataclass
class RequestStats:
    prompt_tokens: int
    k: int
    output_ids: list[int] = field(default_factory=list)
    proposed: int = 0
    accepted: int = 0
    passes: int = 0
    per_position_proposed: list[int] = field(default_factory=list)
    per_position_accepted: list[int] = field(default_factory=list)
    # passes that proposed position i with positions 0..i-1 accepted: the denominator of position i's conditional
    # rate when the draft length varies pass by pass (for a fixed k it equals per_position_accepted[i-1])
    per_position_reached: list[int] = field(default_factory=list)
    # Times split so that the break-even model sees decode passes only: prefill_s is the target's prompt pass
    # (which also yields the first token, so it equals ttft_s here), draft_prefill_s the drafter's own reset.
    prefill_s: float = 0.0
    draft_prefill_s: float = 0.0
    draft_s: float = 0.0  # drafting, decode passes only
    verify_s: float = 0.0  # target verification, decode passes only
    ttft_s: float = 0.0
    latency_s: float = 0.0
    k_per_pass: list[int] = field(default_factory=list)

    @property
    def output_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.latency_s if self.latency_s > 0 else 0.0

    @property
    def acceptance(self) -> float | None:
        return self.accepted / self.proposed if self.proposed else None

    def count_pass(self, proposed: int, accepted: int) -> None:
        grow = proposed - len(self.per_position_proposed)
        if grow > 0:
            self.per_position_proposed += [0] * grow
            self.per_position_accepted += [0] * grow
            self.per_position_reached += [0] * grow
        for i in range(proposed):
            self.per_position_proposed[i] += 1
            if accepted >= i:
                self.per_position_reached[i] += 1
            if accepted > i:
                self.per_position_accepted[i] += 1
        self.proposed += proposed
        self.accepted += accepted
        self.passes += 1
        self.k_per_pass.append(proposed)


def sync(device: torch.device) -> None:
    """Make timer reads honest on asynchronous devices."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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


@dataclass
class Step:
    new: list[int]  # accepted drafts plus the target's own next token
    proposed: int
    accepted: int
    draft_s: float
    verify_s: float
    features: torch.Tensor | None = None  # taps of the positions the target kept (pending + accepted drafts)


def speculative_step(target, cache: Cache, drafter: Drafter | None, seq: list[int], k: int, device) -> Step:
    """Draft up to k tokens, verify them in one pass, keep the agreeing prefix plus
    the target's own next token. ``seq`` ends with the pending (not yet cached) token."""
    taps = drafter.taps if drafter is not None else ()
    t0 = time.perf_counter()
    drafted = drafter.draft(seq, k) if (drafter is not None and k > 0) else []
    sync(device)
    t1 = time.perf_counter()
    predicted, feats = verify(target, cache, seq[-1], drafted, taps)
    n = accepted_prefix(drafted, predicted)
    if len(drafted) > n:
        cache.crop(-(len(drafted) - n))
    sync(device)
    t2 = time.perf_counter()
    return Step(
        drafted[:n] + [predicted[n]], len(drafted), n, t1 - t0, t2 - t1, feats[: n + 1] if feats is not None else None
    )


def append_until_done(out: list[int], new: list[int], eos_id: int | None, max_new: int) -> bool:
    """Append ``new`` to ``out`` up to EOS or the token budget; True when done."""
    for tok in new:
        out.append(tok)
        if tok == eos_id or len(out) >= max_new:
            return True
    return False


def generate(
    target,
    drafter: Drafter | None,
    prompt_ids: list[int],
    k: int,
    max_new_tokens: int,
    eos_id: int | None,
    choose_k: Callable[[RequestStats], int] | None = None,
    cache: Cache | None = None,
) -> RequestStats:
    """Greedy decoding with speculation; k=0 is target-only through the same code.

    ``choose_k`` (optional) picks k before each pass from the stats so far, for
    policies that adapt within a request; it must stay cheap and pure. ``cache`` is an
    empty cache to fill (a preallocated static one, engine.decode.compiled); a growing
    ``DynamicCache`` by default.
    """
    device = target.device
    stats = RequestStats(prompt_tokens=len(prompt_ids), k=k)
    cache = cache if cache is not None else DynamicCache(config=target.config)
    sync(device)
    start = time.perf_counter()
    drafting = drafter is not None and (k > 0 or choose_k is not None)
    first, feats = prefill(target, cache, prompt_ids, drafter.taps if drafting and drafter is not None else ())
    sync(device)
    stats.ttft_s = stats.prefill_s = time.perf_counter() - start
    seq = list(prompt_ids) + [first]
    out = stats.output_ids
    done = append_until_done(out, [first], eos_id, max_new_tokens)
    drafting = drafting and not done
    if drafting and drafter is not None:
        t = time.perf_counter()
        drafter.reset(list(prompt_ids), feats)
        sync(device)
        stats.draft_prefill_s = time.perf_counter() - t
    while not done:
        step_k = choose_k(stats) if choose_k else k
        step_k = max(0, min(step_k, max_new_tokens - len(out) - 1))
        step = speculative_step(target, cache, drafter if drafting else None, seq, step_k, device)
        stats.count_pass(step.proposed, step.accepted)
        stats.draft_s += step.draft_s
        stats.verify_s += step.verify_s
        seq += step.new
        if drafting and drafter is not None:
            drafter.commit(len(seq) - 1, step.features)
        done = append_until_done(out, step.new, eos_id, max_new_tokens)
    sync(device)
    stats.latency_s = time.perf_counter() - start
    if drafting and drafter is not None:
        drafter.finish(list(prompt_ids), list(out))  # after the clock: bookkeeping for later requests
    return stats
