"""Continuous batching: one loop owns up to ``max_batch`` rows and runs them a step at a time.

Between steps it admits waiting requests (each prefilled on its own, then joining the batch) and releases finished
or cancelled ones, so a request never waits for another to finish. Each step drafts every row (k from the tuner,
or the request's own), verifies all rows in one target forward (``engine.serve.batch``), and hands each request
its new tokens. The loop is single-threaded and has no I/O: callbacks carry tokens out, and ``steps`` keeps the
decisions for the recorder.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import torch
from transformers import DynamicCache

from db.entities import ServeStepRecord
from engine.decode.decoder import Decoder
from engine.decode.eagle3.batch import propose_batch
from engine.decode.eagle3.drafter import Eagle3Drafter
from engine.decode.spec import Drafter, RequestStats, draft, hook, prefill, taps_of
from engine.serve.batch import BatchCache, accept_batch, verify_batch
from engine.serve.tuner import Choice, LoadTuner


class QueueFull(Exception):
    """More requests wait than ``max_queue``: the caller answers 429 and nothing is held."""


@dataclass
class ServeRequest:
    prompt_ids: list[int]
    max_new_tokens: int
    drafter: str = "none"  # what drafts for this request: none, or a drafter the server loaded
    k: int | None = None  # this request's own k for every pass; None: the tuner chooses per step
    id: str = ""
    submitted: float = field(default_factory=time.perf_counter)
    on_tokens: Callable[[list[int]], None] | None = None  # called on the loop's thread with each step's new tokens
    on_done: Callable[[Finished], None] | None = None
    cancelled: bool = False  # set by the caller (a client that went away); the row leaves before the next step


@dataclass
class Finished:
    request: ServeRequest
    stats: RequestStats
    queue_s: float  # waiting before the prefill
    batch_sizes: list[int]  # the batch each of its passes ran in
    cancelled: bool = False
    error: str | None = None


@dataclass
class Row:
    req: ServeRequest
    stats: RequestStats
    seq: list[int]  # prompt and output so far; ends with the pending token
    drafter: Drafter | None
    queue_s: float
    batch_sizes: list[int] = field(default_factory=list)
    done: bool = False


class Scheduler:
    def __init__(self, decoder: Decoder, tuner: LoadTuner, max_batch: int = 8, max_queue: int = 64, clock=None):
        self.decoder = decoder
        self.target = decoder.pair.target
        self.tuner = tuner
        self.max_batch, self.max_queue = max_batch, max_queue
        self.clock = clock or time.perf_counter
        self.started = self.clock()
        self.waiting: deque[ServeRequest] = deque()
        self.rows: list[Row] = []
        self.batch = BatchCache.empty(self.target.device)
        self.steps: deque[ServeStepRecord] = deque(maxlen=100_000)  # the recorder drains it
        self.step_count = 0
        self.arms: Counter[int] = Counter()
        self._cv = threading.Condition()

    # the caller's side --------------------------------------------------------
    def submit(self, req: ServeRequest) -> None:
        with self._cv:
            if len(self.waiting) >= self.max_queue:
                raise QueueFull(f"{len(self.waiting)} requests are waiting (--max-queue {self.max_queue})")
            self.waiting.append(req)
            self._cv.notify()

    @property
    def load(self) -> tuple[int, int]:
        """(rows decoding, requests waiting)."""
        return len(self.rows), len(self.waiting)

    def run(self, stop: threading.Event, idle_s: float = 0.05) -> None:
        """Step until ``stop`` is set and nothing is left: a stop drains what was admitted or waits."""
        while True:
            busy = self.step()
            if not busy:
                if stop.is_set():
                    return
                with self._cv:
                    if not self.waiting:
                        self._cv.wait(idle_s)

    # the loop's side ------------------------------------------------------------
    def step(self) -> bool:
        """Admit, run one batched pass, release. False when there was nothing to do."""
        with torch.inference_mode():
            self._release()
            self._admit()
            if not self.rows:
                return False
            self._pass()
            self._release()
        return True

    def _admit(self) -> None:
        while len(self.rows) < self.max_batch:
            with self._cv:
                if not self.waiting:
                    return
                req = self.waiting.popleft()
            if req.cancelled:
                self._finish(Row(req, RequestStats(prompt_tokens=len(req.prompt_ids)), [], None, 0.0), cancelled=True)
                continue
            self._join(req)

    def _join(self, req: ServeRequest) -> None:
        start = self.clock()
        stats = RequestStats(prompt_tokens=len(req.prompt_ids), k=req.k or 0)
        drafter = self.decoder.row_drafter(req.drafter) if req.drafter != "none" else None
        cache = DynamicCache(config=self.target.config)
        first, feats = prefill(self.target, cache, req.prompt_ids, taps_of(drafter))
        stats.prefill_s = self.clock() - start
        row = Row(req, stats, list(req.prompt_ids) + [first], drafter, start - req.submitted)
        stats.ttft_s = self.clock() - req.submitted
        done = stats.emit([first], self.decoder.eos_id, req.max_new_tokens)
        self._emit(row, [first])
        if drafter is not None and not done:
            before = self.clock()
            if feats is not None:
                hook(drafter, "observe", feats)
            hook(drafter, "reset", list(req.prompt_ids))
            stats.draft_prefill_s = self.clock() - before
        if done:
            self._finish(row)
            return
        self.batch.add_row(cache, len(req.prompt_ids))
        self.rows.append(row)

    def _plan(self) -> tuple[list[int], Choice | None, str]:
        """Each row's k for this pass: its own where it fixed one, else the tuner's for its drafter at this batch."""
        b = len(self.rows)
        kinds = Counter(r.req.drafter for r in self.rows if r.req.k is None and r.drafter is not None)
        choices = {kind: self.tuner.choose(kind, b) for kind in kinds}
        ks = []
        for r in self.rows:
            cap = r.req.max_new_tokens - len(r.stats.output_ids) - 1
            if r.drafter is None:
                k = 0
            elif r.req.k is not None:
                k = r.req.k
            else:
                k = choices[r.req.drafter].k
            ks.append(max(0, min(k, cap)))
        main = kinds.most_common(1)[0][0] if kinds else (self.rows[0].req.drafter if self.rows else "none")
        return ks, choices.get(main), main

    def _pass(self) -> None:
        ks, choice, main = self._plan()
        drafted, draft_times = self._draft(ks)
        for row, dt in zip(self.rows, draft_times):
            row.stats.draft_s += dt
        taps = next((taps_of(r.drafter) for r in self.rows if taps_of(r.drafter)), ())
        start = self.clock()
        pending = [[r.seq[-1]] + d for r, d in zip(self.rows, drafted)]
        predicted, feats = verify_batch(self.target, self.batch, pending, taps)
        outcomes = accept_batch(self.batch, drafted, predicted, feats)
        verify_s = self.clock() - start
        b, width = len(self.rows), 1 + max(len(d) for d in drafted)
        self.tuner.observe_forward(b, width, verify_s)
        emitted = 0
        for row, k, out, dt in zip(self.rows, ks, outcomes, draft_times):
            row.stats.count_pass(out.proposed, out.accepted)
            if out.proposed and (source := getattr(row.drafter, "source", None)):  # a hybrid's source, as in generate
                row.stats.count_source(source, out.proposed, out.accepted)
            row.stats.verify_s += verify_s
            row.batch_sizes.append(b)
            if row.drafter is not None:
                self.tuner.observe_pass(row.req.drafter, k, out.proposed, out.accepted, dt)
            row.seq += out.new
            if row.drafter is not None:
                hook(row.drafter, "rollback", len(row.seq) - 1)
                if out.features is not None and taps_of(row.drafter):
                    hook(row.drafter, "observe", out.features)
            before = len(row.stats.output_ids)
            row.done = row.stats.emit(out.new, self.decoder.eos_id, row.req.max_new_tokens)
            self._emit(row, row.stats.output_ids[before:])
            emitted += len(row.stats.output_ids) - before
            self.arms[k] += 1
        self.step_count += 1
        self.steps.append(
            ServeStepRecord(
                step=self.step_count,
                at_s=start - self.started,
                batch=b,
                width=width,
                drafter=main,
                k=choice.k if choice else None,  # None where every row fixed its own k
                explored=choice.explored if choice else None,
                estimate=choice.estimate if choice else None,
                estimate_off=choice.estimate_off if choice else None,
                draft_s=sum(draft_times),
                verify_s=verify_s,
                proposed=sum(o.proposed for o in outcomes),
                accepted=sum(o.accepted for o in outcomes),
                emitted=emitted,
            )
        )

    def _draft(self, ks: list[int]) -> tuple[list[list[int]], list[float]]:
        """Every row's drafts and its share of the drafting time. Rows drafting with one EAGLE-3 head share its
        forwards (engine.decode.eagle3.batch); every other drafter, and a head with one row, drafts per row."""
        drafted: list[list[int]] = [[] for _ in self.rows]
        times = [0.0] * len(self.rows)
        heads: dict[int, list[int]] = {}
        for j, (row, k) in enumerate(zip(self.rows, ks)):
            if isinstance(row.drafter, Eagle3Drafter) and k > 0:
                heads.setdefault(id(row.drafter.head), []).append(j)
        groups = [g for g in heads.values() if len(g) > 1]
        shared = {j for g in groups for j in g}
        for j in (j for j in range(len(self.rows)) if j not in shared):
            t = self.clock()
            drafted[j] = draft(self.rows[j].drafter, self.rows[j].seq, ks[j])
            times[j] = self.clock() - t
        for group in groups:
            t = self.clock()
            rows = [self.rows[j] for j in group]
            out = propose_batch(
                [cast(Eagle3Drafter, r.drafter) for r in rows], [r.seq for r in rows], [ks[j] for j in group]
            )
            share = (self.clock() - t) / len(group)
            for j, proposal in zip(group, out):
                drafted[j], times[j] = proposal[: ks[j]], share
        return drafted, times

    def _release(self) -> None:
        keep = []
        for i, row in enumerate(self.rows):
            if row.done:
                self._finish(row)
            elif row.req.cancelled:
                self._finish(row, cancelled=True)
            else:
                keep.append(i)
        if len(keep) != len(self.rows):
            self.rows = [self.rows[i] for i in keep]
            self.batch.keep_rows(keep)

    def _emit(self, row: Row, tokens: list[int]) -> None:
        if tokens and row.req.on_tokens is not None:
            row.req.on_tokens(tokens)

    def _finish(self, row: Row, cancelled: bool = False) -> None:
        stats = row.stats
        stats.latency_s = self.clock() - row.req.submitted
        if row.drafter is not None and not cancelled:
            hook(row.drafter, "finish", list(row.req.prompt_ids), list(stats.output_ids))
        if row.req.on_done is not None:
            row.req.on_done(Finished(row.req, stats, row.queue_s, row.batch_sizes, cancelled))
