"""The engine core's batched step: continuous batching under one token budget, for the server and the lab alike.

vLLM's scheduler has no decoding phase and no prefill phase (``v1/core/sched/``): each step closes every request's
gap between the tokens it has computed and the tokens it wants, under one budget (``max_num_batched_tokens``),
running requests first. Here too: each step verifies every running row's pending token and drafts in one target
forward (engine.decode.batch), then spends what is left of the budget on waiting prompts, in order, a long one in
chunks of at most ``long_prefill`` tokens; a prompt whose last chunk is in joins the batch with its first token.
So eight prompts that arrive together no longer each wait for all the others' whole prefills before any decodes.

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
from transformers import DynamicCache

from engine.decode.batch import (
    BatchCache,
    accept_batch,
    prefill_together,
    roomy_cache,
    unbatchable,
    verify_batch,
)
from engine.decode.config import BUDGET, LONG_PREFILL
from engine.decode.drafters import Drafter
from engine.decode.handoff import Callbacks, DecodePlan, PassOutput, RequestOutput, Row, Subscriber, step_record
from engine.decode.prefix import PrefixCache, kv_of, restore
from engine.decode.sequence import Finished, QueueFull, Request, Sequence, draft_together
from engine.decode.spec import forward
from engine.decode.steps import StepRecord, Tuner, plan
from engine.modes import DEFAULT_MAX_BATCH


class Scheduler:
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
    ):
        """``drafters(kind)``: a drafter of its own for one request (engine.decode.decoder.Decoder.row_drafter).
        ``prefix``: a prefix cache prompts are looked up in, and their prefills kept in (None: every prompt cold)."""
        self.target, self.drafters, self.eos_id, self.tuner = target, drafters, eos_id, tuner
        self.unbatched = unbatchable(target)  # why rows decode one at a time (None: they batch)
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
            used, record = 0, None
            if self.rows:
                try:
                    used, record = self._pass()
                except Exception as exc:  # the requests in this step fail; the loop and the others go on
                    self._fail(self.rows, exc)
                    self.rows, self.batch = [], BatchCache.empty(self.target.device)
            prefilled = self._prefill(self.budget - used)
            if record is not None:  # handed to the recorder only now: it drained records before their prefill
                record.prefill_tokens = prefilled  # was counted, and most stored 0 prompt tokens
                self.steps.append(record)
            self._release()
        return True

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

    def _prefill(self, budget: int) -> int:
        """Prompt chunks in arrival order while the budget lasts, at least one chunk a step so prompts always move;
        the prompt tokens it computed. Prompts that start this step prefill their first chunks in one forward."""
        moved, fresh = 0, list[tuple[Row, list[int]]]()
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

    def _chunked(self, row: Row, ids: list[int], greedy: int, feats, seconds: float) -> None:
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

    def _pass(self) -> tuple[int, StepRecord]:
        """One verification pass over every running row: the tokens it computed, and its record."""
        plan = self._schedule()
        return self._update(plan, self._execute(plan))

    def _schedule(self) -> DecodePlan:
        room = self.max_batch - len(self.rows)
        ks, used, choice, main, off = plan(self.rows, self.tuner, min(room, len(self.prefilling) + len(self.waiting)))
        return DecodePlan(list(self.rows), ks, used, choice, main, off)

    def _execute(self, p: DecodePlan) -> PassOutput:
        drafted, draft_s = draft_together([r.seq for r in p.rows], p.ks, self.clock)
        taps = next((r.seq.taps for r in p.rows if r.seq.taps), ())
        start = self.clock()
        predicted, feats = verify_batch(
            self.target,
            self.batch,
            [[r.seq.pending] + d for r, d in zip(p.rows, drafted)],
            taps,
            [r.seq.picker for r in p.rows],
        )
        outcomes = accept_batch(self.batch, drafted, predicted, feats)
        return PassOutput(drafted, draft_s, outcomes, start, self.clock() - start)

    def _update(self, p: DecodePlan, out: PassOutput) -> tuple[int, StepRecord]:
        b, width = len(p.rows), 1 + max(len(d) for d in out.drafted)
        if self.tuner is not None:
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
