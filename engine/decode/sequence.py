"""One request's state through the engine core (vLLM's ``v1/request.py``): waiting, prefilling, running, finished
with a reason. Both doors use it: ``spec.generate`` (a batch of one) and the scheduler's batched step.

A ``Sequence`` owns the per-request counting and the order of the drafter's calls, so no loop writes them again:
``start`` after the prefill (the first token; the drafter observes the prompt's taps, then resets), ``advance``
after each verification pass (count the pass, and its source; append the new tokens; the drafter rolls back what
was rejected, then observes the taps of what was kept; emit up to EOS or the budget), ``finish`` at the end (the
drafter learns from the output only when the request ended normally). No clock and no I/O in here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from engine.decode.drafters import Drafter
from engine.decode.sampling import TokenLogprob, logprobs_of, pick
from engine.decode.sampling_params import GREEDY, SamplingParams
from engine.measure import Measured

# A stop check on the output so far, after each token: the stop string it now holds, or None (the server's, from
# the request's ``stop``: it needs the tokenizer, which the core does not have).
StopCheck = Callable[[list[int]], str | None]

WAITING, PREFILLING, RUNNING, FINISHED = "waiting", "prefilling", "running", "finished"
REASONS = ("stop", "length", "cancelled", "error", "aborted")  # why a finished request ended


@dataclass(frozen=True)
class PassOutcome:
    """What one verification pass did: the tokens it added and what a policy learns from it."""

    new: list[int]  # accepted drafts plus the target's own next token
    proposed: int
    accepted: int
    features: torch.Tensor | None = None  # taps of the positions the target kept (pending + accepted drafts)


@dataclass(kw_only=True)
class RequestStats(Measured):
    """The decoder's request as it goes: the measured shape (engine.measure) plus the output so far and each
    pass's draft length. ``output_tokens`` follows ``output_ids`` (``emit``)."""

    output_ids: list[int] = field(default_factory=list)
    cached_tokens: int = 0  # prompt tokens the prefix cache served (OpenAI's usage.prompt_tokens_details)
    k_per_pass: list[int] = field(default_factory=list)  # tokens proposed in each pass (a drafter may propose
    # fewer than the k asked; a pass with none counts 0)
    accepted_per_pass: list[int] = field(default_factory=list)  # drafts accepted in each pass

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.latency_s if self.latency_s > 0 else 0.0

    def count_pass(self, proposed: int, accepted: int) -> None:
        super().count_pass(proposed, accepted)
        self.k_per_pass.append(proposed)
        self.accepted_per_pass.append(accepted)


