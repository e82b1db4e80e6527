"""What the engine core's step reports and whom it consults: a plain record of every step (the server stores it
as a ``serve_steps`` row), and the tuner that chooses k for rows that fixed none (engine.serve.tuner), with its
choice. Plain data: no database type reaches the decoding loop.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Protocol

from engine.measure import StepRecord  # noqa: F401  (re-exported: the step's record, defined once)


@dataclass(frozen=True)
class Choice:
    """One step's decision for the rows drafting with one drafter: k, whether it explored, and the estimates."""

    k: int
    explored: bool
    estimate: float  # expected tokens/s of the batch at k
    estimate_off: float  # ... at k = 0 (speculation off)
    drafter: str | None = None  # the drafter chosen, where the rows let the tuner choose it too
    probe: bool = False  # a one-row probe (engine.serve.tuner.REPROBE_STEPS): it drafts even a row not yet primed


class Tuner(Protocol):
    """What chooses k for rows that did not fix their own, and learns from every step (engine.serve.tuner)."""

    def choose(self, drafter: str, batch: int) -> Choice: ...

    def choose_drafter(self, drafters: tuple[str, ...], batch: int) -> Choice: ...

    def observe_forward(self, batch: int, tokens: int, seconds: float) -> None: ...

    def observe_pass(self, drafter: str, asked: int, proposed: int, accepted: int, draft_s: float) -> None: ...

    def break_even(self, drafter: str, batch: int, k: int) -> float:
        """The accepted drafts a row's pass at ``k`` must bring, at this batch, to beat the row drafting nothing."""
        ...

    def expected_accepted(self, drafter: str, k: int) -> float:
        """E[accepted drafts] of a pass at ``k`` over every row's passes: what a row's own estimate shrinks to."""
        ...


WINDOW_PASSES = 8  # a row's own recent drafting passes, the ones its acceptance is judged on
ROW_PRIOR = 8  # passes' worth of the drafter's pooled acceptance a row's own estimate is shrunk toward: 8 passes
# of one row are noisy, and the pooled figure is what chose this k
REPROBE_PASSES = 32  # passes a row held off drafts nothing before it drafts again to measure itself anew
PRIME_ABOVE = 1.15  # a row whose drafter has not seen its prompt starts drafting only where the tuner expects this
# much over speculation off: at 8 rows, steps chosen on estimates of 1.01-1.07x of off (a noisy cost cell) started
# rows drafting, each paying its head's pass over its whole context, where the tuner then stayed at k = 0, and it
# made 0.90-0.96x of off (runs #736-#752); exploring steps from k = 0 had started rows the same way (#716, #727)


@dataclass
class RowAcceptance:
    """One row's own recent passes, judged against the break-even its k needs at the batch it runs in. The tuner
    chooses k per drafter from every row's passes pooled; a request whose text its drafter cannot predict (prose
    after code, a new language) drags the batch's width for nothing. TRT-LLM switches speculation off for good
    when rolling acceptance drops; here the row drafts nothing for REPROBE_PASSES passes, then probes again, since
    a request's text changes as it goes."""

    recent: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=WINDOW_PASSES))  # (proposed, accepted)
    off: int = 0  # passes left at k = 0
    decisions: list[dict] = field(default_factory=list)  # each switch-off with the figures it used

    def observe(self, proposed: int, accepted: int) -> None:
        if proposed > 0:  # a pass with nothing proposed cost this row nothing: nothing to judge
            self.recent.append((proposed, accepted))

    def expected(self, k: int) -> float:
        """E[accepted drafts] of a pass at ``k`` from the recent passes alone: per position, the share of passes
        that proposed it in which it was accepted (with every one before it); a position never proposed at half the
        rate of the one before."""
        total, rate = 0.0, 1.0
        for i in range(k):
            asked = [a for p, a in self.recent if p > i]
            rate = sum(a > i for a in asked) / len(asked) if asked else rate * 0.5
            total += rate
        return total

    def hold(self, k: int, break_even: float, at_pass: int, pooled: float | None = None) -> bool:
        """Whether the row drafts nothing this pass: while held, or when its recent passes, shrunk toward the
        drafter's ``pooled`` estimate (ROW_PRIOR passes' worth), fall below ``break_even`` (the decision kept with
        its figures)."""
        if self.off > 0:
            self.off -= 1
            if self.off == 0:
                self.recent.clear()  # probe anew: judged again after WINDOW_PASSES drafting passes
            return True
        if k == 0 or len(self.recent) < WINDOW_PASSES:
            return False
        own = self.expected(k)
        n = len(self.recent)
        expected = own if pooled is None else (n * own + ROW_PRIOR * pooled) / (n + ROW_PRIOR)
        if expected >= break_even:
            return False
        self.off = REPROBE_PASSES - 1  # this pass is the first held
        self.decisions.append(
            {
                "pass": at_pass,
                "k": k,
                "own": round(own, 3),
                "pooled": None if pooled is None else round(pooled, 3),
                "expected_accepted": round(expected, 3),
                "break_even": round(break_even, 3),
            }
        )
        return True


