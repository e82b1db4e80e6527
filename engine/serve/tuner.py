"""The server's own speculation policy: k per step from the live batch and what it has measured.

Two models, both measured here, both updated after every step:
- **cost**: seconds of one target forward over B rows of n tokens each (profiled at start-up on a grid, refined by
  every forward the server runs: the mean of the cell's last WINDOW forwards; between grid points, interpolated on
  B and n). On these CPUs a forward now and then takes 2-4 times its usual time, and how often depends on the
  width (SmolLM2, one row, 2026-12-01: width 4 median 64 ms, mean 80 ms; width 5 median 69 ms, mean 72 ms), so the
  mean is what throughput follows and the median would mislead. A window, not an exponential average: one slow
  forward in a rarely chosen cell weighed on it for dozens of steps, and the tuner stayed off the k that was
  faster (it kept k = 3 at concurrency 1 while k = 4 was 12% faster); in a window it counts 1/15 and then leaves;
- **acceptance**, per drafter: for each draft position i, the share of passes that asked for more than i tokens in
  which the drafter proposed position i, and in which positions 0..i were all accepted. A chain draft asked at k
  shows what every smaller k would have done, so one pass updates every arm at once.

For a batch of B rows drafting with one drafter, k's expected throughput is
  B · (1 + E[accepted | k]) / (cost(B, 1 + k) + B · draft_s(k))
and the tuner takes the k that maximizes it, k = 0 included: under load, where a wider forward costs more than the
tokens it adds, speculation turns itself off, and back on when the load falls. A small share of steps explore one
position deeper than the best k, so the deeper positions' acceptance stays measured; at one row, a tuner that has
chosen k = 0 for REPROBE_STEPS steps in a row drafts once at k = 1 whatever its estimate (a probe), so a drafter
judged on a few poor requests is measured again. draft_s(k) is measured per k (a pass costs a fixed part and a part
per position), and a cell of the cost grid no step has run lately moves with its batch's one-token cell.
"""

from __future__ import annotations

import bisect
import random
import statistics
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.decode.steps import Choice

WINDOW = 15  # the forwards a cost cell's mean is taken over
PRIOR_PASSES = 2.0  # pseudo-passes behind each position's acceptance estimate
PRIOR_RATE = 0.5  # the acceptance a position starts from before any pass asked for it
SPECULATE_ABOVE = 1.05  # speculate only where it is expected to beat speculation off by this much (at 8 rows the
# tuner drafted in half the steps on estimates 0.5% above off and ran 0.88x of off: runs #154-#159)
EXPLORE_WITHIN = 0.9  # an exploring step is expected to keep at least this share of the best choice's throughput
DRAFT_PASSES = 3  # passes at a k before their mean drafting time prices that k
REPROBE_STEPS = 16  # one-row steps in a row at k = 0, after which one drafts at k = 1 whatever the estimate


@dataclass
class CostModel:
    """Seconds of a target forward over ``b`` rows of ``n`` tokens each: measured cells, interpolated between."""

    cells: dict[tuple[int, int], float] = field(default_factory=dict)  # each cell's estimate: its recent mean
    recent: dict[tuple[int, int], deque[float]] = field(default_factory=dict)
    anchors: dict[tuple[int, int], float] = field(default_factory=dict)  # (b, 1)'s estimate when (b, n) was measured

    def observe(self, b: int, n: int, seconds: float) -> None:
        window = self.recent.get((b, n))
        if window is None:
            window = self.recent[(b, n)] = deque([self.cells[(b, n)]] if (b, n) in self.cells else [], WINDOW)
        window.append(seconds)
        self.cells[(b, n)] = statistics.fmean(window)
        self.anchor(b, n)

    def anchor(self, b: int, n: int) -> None:
        """Remember the one-token cell of batch b as (b, n) is measured (``now``)."""
        if n > 1 and (b, 1) in self.cells:
            self.anchors[(b, n)] = self.cells[(b, 1)]

    def now(self, b: int, n: int) -> float:
        """A measured cell's estimate, moved as far as its batch's one-token cell has moved since the cell was last
        measured. A width the tuner stops choosing is measured no more: the server's first forwards ran 1.4x
        their later cost (SmolLM2 at one row, run #909: 23.5 against 16.7 ms a token), widths 2-5 kept their
        early means, and the tuner never drafted at one row again (pass A's tuner made what off made at c = 1).
        The one-token cell runs at almost every step, so it carries the machine's drift to every width."""
        seconds, anchor = self.cells[(b, n)], self.anchors.get((b, n))
        if n > 1 and anchor and (b, 1) in self.cells:
            return seconds * self.cells[(b, 1)] / anchor
        return seconds

    def seconds(self, b: int, n: int) -> float:
        if (b, n) in self.cells:
            return self.now(b, n)
        if not self.cells:
            return 1.0
        # along the batch, only batches measured at a width of n or narrower: a batch whose narrowest measured width
        # is wider would lend its wider cell's cost as n's. Served at 6-7 rows with k = 1 for a while, SmolLM2's
        # server priced its 6- and 7-row one-token forward at their 2-token cells (59 and 63 ms in its steps'
        # estimate_off, against 37 and 39 ms its "off" setting's steps took there) and drafted where off was faster
        # (run #1042)
        covering = {cb for cb, cn in self.cells if cn <= n}
        bs = sorted(covering or {cb for cb, _ in self.cells})
        return _interp(bs, b, lambda cb: self._at_n(cb, n))

    def _at_n(self, b: int, n: int) -> float:
        ns = sorted(cn for cb, cn in self.cells if cb == b)
        return _interp(ns, n, lambda cn: self.now(b, cn))

    def as_rows(self) -> list[dict]:
        return [{"batch": b, "tokens": n, "seconds": s} for (b, n), s in sorted(self.cells.items())]

    @classmethod
    def from_rows(cls, rows: list[dict]) -> CostModel:
        """A model from ``as_rows`` (a run's stored ``cost_profile``), each cell as the start-up profile leaves it."""
        model = cls()
        for row in rows:
            key = (row["batch"], row["tokens"])
            model.recent[key] = deque([row["seconds"]], WINDOW)
            model.cells[key] = row["seconds"]
            model.anchor(*key)
        return model


