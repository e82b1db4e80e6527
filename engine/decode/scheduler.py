"""The engine core's batched step: continuous batching under one token budget, for the server and the lab alike.

vLLM's scheduler has no decoding phase and no prefill phase (``v1/core/sched/``): each step closes every request's
gap between the tokens it has computed and the tokens it wants, under one budget (``max_num_batched_tokens``),
running requests first. Here too: each step verifies every running row's pending token and drafts in one target
forward (engine.decode.batch), then spends what is left of the budget on waiting prompts, in order, a long one in
chunks of at most ``long_prefill`` tokens; a prompt whose last chunk is in joins the batch with its first token.
So eight prompts that arrive together no longer each wait for all the others' whole prefills before any decodes.

Every request is a ``Sequence`` (engine.decode.sequence): the per-pass counting and the drafter's calls are
written once, for ``spec.generate`` and for this step. The loop has no I/O: callbacks carry tokens out, and
``steps`` keeps plain ``StepRecord``s for whoever records them. A step that raises fails the requests in it with
the error, and the loop goes on; only a failure outside any request ends it (``dead`` says why).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch
from transformers import DynamicCache

from engine.decode.batch import BatchCache, accept_batch, prefill_together, roomy_cache, verify_batch
from engine.decode.drafters import Drafter
from engine.decode.sequence import RequestStats, Sequence
from engine.decode.spec import forward

BUDGET = 512  # max tokens a step computes: every row's pending token and drafts, then prompt chunks
LONG_PREFILL = 256  # the most of one prompt a step prefills (vLLM's long_prefill_token_threshold)


class QueueFull(Exception):
    """More requests wait than ``max_queue``: the caller answers 429 and nothing is held."""


@dataclass
class Request:
    prompt_ids: list[int]
    max_new_tokens: int
    drafter: str = "none"  # what drafts for this request: none, or a drafter the loader has
    k: int | None = None  # this request's own k for every pass; None: the tuner chooses per step
    id: str = ""
    submitted: float = field(default_factory=time.perf_counter)
    on_tokens: Callable[[list[int]], None] | None = None  # called on the loop's thread with each step's new tokens
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

    @property
    def cancelled(self) -> bool:
        return self.reason == "cancelled"

    @property
    def failed(self) -> bool:
        return self.reason in ("error", "aborted")


@dataclass(frozen=True)
class Choice:
    """One step's decision for the rows drafting with one drafter: k, whether it explored, and the estimates."""

    k: int
    explored: bool
    estimate: float  # expected tokens/s of the batch at k
    estimate_off: float  # ... at k = 0 (speculation off)


class Tuner(Protocol):
    """What chooses k for rows that did not fix their own, and learns from every step (engine.serve.tuner)."""

    def choose(self, drafter: str, batch: int) -> Choice: ...

    def observe_forward(self, batch: int, tokens: int, seconds: float) -> None: ...

    def observe_pass(self, drafter: str, asked: int, proposed: int, accepted: int, draft_s: float) -> None: ...


@dataclass
class StepRecord:
    """One batched step, plain: the server stores it as a ``serve_steps`` row."""

    step: int
    at_s: float
    batch: int
    width: int
    drafter: str
    k: int | None  # the tuner's k for the main drafter; None where every row fixed its own
    explored: bool | None
    estimate: float | None
    estimate_off: float | None
    draft_s: float
    verify_s: float
    proposed: int
    accepted: int
    emitted: int
    prefill_tokens: int = 0  # prompt tokens this step prefilled beside the verify


@dataclass(eq=False)
class Row:
    req: Request
    seq: Sequence
    queue_s: float = 0.0
    cache: DynamicCache | None = None  # its own cache while its prompt is prefilled; then the batch holds it
    batch_sizes: list[int] = field(default_factory=list)