@dataclass(eq=False)
class Sequence:
    prompt_ids: list[int]
    max_new_tokens: int
    eos_id: int | None
    drafter: Drafter | None = None  # None: this request never drafts (its passes verify the pending token alone)
    k: int = 0  # the k it asked for, as its stats report it (0 where a tuner chooses)
    sampling: SamplingParams = GREEDY
    stop: StopCheck | None = None
    # the drafter's prompt pass waits for the first pass that drafts (the server's rows): a request the tuner never
    # drafts for never pays its draft model's prefill, which on Qwen's 0.5B draft is about a third of the target's
    defer: bool = False
    primed: bool = field(init=False, default=False)  # the drafter has seen the prompt
    stats: RequestStats = field(init=False)
    seq: list[int] = field(init=False)  # prompt and output so far; once running, it ends with the pending token
    status: str = WAITING
    reason: str | None = None  # once finished: one of REASONS
    error: str | None = None  # the one line an "error" or "aborted" finish carries
    computed: int = 0  # prompt tokens already in the target's cache (a prefill goes in chunks)
    features: list[torch.Tensor] = field(default_factory=list)  # the prompt's taps, chunk by chunk
    stop_reason: int | str | None = None  # the stop token id or string that ended it (vLLM's stop_reason)
    logprobs: list[TokenLogprob] = field(default_factory=list)  # per emitted token, when the request asks
    _scored: list[TokenLogprob] = field(default_factory=list)  # the last pick's, until its tokens are emitted

    def __post_init__(self) -> None:
        self.stats = RequestStats(prompt_tokens=len(self.prompt_ids), k=self.k)
        self.seq = list(self.prompt_ids)
        self.sampling = self.sampling.resolved()

    @property
    def picker(self):
        """What picks this request's tokens from the target's logits; None where the batch's argmax will do."""
        return None if self.sampling.greedy and self.sampling.logprobs is None else self.pick

    def pick(self, logits: torch.Tensor) -> list[int]:
        """The target's token after each of the rows of ``logits`` ([n, V]), which predict the next output
        positions (engine.decode.sampling: the argmax, or exact sampling keyed by the request's seed)."""
        picks = pick(logits, self.sampling, len(self.stats.output_ids))
        if self.sampling.logprobs is not None:
            self._scored = logprobs_of(logits, picks, self.sampling.logprobs)
        return picks

    @property
    def taps(self) -> tuple[int, ...]:
        return self.drafter.taps if self.drafter is not None else ()

    @property
    def options(self) -> tuple[str, ...]:
        """The drafters a per-step choice picks among for this request; () where it drafts with one (or none)."""
        return self.drafter.options() if self.drafter is not None else ()

    def use(self, kind: str) -> None:
        if self.drafter is not None:
            self.drafter.use(kind)

    @property
    def pending(self) -> int:
        return self.seq[-1]

    @property
    def to_prefill(self) -> int:
        return len(self.prompt_ids) - self.computed

    @property
    def finished(self) -> bool:
        return self.status == FINISHED

    def chunk(self, budget: int) -> list[int]:
        """The next prompt tokens to prefill, at most ``budget`` (at least one)."""
        self.status = PREFILLING
        return self.prompt_ids[self.computed : self.computed + max(1, budget)]

    def prefilled(self, n: int, features: torch.Tensor | None) -> None:
        """``n`` more prompt tokens are cached, with their taps where the drafter reads any."""
        self.computed += n
        if features is not None:
            self.features.append(features)

    def cap(self, k: int) -> int:
        """k for the next pass, within what the token budget leaves (the pass adds up to k + 1). A deferred drafter
        that did not draft at the row's first pass primes later only while the row has at least as many tokens
        left as its context holds: its prompt pass then catches up on the whole context, which a short tail never
        repays (on Qwen's 0.5B draft a late prompt pass cost about two target steps, runs #325-#330)."""
        left = self.max_new_tokens - len(self.stats.output_ids) - 1
        late = self.defer and not self.primed and len(self.stats.output_ids) > 1 and left < len(self.seq)
        return max(0, min(k, left)) if self.drafter and not late else 0

    def start(self, first: int) -> list[int]:
        """The prefill is done and gave ``first``: emit it; the drafter sees the prompt (its taps first)."""
        self.status = RUNNING
        self.seq.append(first)
        done = self._emit([first])
        if self.drafter is not None and not done:
            if self.features:
                self.drafter.observe(torch.cat(self.features) if len(self.features) > 1 else self.features[0])
            if not (self.defer and self.drafter.deferrable):
                self.prime()
        self.features = []
        if done:
            self.finish(self._reason())
        return [first]

    def prime(self) -> None:
        """The drafter sees the prompt (its prompt pass), once."""
        if self.drafter is not None and not self.primed:
            self.drafter.reset(list(self.prompt_ids))
            self.primed = True

    def propose(self, k: int) -> list[int]:
        """Up to k drafts to follow the sequence (none without a drafter or at k = 0)."""
        if self.drafter is None or k <= 0:
            return []
        return list(self.drafter.propose(self.seq, k))[:k]

    def advance(self, out: PassOutcome) -> list[int]:
        """One verification pass is done: count it, keep its tokens, keep the drafter in step; the tokens emitted."""
        self.stats.count_pass(out.proposed, out.accepted)
        drafter = self.drafter
        if out.proposed and drafter is not None and drafter.source is not None:  # a hybrid says who drafted
            self.stats.count_source(drafter.source, out.proposed, out.accepted)
        self.seq += out.new
        if drafter is not None:
            drafter.rollback(len(self.seq) - 1)
            if out.features is not None and drafter.taps:
                drafter.observe(out.features)
        before = len(self.stats.output_ids)
        if self._emit(out.new):
            self.finish(self._reason())
        return self.stats.output_ids[before:]

    def _emit(self, new: list[int]) -> bool:
        """Append ``new`` up to EOS, a stop token or string, or the token budget; True when the request is done.
        A pass's tokens are the target's picks, so the logprobs scored with them line up with what is kept."""
        out, scored, done = self.stats.output_ids, self._scored, False
        for i, tok in enumerate(new):
            out.append(tok)
            if i < len(scored):
                self.logprobs.append(scored[i])
            if tok == self.eos_id:
                done = True
            elif tok in self.sampling.stop_token_ids:
                self.stop_reason, done = tok, True
            elif self.stop is not None and (hit := self.stop(out)) is not None:
                self.stop_reason, done = hit, True
            if done or len(out) >= self.max_new_tokens:
                done = True
                break
        self._scored = []
        self.stats.output_tokens = len(out)
        return done

    def _reason(self) -> str:
        out = self.stats.output_ids
        return "stop" if self.stop_reason is not None or (out and out[-1] == self.eos_id) else "length"

    def finish(self, reason: str, error: str | None = None) -> None:
        """Finished, for ``reason``; a drafter that learns across requests learns from a normal end only."""
        if self.finished:
            return
        self.status, self.reason, self.error = FINISHED, reason, error
        if self.drafter is not None and reason in ("stop", "length") and self.stats.passes:
            self.drafter.finish(list(self.prompt_ids), list(self.stats.output_ids))