def _interp(xs: list[int], x: int, f: Callable[[int], float]) -> float:
    """Linear between the neighbours of x; beyond the ends, proportional to x from the last two (costs grow)."""
    if x in xs:
        return f(x)
    i = bisect.bisect_left(xs, x)
    if i == 0:
        return f(xs[0])
    if i == len(xs):
        if len(xs) == 1:
            return f(xs[0]) * x / xs[0]
        lo, hi = xs[-2], xs[-1]
        slope = (f(hi) - f(lo)) / (hi - lo)
        return f(hi) + slope * (x - hi)
    lo, hi = xs[i - 1], xs[i]
    w = (x - lo) / (hi - lo)
    return (1 - w) * f(lo) + w * f(hi)


@dataclass
class Acceptance:
    """One drafter's per-position record over every pass (the chain property: a pass asked at k teaches all k' <= k)."""

    asked: list[int] = field(default_factory=list)  # passes that asked for more than i tokens
    proposed: list[int] = field(default_factory=list)  # ... in which the drafter proposed position i
    accepted: list[int] = field(default_factory=list)  # ... in which positions 0..i were all accepted
    draft_s: float = 0.0  # drafting seconds, over
    draft_tokens: int = 0  # the tokens asked for
    by_k: dict[int, list[float]] = field(default_factory=dict)  # k -> [a row's drafting seconds, passes] at that k

    def observe(self, asked: int, proposed: int, accepted: int, seconds: float) -> None:
        grow = asked - len(self.asked)
        if grow > 0:
            self.asked += [0] * grow
            self.proposed += [0] * grow
            self.accepted += [0] * grow
        for i in range(asked):
            self.asked[i] += 1
            self.proposed[i] += int(proposed > i)
            self.accepted[i] += int(accepted > i)
        self.draft_s += seconds
        self.draft_tokens += asked
        cell = self.by_k.setdefault(asked, [0.0, 0])
        cell[0] += seconds
        cell[1] += 1

    def _rate(self, counts: list[int], i: int, prior: float) -> float:
        asked = self.asked[i] if i < len(self.asked) else 0
        hit = counts[i] if i < len(counts) else 0
        return (hit + prior * PRIOR_PASSES) / (asked + PRIOR_PASSES)

    def expected_accepted(self, k: int) -> float:
        """E[accepted drafts] of a pass asked at k: the sum over positions of P(0..i all accepted)."""
        total, prior = 0.0, PRIOR_RATE
        for i in range(k):
            rate = self._rate(self.accepted, i, prior)
            total += rate
            prior = rate * PRIOR_RATE  # an unmeasured deeper position is never likelier than the one before
        return total

    def draft_s_per_token(self) -> float:
        return self.draft_s / self.draft_tokens if self.draft_tokens else 0.0

    def draft_seconds(self, k: int) -> float:
        """A row's drafting seconds in a pass at k: a fixed part (the drafter's catch-up on the tokens the last pass
        accepted, its call) and a part per position, so the passes measured at k where there are DRAFT_PASSES of
        them, else a line fitted through the ks measured (two or more), else k times the mean per token. k times
        the mean alone priced the head's k = 1 passes at 16 rows at about half their cost (1.5-1.9 ms a row against
        1.2 + 0.75 k ms measured per k on the Xeon: run #880), and the tuner chose k = 1 where it made 0.86 of off."""
        if k <= 0:
            return 0.0
        means = {j: s / n for j, (s, n) in self.by_k.items() if n >= DRAFT_PASSES}
        if k in means:
            return means[k]
        if len(means) < 2:
            return k * self.draft_s_per_token()
        ks = sorted(means)
        mean_k = sum(ks) / len(ks)
        mean_s = sum(means[j] for j in ks) / len(ks)
        slope = sum((j - mean_k) * (means[j] - mean_s) for j in ks) / sum((j - mean_k) ** 2 for j in ks)
        return max(0.0, mean_s + slope * (k - mean_k))

    def per_position(self) -> list[dict]:
        return [
            {"position": i, "asked": a, "proposed": p, "accepted": c}
            for i, (a, p, c) in enumerate(zip(self.asked, self.proposed, self.accepted))
        ]