class Scheduler:
    def __init__(
        self,
        target,
        drafters: Callable[[str], Drafter | None],
        eos_id: int | None,
        tuner: Tuner | None = None,
        max_batch: int = 8,
        max_queue: int = 64,
        budget: int = BUDGET,
        long_prefill: int = LONG_PREFILL,
        clock=None,
    ):
        """``drafters(kind)``: a drafter of its own for one request (engine.decode.decoder.Decoder.row_drafter)."""
        self.target, self.drafters, self.eos_id, self.tuner = target, drafters, eos_id, tuner
        self.max_batch, self.max_queue = max_batch, max_queue
        self.budget, self.long_prefill = max(1, budget), max(1, min(long_prefill, budget))
        self.clock = clock or time.perf_counter
        self.started = self.clock()
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Row] = []  # admitted, their prompts going in chunk by chunk
        self.rows: list[Row] = []  # running: in the batch cache, in its order
        self.batch = BatchCache.empty(target.device)
        self.steps: deque[StepRecord] = deque(maxlen=100_000)  # the recorder drains it
        self.step_count = 0
        self.arms: Counter[int] = Counter()
        self.errors = 0  # steps that raised
        self.dead: str | None = None  # why the loop stopped for good
        self._cv = threading.Condition()

    # the caller's side --------------------------------------------------------
    def submit(self, req: Request) -> None:
        with self._cv:
            if self.dead is not None:
                raise RuntimeError(f"the decoding loop has stopped: {self.dead}")
            if len(self.waiting) >= self.max_queue:
                raise QueueFull(f"{len(self.waiting)} requests are waiting (--max-queue {self.max_queue})")
            self.waiting.append(req)
            self._cv.notify()

    @property
    def load(self) -> tuple[int, int]:
        """(rows decoding or prefilling, requests waiting)."""
        return len(self.rows) + len(self.prefilling), len(self.waiting)

    def run(self, stop: threading.Event, idle_s: float = 0.05) -> None:
        """Step until ``stop`` is set and nothing is left: a stop drains what was admitted or waits. A failure no
        request explains ends the loop: every request it held ends ``aborted`` with the reason, ``dead`` keeps it."""
        try:
            while True:
                if not self.step():
                    if stop.is_set():
                        return
                    with self._cv:
                        if not self.waiting:
                            self._cv.wait(idle_s)
        except BaseException as exc:
            self.abort(f"{type(exc).__name__}: {exc}")
            raise

    def drain(self) -> None:
        """Step until every request submitted so far has finished (the bench's door: no thread, no waiting)."""
        while self.step():
            pass

    def abort(self, reason: str) -> None:
        with self._cv:
            self.dead = reason
            waiting, self.waiting = list(self.waiting), deque()
        for row in self.rows + self.prefilling + [self._row(r) for r in waiting]:
            self._end(row, "aborted", reason)
        self.rows, self.prefilling = [], []
        self.batch = BatchCache.empty(self.target.device)

    # the loop's side ------------------------------------------------------------
    def step(self) -> bool:
        """Release, admit, one batched pass, then prompt chunks with what is left of the budget. False when there
        was nothing to do."""
        with torch.inference_mode():
            self._release()
            self._admit()
            if not self.rows and not self.prefilling:
                return False
            used, record = 0, None
            if self.rows:
                try:
                    used, record = self._pass()
                except Exception as exc:  # the requests in this step fail; the loop and the others go on
                    self._fail(self.rows, exc)
                    self.rows, self.batch = [], BatchCache.empty(self.target.device)
            prefilled = self._prefill(self.budget - used)
            if record is not None:
                record.prefill_tokens = prefilled
            self._release()
        return True

    def _row(self, req: Request) -> Row:
        drafter = self.drafters(req.drafter) if req.drafter != "none" else None
        seq = Sequence(list(req.prompt_ids), req.max_new_tokens, self.eos_id, drafter, k=req.k or 0)
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
            row.cache = roomy_cache(self.target.config)
            self.prefilling.append(row)

    def _prefill(self, budget: int) -> int:
        """Prompt chunks in arrival order while the budget lasts, at least one chunk a step so prompts always move;
        the prompt tokens it computed. Prompts that start this step prefill their first chunks in one forward."""
        moved, fresh = 0, []
        for row in list(self.prefilling):
            if budget <= 0 and (moved or fresh):
                break
            size = max(1, min(budget, self.long_prefill))
            if row.seq.computed == 0:
                fresh.append((row, row.seq.chunk(size)))
                budget -= len(fresh[-1][1])
                continue
            try:
                n = self._chunk(row, size)
            except Exception as exc:
                self.prefilling.remove(row)
                self._fail([row], exc)
                continue
            budget -= n
            moved += n
        if fresh:
            moved += self._first_chunks(fresh)
        return moved

    def _first_chunks(self, fresh: list[tuple[Row, list[int]]]) -> int:
        """The first chunks of prompts that start this step: together in one forward where there are several."""
        start = self.clock()
        try:
            together = (
                prefill_together(self.target, [ids for _, ids in fresh], fresh[0][0].seq.taps)
                if len(fresh) > 1 and len({row.seq.taps for row, _ in fresh}) == 1
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
        greedy, feats = forward(self.target, row.cache, ids, keep=1, taps=row.seq.taps)
        self._chunked(row, ids, int(greedy[-1]), feats, self.clock() - start)
        return len(ids)

    def _chunked(self, row: Row, ids: list[int], greedy: int, feats, seconds: float) -> None:
        """A chunk is in: count it; after the prompt's last one, the first token, and the row joins the batch."""
        seq, stats = row.seq, row.seq.stats
        seq.prefilled(len(ids), feats)
        stats.prefill_s = (stats.prefill_s or 0.0) + seconds
        if seq.to_prefill:
            return
        stats.ttft_s = self.clock() - row.req.submitted
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

    def _plan(self) -> tuple[list[int], Choice | None, str]:
        """Each row's k for this pass: its own where it fixed one, else the tuner's for its drafter at this batch."""
        b = len(self.rows)
        kinds = Counter(r.req.drafter for r in self.rows if r.req.k is None and r.seq.drafter is not None)
        choices = {kind: self.tuner.choose(kind, b) for kind in kinds} if self.tuner else {}
        ks = []
        for r in self.rows:
            k = r.req.k if r.req.k is not None else (choices[r.req.drafter].k if r.req.drafter in choices else 0)
            ks.append(r.seq.cap(k))
        main = kinds.most_common(1)[0][0] if kinds else self.rows[0].req.drafter
        return ks, choices.get(main), main

    def _pass(self) -> tuple[int, StepRecord]:
        """One verification pass over every running row: the tokens it computed, and its record."""
        ks, choice, main = self._plan()
        drafted, draft_times = self._draft(ks)
        taps = next((r.seq.taps for r in self.rows if r.seq.taps), ())
        start = self.clock()
        predicted, feats = verify_batch(
            self.target, self.batch, [[r.seq.pending] + d for r, d in zip(self.rows, drafted)], taps
        )
        outcomes = accept_batch(self.batch, drafted, predicted, feats)
        verify_s = self.clock() - start
        b, width = len(self.rows), 1 + max(len(d) for d in drafted)
        if self.tuner is not None:
            self.tuner.observe_forward(b, width, verify_s)
        emitted = 0
        for row, k, out, dt in zip(self.rows, ks, outcomes, draft_times):
            row.seq.stats.draft_s += dt
            row.seq.stats.verify_s += verify_s
            row.batch_sizes.append(b)
            if row.seq.drafter is not None and self.tuner is not None:
                self.tuner.observe_pass(row.req.drafter, k, out.proposed, out.accepted, dt)
            new = row.seq.advance(out)
            self._emit(row, new)
            emitted += len(new)
            self.arms[k] += 1
        self.batch.compact_if_sparse()
        self.step_count += 1
        record = StepRecord(
            step=self.step_count,
            at_s=start - self.started,
            batch=b,
            width=width,
            drafter=main,
            k=choice.k if choice else None,
            explored=choice.explored if choice else None,
            estimate=choice.estimate if choice else None,
            estimate_off=choice.estimate_off if choice else None,
            draft_s=sum(draft_times),
            verify_s=verify_s,
            proposed=sum(o.proposed for o in outcomes),
            accepted=sum(o.accepted for o in outcomes),
            emitted=emitted,
        )
        self.steps.append(record)
        return sum(1 + len(d) for d in drafted), record

    def _draft(self, ks: list[int]) -> tuple[list[list[int]], list[float]]:
        """Every row's drafts and its share of the drafting time. Rows whose drafters share a batch key (one
        EAGLE-3 head) draft together; every other row drafts on its own."""
        drafted: list[list[int]] = [[] for _ in self.rows]
        times = [0.0] * len(self.rows)
        groups: dict[object, list[int]] = {}
        for j, (row, k) in enumerate(zip(self.rows, ks)):
            key = row.seq.drafter.batch_key() if (row.seq.drafter is not None and k > 0) else None
            groups.setdefault(key if key is not None else ("alone", j), []).append(j)
        for group in groups.values():
            t = self.clock()
            if len(group) == 1:
                drafted[group[0]] = self.rows[group[0]].seq.propose(ks[group[0]])
            else:
                together = [d for j in group if (d := self.rows[j].seq.drafter) is not None]  # all: keyed rows draft
                out = type(together[0]).propose_batch(
                    together,
                    [self.rows[j].seq.seq for j in group],
                    [ks[j] for j in group],
                )
                for j, proposal in zip(group, out):
                    drafted[j] = proposal[: ks[j]]
            share = (self.clock() - t) / len(group)
            for j in group:
                times[j] = share
        return drafted, times

    def _release(self) -> None:
        keep = []
        for i, row in enumerate(self.rows):
            if row.seq.finished:
                self._end(row, row.seq.reason or "length")
            elif row.req.cancelled:
                self._end(row, "cancelled")
            else:
                keep.append(i)
        if len(keep) != len(self.rows):
            self.rows = [self.rows[i] for i in keep]
            self.batch.keep_rows(keep)
        for row in [r for r in self.prefilling if r.req.cancelled]:
            self.prefilling.remove(row)
            self._end(row, "cancelled")

    def _fail(self, rows: list[Row], exc: BaseException) -> None:
        self.errors += 1
        for row in rows:
            self._end(row, "error", f"{type(exc).__name__}: {exc}")

    def _emit(self, row: Row, tokens: list[int]) -> None:
        if tokens and row.req.on_tokens is not None:
            try:
                row.req.on_tokens(tokens)
            except Exception:  # a caller's callback never stops the loop; the request still finishes
                pass

    def _end(self, row: Row, reason: str, error: str | None = None) -> None:
        """The request leaves: finished for ``reason``, its stats closed, handed to its caller once."""
        seq = row.seq
        seq.finish(reason, error)  # a sequence that finished itself keeps its own reason (stop or length)
        seq.stats.latency_s = self.clock() - row.req.submitted
        if row.req.on_done is not None:
            done = Finished(row.req, seq.stats, row.queue_s, row.batch_sizes, seq.reason or reason, seq.error)
            row.req.on_done(done)