def draft_together(
    seqs: list[Sequence], ks: list[int], clock: Callable[[], float]
) -> tuple[list[list[int]], list[float]]:
    """Every sequence's drafts for one batched pass and its share of the drafting time. Sequences whose drafters
    share a batch key (one EAGLE-3 head) draft together; every other one drafts on its own."""
    drafted: list[list[int]] = [[] for _ in seqs]
    times = [0.0] * len(seqs)
    for seq, k in zip(seqs, ks):  # a deferred prompt pass, timed as the prompt's drafting, not as this pass's
        if k > 0 and not seq.primed:
            t = clock()
            seq.prime()
            seq.stats.draft_prefill_s = (seq.stats.draft_prefill_s or 0.0) + clock() - t
    groups: dict[object, list[int]] = {}
    for j, (seq, k) in enumerate(zip(seqs, ks)):
        key = seq.drafter.batch_key() if (seq.drafter is not None and k > 0) else None
        groups.setdefault(key if key is not None else ("alone", j), []).append(j)
    for group in groups.values():
        t = clock()
        if len(group) == 1:
            drafted[group[0]] = seqs[group[0]].propose(ks[group[0]])
        else:
            together = [d for j in group if (d := seqs[j].drafter) is not None]  # all: keyed sequences draft
            out = type(together[0]).propose_batch(together, [seqs[j].seq for j in group], [ks[j] for j in group])
            for j, proposal in zip(group, out):
                drafted[j] = proposal[: ks[j]]
        share = (clock() - t) / len(group)
        for j in group:
            times[j] = share
    return drafted, times


class QueueFull(Exception):
    """More requests wait than ``max_queue``: the caller answers 429 and nothing is held."""


@dataclass
class Request:
    prompt_ids: list[int]
    max_new_tokens: int
    drafter: str = "none"  # what drafts for this request: none, or a drafter the loader has
    k: int | None = None  # this request's own k for every pass; None: the tuner chooses per step
    sampling: SamplingParams = GREEDY
    stop: StopCheck | None = None  # stop strings, checked on the loop's thread after each emitted token
    ignore_eos: bool = False  # decode to the token budget through EOS (vLLM's ignore_eos, for load tests)
    id: str = ""
    cache_salt: str = ""  # vLLM's field: the prefix cache shares blocks only between requests of the same salt
    submitted: float = field(default_factory=time.perf_counter)
    # called on the loop's thread with each step's new tokens (and their logprobs, where the request asked)
    on_tokens: Callable[[list[int], list[TokenLogprob]], None] | None = None
    on_done: Callable[[Finished], None] | None = None
    cancelled: bool = False  # set by the caller (a client that went away); the row leaves before the next step


@dataclass
class Finished:
    request: Request
    stats: RequestStats
    queue_s: float  # waiting before the prefill began
    batch_sizes: list[int]  # the batch each of its passes ran in
    reason: str = "length"  # stop, length, cancelled, error or aborted (engine.decode.sequence.REASONS)
    error: str | None = None  # the one line an error or abort carries
    stop_reason: int | str | None = None  # the stop token id or string that ended it; None at EOS or the budget
    logprobs: list[TokenLogprob] = field(default_factory=list)  # per output token, when the request asked
    switched_off: list[dict] = field(default_factory=list)  # each time its own acceptance held it off, and why

    @property
    def cancelled(self) -> bool:
        return self.reason == "cancelled"

    @property
    def failed(self) -> bool:
        return self.reason in ("error", "aborted")