class LoadTuner:
    def __init__(
        self, k_max: int, cost: CostModel | None = None, epsilon: float = 0.05, seed: int = 0, hold_rows: bool = False
    ):
        self.k_max = k_max
        self.hold_rows = hold_rows  # rows below the break-even of their k held at k = 0 (break_even)
        self.cost = cost or CostModel()
        self.epsilon = epsilon
        self.acceptance: dict[str, Acceptance] = {}
        self._rng = random.Random(seed)
        self._undrafted: dict[str, int] = {}  # per drafter, one-row steps in a row at k = 0 (REPROBE_STEPS)

    def of(self, drafter: str) -> Acceptance:
        return self.acceptance.setdefault(drafter, Acceptance())

    def throughput(self, drafter: str, batch: int, k: int) -> float:
        """Expected tokens/s of a step of ``batch`` rows at ``k`` (k = 0: one token a row, the narrowest forward)."""
        acc = self.of(drafter)
        tokens = batch * (1.0 + acc.expected_accepted(k))
        seconds = self.cost.seconds(batch, 1 + k) + batch * acc.draft_seconds(k)
        return tokens / seconds if seconds > 0 else 0.0

    def break_even(self, drafter: str, batch: int, k: int) -> float:
        """The accepted drafts one row's pass at ``k`` must bring to beat that row drafting nothing, at this batch:
        a row's share of the forward at width 1 + k plus its drafting, against its share at width 1, times the
        margin speculation must win by (SPECULATE_ABOVE), less the token every pass makes. -inf with
        ``hold_rows`` off: no row is held."""
        if not self.hold_rows:
            return float("-inf")
        per_row = self.cost.seconds(batch, 1 + k) / batch + self.of(drafter).draft_seconds(k)
        alone = self.cost.seconds(batch, 1) / batch
        return SPECULATE_ABOVE * per_row / alone - 1.0 if alone > 0 else 0.0

    def expected_accepted(self, drafter: str, k: int) -> float:
        """E[accepted drafts] of a pass at ``k`` from every pass of ``drafter`` so far: a row's prior."""
        return self.of(drafter).expected_accepted(k)

    def choose(self, drafter: str, batch: int, cap: int | None = None) -> Choice:
        top = self.k_max if cap is None else max(0, min(self.k_max, cap))
        scores = [self.throughput(drafter, batch, k) for k in range(top + 1)]
        best = max(range(top + 1), key=lambda k: scores[k])
        if scores[best] < SPECULATE_ABOVE * scores[0]:  # a near tie goes to speculation off: drafting costs what the
            best = 0  # model leaves out (the head's catch-up, rows' bookkeeping), and under load ties were losses
        # explore one step deeper than the best (from k = 0, k = 1): a deeper position's acceptance stays measured
        # and an exploring step never costs the widest forward under load. Acceptance does not depend on the
        # batch, so what a cheap step at a small batch teaches serves every batch: a step explores only where it
        # is expected to keep EXPLORE_WITHIN of the best's throughput (at 16 rows a forward 2 wide cost 1.6x one 1
        # wide, and exploring there cost the tuner a tenth of its throughput: runs #148-#153). From k = 0 a step
        # explores only at one row: the rows' drafters have not kept in step while none drafted, and the step pays
        # each row's catch-up over every token since, which the estimate leaves out (at 16 rows of SmolLM2 the
        # head's k = 1 steps drafted for 41-45 ms beside a 41 ms forward, and the tuner made 0.94-0.95 of off:
        # runs #856, #867)
        explored = (
            best < top
            and (best > 0 or batch == 1)
            and self._rng.random() < self.epsilon
            and scores[best + 1] >= EXPLORE_WITHIN * scores[best]
        )
        probe = self._reprobe(drafter, batch, best > 0 or explored or top == 0)
        k = best + 1 if explored or probe else best
        return Choice(k, explored or probe, scores[k], scores[0], probe=probe)

    def _reprobe(self, drafter: str, batch: int, drafting: bool) -> bool:
        """Whether this one-row step drafts at k = 1 as a probe, whatever the estimate: every REPROBE_STEPS-th of
        one-row steps in a row at k = 0. A drafter judged on a few requests (the load client's warm-up, a prompt
        unlike the rest) is measured again, where a step costs one row's catch-up at most; without it the tuner
        that had concluded "off" at one row never drafted there again (run #909)."""
        if batch != 1:
            return False
        count = 0 if drafting else self._undrafted.get(drafter, 0) + 1
        self._undrafted[drafter] = 0 if count >= REPROBE_STEPS else count
        return count >= REPROBE_STEPS

    def choose_drafter(self, drafters: tuple[str, ...], batch: int) -> Choice:
        """The drafter as well as k: the (drafter, k) with the most expected throughput at this batch, from each
        drafter's measured acceptance per position and drafting cost; k = 0 is speculation off whatever the
        drafter. A share of steps (epsilon) drafts with another drafter at its own best k instead, so every
        drafter's acceptance stays measured."""
        best = {d: self.choose(d, batch) for d in drafters}  # each explores one position deeper now and then
        top = max(drafters, key=lambda d: best[d].estimate)
        pick = top
        near = [d for d in drafters if d != top and best[d].estimate >= EXPLORE_WITHIN * best[top].estimate]
        if near and self._rng.random() < self.epsilon:  # as for k: only where exploring is expected to cost little
            pick = self._rng.choice(near)
        c = best[pick]
        return Choice(c.k, c.explored or pick != top, c.estimate, c.estimate_off, pick, c.probe)

    def observe_pass(self, drafter: str, asked: int, proposed: int, accepted: int, draft_s: float) -> None:
        if asked > 0:
            self.of(drafter).observe(asked, proposed, accepted, draft_s)

    def observe_forward(self, batch: int, tokens: int, seconds: float) -> None:
        self.cost.observe(batch, tokens, seconds)