def plan(rows: list, tuner: Tuner | None, joining: int = 0) -> tuple[list[int], list[str], Choice | None, str, int]:
    """Each running row's k and drafter for this pass (rows: the scheduler's, each with its ``req`` and ``seq``):
    its own k where it fixed one, else the tuner's for its drafter at this batch; rows that let the tuner choose the
    drafter too (a choice) get the drafter it names. Also the step's choice and its main drafter, for its record.

    ``joining``: requests admitted or waiting that will share the batch within a few steps. A row whose drafter
    has not seen its prompt yet (a deferred prompt pass) drafts only where the tuner would draft at the batch it
    is about to run in: the first row of a burst once paid the draft model's whole prompt pass to draft for a step
    or two alone, then ran at k = 0 beside the rest (0.92 of speculation off at 4 requests, runs #328 and #334).

    A row the tuner would draft for drafts nothing where its own recent acceptance is below the break-even of its
    k at this batch (``RowAcceptance``); the last value returned counts those rows."""
    b = len(rows)
    tuned = [r.req.k is None and r.seq.drafter is not None for r in rows]  # the tuner decides their k
    soon = {}  # per drafter: the tuner's k at the batch the joining requests make
    if tuner is not None and joining > 0:
        for kind in {r.req.drafter for r, t in zip(rows, tuned) if t and not r.seq.options and not r.seq.primed}:
            coming = tuner.choose(kind, b + joining)
            soon[kind] = coming.k - int(coming.explored)  # an exploring step is one deeper than the choice
    choosing = [r for r, t in zip(rows, tuned) if t and r.seq.options]
    choices: dict[str, Choice] = {}
    if tuner is not None:
        for kind in {r.req.drafter for r, t in zip(rows, tuned) if t and not r.seq.options}:
            choices[kind] = tuner.choose(kind, b)
        if choosing:
            choices["choice"] = pick = tuner.choose_drafter(choosing[0].seq.options, b)
            for r in choosing:
                r.seq.use(pick.drafter or r.seq.options[0])
    ks, used, off = [], [], 0
    for r, t in zip(rows, tuned):
        c = choices.get("choice" if r.seq.options else r.req.drafter) if t else None
        k = c.k if c else (r.req.k or 0)
        if t and not r.seq.primed and soon.get(r.req.drafter) == 0:
            k = 0  # the batch is about to grow to where the tuner would not draft: no prompt pass for a step or two
        if t and c is not None and not r.seq.primed and not c.probe and c.estimate < PRIME_ABOVE * c.estimate_off:
            k = 0  # a row's first draft pays its drafter's pass over the whole context: it starts only where
            # speculation is expected to win clearly (an exploring step from k = 0 never does)
        kind = c.drafter if c and c.drafter else r.req.drafter
        k = r.seq.cap(k)
        if t and tuner is not None and k > 0 and _held(r, tuner, kind, b, k):
            k, off = 0, off + 1
        ks.append(k)
        used.append(kind)
    drafting = Counter(u for u, r in zip(used, rows) if r.seq.drafter is not None)
    main = drafting.most_common(1)[0][0] if drafting else rows[0].req.drafter
    return ks, used, choices.get("choice") or choices.get(main), main, off


def _held(row, tuner: Tuner, kind: str, batch: int, k: int) -> bool:
    be = tuner.break_even(kind, batch, k)
    return be > float("-inf") and row.acceptance.hold(k, be, row.seq.stats.passes, tuner.expected_accepted(kind, k))
