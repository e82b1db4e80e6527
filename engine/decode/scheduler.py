"""The engine core's batched step: continuous batching under one token budget, for the server and the lab alike.

vLLM's scheduler has no decoding phase and no prefill phase (``v1/core/sched/``): each step closes every request's
gap between the tokens it has computed and the tokens it wants, under one budget (``max_num_batched_tokens``),
running requests first. Here too: each step verifies every running row's pending token and drafts in one target
forward (engine.decode.batch), then spends what is left of the budget on waiting prompts, in order, a long one in
chunks of at most ``long_prefill`` tokens (engine.decode.intake, the prompt side); a prompt whose last chunk is in
joins the batch with its first token. So eight prompts that arrive together no longer each wait for all the
others' whole prefills before any decodes. Where the target runs several calls as one forward (Phoenix's runner),
the chunks ride in the verify's forward, vLLM V1's mixed step (engine.decode.mixed): the weights are read once.

Every request is a ``Sequence`` (engine.decode.sequence): the per-pass counting and the drafter's calls are
written once, for ``spec.generate`` and for this step. A pass is vLLM's step: ``_schedule`` plans it as data (a
``DecodePlan``: each row's k and drafter), ``_execute`` runs it (drafts, one batched verify, the acceptance: a
``PassOutput``), ``_update`` applies the outcome (each sequence advanced, a ``RequestOutput`` per request to every
subscriber, a ``StepRecord``); engine.decode.handoff names them. The loop has no I/O: subscribers carry outputs
out (the client's streams, the server's recorder), and ``steps`` keeps plain ``StepRecord``s for whoever records
them. A step that raises fails the requests in it with the error, and the loop goes on; only a failure outside
any request ends it (``dead`` says why).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

import torch

from engine.decode.batch import (
    BatchCache,
    accept_batch,
    unbatchable,
    verify_batch,
)
from engine.decode.config import BUDGET, LONG_PREFILL
from engine.decode.drafters import Drafter
from engine.decode.handoff import Callbacks, DecodePlan, PassOutput, RequestOutput, Row, Subscriber, step_record
from engine.decode.intake import Intake
from engine.decode.mixed import Chunk, mixes, verify_and_prefill
from engine.decode.prefix import PrefixCache
from engine.decode.sequence import Finished, QueueFull, Request, draft_together
from engine.decode.steps import StepRecord, Tuner, plan
from engine.modes import DEFAULT_MAX_BATCH


class Scheduler(Intake):
    def __init__(
        self,
        target,
        drafters: Callable[[str], Drafter | None],
        eos_id: int | None,
        tuner: Tuner | None = None,
        max_batch: int = DEFAULT_MAX_BATCH,
        max_queue: int = 64,
        budget: int = BUDGET,
        long_prefill: int = LONG_PREFILL,
        clock=None,
        prefix: PrefixCache | None = None,
        keep_taps: tuple[int, ...] = (),
        mix: bool = True,
    ):
        """``drafters(kind)``: a drafter of its own for one request (engine.decode.decoder.Decoder.row_drafter).
        ``prefix``: a prefix cache prompts are looked up in, and their prefills kept in (None: every prompt cold).
        ``mix``: prompts' chunks go into the verify's forward where the target can (engine.decode.mixed)."""
        self.target, self.drafters, self.eos_id, self.tuner = target, drafters, eos_id, tuner
        self.unbatched = unbatchable(target)  # why rows decode one at a time (None: they batch)
        self.mixes = mix and mixes(target) and self.unbatched is None
        self.max_batch, self.max_queue = (1 if self.unbatched else max_batch), max_queue
        self.budget, self.long_prefill = max(1, budget), max(1, min(long_prefill, budget))
        self.clock = clock or time.perf_counter
        self.prefix = prefix
        # the taps every prompt's prefix entry keeps (the server's head's): a request that does not draft stores
        # them too, so a drafting request after it still finds the shared prefix (alternating once missed it)
        self.keep_taps = keep_taps if prefix is not None else ()
        self.started = self.clock()
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Row] = []  # admitted, their prompts going in chunk by chunk
        self.rows: list[Row] = []  # running: in the batch cache, in its order
        self.batch = BatchCache.empty(target.device)
        self.steps: deque[StepRecord] = deque(maxlen=100_000)  # the recorder drains it
        self.step_count = 0
        self.errors = 0  # steps that raised
        self.dead: str | None = None  # why the loop stopped for good
        self.ending: str | None = None  # why every held request is to end before the next step (end_all)
        self.subscribers: list[Subscriber] = [Callbacks()]  # in order; the request's own callbacks last
        self._cv = threading.Condition()

    def subscribe(self, subscriber: Subscriber) -> None:
        """``subscriber`` gets every RequestOutput from now on, after those subscribed before it."""
        self.subscribers.insert(len(self.subscribers) - 1, subscriber)

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

    @property
    def held_by_row(self) -> list[int]:
        """Each admitted request's tokens in the KV cache: its row in the batch, or its prompt so far."""
        return list(self.batch.lengths) + [r.seq.computed for r in self.prefilling]

    def run(self, stop: threading.Event, idle_s: float = 0.05, idle: Callable[[], bool] | None = None) -> None:
        """Step until ``stop`` is set and nothing is left: a stop drains what was admitted or waits. ``idle`` runs
        on this thread when no request needs a step (the server's shadow checks: the model is never shared, and
        no step's timing includes them); it says whether it did anything. A failure no request explains ends the
        loop: every request it held ends ``aborted`` with the reason, ``dead`` keeps it."""
        try:
            while True:
                if not self.step():
                    if idle is not None and idle():
                        continue
                    if stop.is_set():
                        return
                    with self._cv:
                        if not self.waiting:
                            self._cv.wait(idle_s)
        except BaseException as exc:
            self.abort(f"{type(exc).__name__}: {exc}")
            raise

    def end_all(self, reason: str) -> None:
        """Ask the loop to end every request it holds (``aborted``, with the reason) before its next step; safe from
        a signal handler or another thread, since the loop itself does the ending."""
        with self._cv:
            self.ending = reason
            self._cv.notify()

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
        if self.ending is not None and (self.rows or self.prefilling or self.waiting):
            self.abort(self.ending)  # a shutdown's deadline or second signal: what is held ends now
        with torch.inference_mode():
            self._release()
            self._admit()
            if not self.rows and not self.prefilling:
                return False
            used, prefilled, record = 0, 0, None
            if self.rows:
                try:
                    used, prefilled, record = self._pass()
                except Exception as exc:  # the requests in this step fail; the loop and the others go on
                    self._fail(self.rows, exc)
                    self.rows, self.batch = [], BatchCache.empty(self.target.device)
            prefilled = prefilled or self._prefill(self.budget - used)
            if record is not None:  # handed to the recorder only now: it drained records before their prefill
                record.prefill_tokens = prefilled  # was counted, and most stored 0 prompt tokens
                self.steps.append(record)
            self._release()
        return True

    def _pass(self) -> tuple[int, int, StepRecord]:
        """One verification pass over every running row, waiting prompts' chunks in its forward where the target
        mixes them in: the tokens it verified, the prompt tokens it computed, and its record."""
        plan = self._schedule()
        chunks = self._chunks(self.budget - sum(1 + k for k in plan.ks)) if self.mixes and self.prefilling else []
        try:
            out = self._execute(plan, chunks)
        except Exception as exc:  # the prompts in the failed forward fail with the rows (the caller's)
            for row, _ in chunks:
                self.prefilling.remove(row)
                self._end(row, "error", f"{type(exc).__name__}: {exc}")
            raise
        used, record = self._update(plan, out)
        for (row, ids), (first, feats) in zip(chunks, out.chunks):  # after the update: a finished prompt joins
            self._chunked(row, ids, first, feats, out.verify_s)
        return used, sum(len(ids) for _, ids in chunks), record

    def _schedule(self) -> DecodePlan:
        room = self.max_batch - len(self.rows)
        ks, used, choice, main, off = plan(self.rows, self.tuner, min(room, len(self.prefilling) + len(self.waiting)))
        return DecodePlan(list(self.rows), ks, used, choice, main, off)

    def _execute(self, p: DecodePlan, chunks: list[tuple[Row, list[int]]]) -> PassOutput:
        drafted, draft_s = draft_together([r.seq for r in p.rows], p.ks, self.clock)
        taps = next((r.seq.taps for r in p.rows if r.seq.taps), ())
        tokens, picks = [[r.seq.pending] + d for r, d in zip(p.rows, drafted)], [r.seq.picker for r in p.rows]
        start, firsts = self.clock(), list[tuple[int | None, torch.Tensor | None]]()
        if chunks:
            predicted, feats, firsts = verify_and_prefill(
                self.target, self.batch, tokens, taps, picks, [self._chunk_of(row, ids) for row, ids in chunks]
            )
        else:
            predicted, feats = verify_batch(self.target, self.batch, tokens, taps, picks)
        outcomes = accept_batch(self.batch, drafted, predicted, feats)
        return PassOutput(drafted, draft_s, outcomes, start, self.clock() - start, firsts)

    def _chunk_of(self, row: Row, ids: list[int]) -> Chunk:
        last = len(ids) == row.seq.to_prefill  # only the prompt's last chunk picks the first token
        assert row.cache is not None
        return Chunk(row.cache, ids, self._taps(row.seq), last, row.seq.picker if last else None)

    def _update(self, p: DecodePlan, out: PassOutput) -> tuple[int, StepRecord]:
        b, width = len(p.rows), 1 + max(len(d) for d in out.drafted)
        if self.tuner is not None and not out.chunks:  # a pass's cost cell, not a prompt's chunk beside it
            self.tuner.observe_forward(b, width, out.verify_s)
        emitted = 0
        for row, k, kind, outcome, dt in zip(p.rows, p.ks, p.used, out.outcomes, out.draft_s):
            row.seq.stats.draft_s += dt
            row.seq.stats.verify_s += out.verify_s
            row.batch_sizes.append(b)
            if row.seq.drafter is not None and self.tuner is not None:
                self.tuner.observe_pass(kind, k, outcome.proposed, outcome.accepted, dt)
                row.acceptance.observe(outcome.proposed, outcome.accepted)
            new = row.seq.advance(outcome)
            self._emit(row, new)
            emitted += len(new)
        self.batch.compact_if_sparse()
        self.step_count += 1
        record = step_record(self.step_count, out.started - self.started, p, out, emitted)
        return sum(1 + len(d) for d in out.drafted), record

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
            order = self.batch.keep_rows(keep)  # a leaving row's place may go to the last row: rows follow the cache
            self.rows = [self.rows[i] for i in order]
        for row in [r for r in self.prefilling if r.req.cancelled]:
            self.prefilling.remove(row)
            self._end(row, "cancelled")

    def _fail(self, rows: list[Row], exc: BaseException) -> None:
        self.errors += 1
        for row in rows:
            self._end(row, "error", f"{type(exc).__name__}: {exc}")

    def _emit(self, row: Row, tokens: list[int]) -> None:
        if tokens:
            lps = row.seq.logprobs[-len(tokens) :] if row.seq.sampling.logprobs is not None else []
            self._publish(RequestOutput(row.req, tokens, lps))

    def _end(self, row: Row, reason: str, error: str | None = None) -> None:
        """The request leaves: finished for ``reason``, its stats closed, published once."""
        seq = row.seq
        seq.finish(reason, error)  # a sequence that finished itself keeps its own reason (stop or length)
        seq.stats.latency_s = self.clock() - row.req.submitted
        reason, stopped = seq.reason or reason, seq.stop_reason
        done = Finished(row.req, seq.stats, row.queue_s, row.batch_sizes, reason, seq.error, stopped, seq.logprobs)
        done.switched_off = row.acceptance.decisions
        self._publish(RequestOutput(row.req, [], [], done))

    def _publish(self, output: RequestOutput) -> None:
        for subscriber in self.subscribers:
            try:
                subscriber.publish(output)
            except Exception:  # a subscriber never stops the loop (an HTTP server already gone, say)
                pass