def profile_cost(
    forward: Callable[[int, int], float],
    batches: list[int],
    widths: list[int],
    repeats: int = 3,
    say: Callable[[str], None] | None = None,
) -> tuple[CostModel, list[str]]:
    """The cost grid at start-up: the median of ``repeats`` timed forwards per (batch, width) cell, after one
    untimed warm-up of each (``forward(b, n)`` runs one and returns its seconds); ``say`` hears the progress (cells
    done of all, and the time left at this pace). A cell that costs more than a larger neighbour by DISTURBED is
    timed again (twice at most): another job sharing the CPU makes one cell lie, and a tuner that believed
    1 x 2 tokens cost 9 s once ran k = 0 for 97% of single requests. Cells that still disagree come back as
    warnings."""
    model, cells = CostModel(), [(b, n) for b in batches for n in widths]
    if say is not None:
        say(f"profiling the forward's cost at {len(cells)} (batch, width) cells before serving (--no-profile skips it)")
    start = time.perf_counter()
    for i, (b, n) in enumerate(cells):
        _time_cell(model, forward, b, n, repeats)
        if say is not None and (i + 1) % max(1, len(cells) // 10) == 0:
            left = (time.perf_counter() - start) / (i + 1) * (len(cells) - i - 1)
            say(f"profiling the forward: {i + 1} of {len(cells)} cells, about {left:.0f} s left")
    for _ in range(2):
        odd = _disturbed(model, batches, widths)
        for b, n in odd:
            _time_cell(model, forward, b, n, repeats)
    warnings = [
        f"the cost profile looks disturbed at {b} rows x {n} tokens ({model.cells[(b, n)] * 1e3:.1f} ms, more than "
        f"a larger cell): another job may share the CPU; restart the server on a quiet machine, or pass "
        "--no-profile to learn costs online"
        for b, n in _disturbed(model, batches, widths)
    ]
    return model, warnings


DISTURBED = 1.5  # a cell this many times dearer than a larger neighbour is suspect


def _time_cell(model: CostModel, forward: Callable[[int, int], float], b: int, n: int, repeats: int) -> None:
    forward(b, n)
    times = [forward(b, n) for _ in range(repeats)]
    model.recent[(b, n)] = deque(times, WINDOW)
    model.cells[(b, n)] = statistics.median(times)
    model.anchor(b, n)


def _disturbed(model: CostModel, batches: list[int], widths: list[int]) -> list[tuple[int, int]]:
    """Cells dearer than a larger neighbour (one more token, or the next batch size) by DISTURBED."""
    out = []
    for i, b in enumerate(batches):
        for j, n in enumerate(widths):
            larger = [model.cells.get((b, w)) for w in widths[j + 1 : j + 2]]
            larger += [model.cells.get((c, n)) for c in batches[i + 1 : i + 2]]
            if any(x is not None and model.cells[(b, n)] > DISTURBED * x for x in larger):
                out.append((b, n))
    return out
