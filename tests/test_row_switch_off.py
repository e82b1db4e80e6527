"""A row that does not pay drafts nothing (issue 66): the tuner chooses k per drafter from every row's passes
pooled, and a row whose own recent passes accept less than the break-even its k needs at this batch is held at
k = 0, then probes again; each decision is kept with the figures it used, and greedy output stays exact."""

from __future__ import annotations

import pytest

from engine.decode.handoff import Row
from engine.decode.sequence import Request
from engine.decode.steps import REPROBE_PASSES, WINDOW_PASSES, RowAcceptance, plan
from engine.serve.tuner import SPECULATE_ABOVE, LoadTuner

pytestmark = pytest.mark.fast


def test_a_rows_expected_acceptance_is_per_position_over_its_recent_passes():
    acc = RowAcceptance()
    for proposed, accepted in [(3, 3), (3, 1), (3, 0), (3, 2)]:
        acc.observe(proposed, accepted)
    acc.observe(0, 0)  # nothing proposed: nothing to judge
    assert len(acc.recent) == 4
    # position 0 accepted in 3 of 4, position 1 in 2 of 4, position 2 in 1 of 4; position 3 never proposed
    assert acc.expected(3) == pytest.approx(0.75 + 0.5 + 0.25)
    assert acc.expected(4) == pytest.approx(1.5 + 0.125)


def test_the_break_even_is_the_rows_share_of_the_wider_forward_against_the_narrow_one():
    assert LoadTuner(4).break_even("ngram", 4, 3) == float("-inf")  # off by default: no row is held
    tuner = LoadTuner(4, hold_rows=True)
    tuner.cost.cells.update({(4, 1): 0.040, (4, 4): 0.080})
    # a row's share: 20 ms at width 4 against 10 at width 1, no drafting cost yet: it must bring 2.1 - 1 tokens
    assert tuner.break_even("ngram", 4, 3) == pytest.approx(SPECULATE_ABOVE * 2.0 - 1.0)
    tuner.observe_pass("ngram", 3, 3, 3, 0.003)  # 1 ms a drafted token: 3 ms more of the row's share
    assert tuner.break_even("ngram", 4, 3) == pytest.approx(SPECULATE_ABOVE * 2.3 - 1.0)


class _Seq:
    """What plan reads of a row's sequence."""

    def __init__(self, passes: int = 0):
        self.drafter, self.options, self.primed = object(), (), True
        self.stats = type("S", (), {"passes": passes})()

    def cap(self, k):
        return k


def _rows(n: int) -> list[Row]:
    return [Row(Request([1, 2, 3], 50, "ngram", None, id=str(i)), _Seq()) for i in range(n)]  # type: ignore[arg-type]


def _paying_tuner(**kw) -> LoadTuner:
    """A tuner that drafts at k = 3 for a batch of two: every pooled draft accepted, a wider forward dear enough that
    a row must bring 1.6 accepted drafts a pass."""
    tuner = LoadTuner(3, epsilon=0.0, **{"hold_rows": True, **kw})
    for n in range(1, 5):
        tuner.cost.cells[(2, n)] = 0.020 * (1 + 0.5 * (n - 1))
    for _ in range(20):
        tuner.observe_pass("ngram", 3, 3, 3, 0.0)
    return tuner


def test_a_row_below_its_break_even_is_held_off_beside_rows_that_pay_then_probes_again():
    tuner = _paying_tuner()
    good, bad = _rows(2)
    for _ in range(WINDOW_PASSES):
        good.acceptance.observe(3, 3)
        bad.acceptance.observe(3, 0)
    ks, _, choice, _, off = plan([good, bad], tuner)
    assert choice is not None and choice.k == 3 and ks == [3, 0] and off == 1
    (decision,) = bad.acceptance.decisions
    pooled = tuner.expected_accepted("ngram", 3)
    # its own passes accepted nothing; shrunk halfway to the pooled figure (8 passes of each), still below
    assert decision["k"] == 3 and decision["own"] == 0.0 and decision["pooled"] == pytest.approx(pooled, abs=1e-3)
    assert decision["expected_accepted"] == pytest.approx(pooled / 2, abs=1e-3)
    assert (
        decision["break_even"] == pytest.approx(tuner.break_even("ngram", 2, 3), abs=1e-3)
        and decision["break_even"] > 0
    )
    for _ in range(REPROBE_PASSES - 1):
        assert plan([good, bad], tuner)[0] == [3, 0]
    assert plan([good, bad], tuner)[0] == [3, 3]  # held for REPROBE_PASSES passes, then it drafts again
    assert len(bad.acceptance.recent) == 0 and len(bad.acceptance.decisions) == 1  # judged anew on fresh passes


def test_a_row_a_little_below_the_pool_is_not_held_and_hold_rows_off_holds_none():
    tuner = _paying_tuner()
    good, fair = _rows(2)
    for i in range(WINDOW_PASSES):
        good.acceptance.observe(3, 3)
        fair.acceptance.observe(3, 1 + i % 2)  # 1.5 a pass on its own: shrunk toward the pool, above break-even
    assert plan([good, fair], tuner)[0] == [3, 3] and not fair.acceptance.decisions
    lenient = _paying_tuner(hold_rows=False)
    bad = _rows(1)[0]
    for _ in range(WINDOW_PASSES):
        bad.acceptance.observe(3, 0)
    assert plan([good, bad], lenient)[0] == [3, 3] and not bad.acceptance.decisions


def test_a_row_that_fixed_its_own_k_is_never_held_off():
    tuner = LoadTuner(3, epsilon=0.0, hold_rows=True)
    for n in range(1, 5):
        tuner.cost.cells[(1, n)] = 0.020
    row = Row(Request([1, 2], 50, "ngram", 3, id="x"), _Seq())  # type: ignore[arg-type]
    for _ in range(WINDOW_PASSES):
        row.acceptance.observe(3, 0)
    assert plan([row], tuner)[0] == [3] and not row.acceptance.decisions


class Strict(LoadTuner):
    """A tuner that always drafts at k = 3 for the batch, with a break-even no row can reach: every drafting row
    is held off once judged."""

    def choose(self, drafter, batch, cap=None):
        from engine.decode.steps import Choice

        return Choice(3, False, 2.0, 1.0)

    def break_even(self, drafter, batch, k):
        return 100.0


@pytest.mark.e2e
def test_rows_held_off_and_probing_again_stay_exact_and_each_decision_is_kept(tiny_dirs):
    from test_serve_batch import PROMPTS

    from engine.decode.decoder import Decoder
    from engine.decode.loading import load_pair
    from engine.decode.scheduler import Scheduler

    d = tiny_dirs["qwen2"]
    dec = Decoder(load_pair(d["target"], d["near"], "cpu", "float32"))
    tuner = Strict(3, epsilon=0.0, hold_rows=True)
    sched = Scheduler(dec.pair.target, dec.row_drafter, dec.eos_id, tuner, max_batch=4)
    done = {}
    for i, p in enumerate(PROMPTS[:4]):
        req = Request(dec.encode(p), 120, "model", None, id=str(i))
        req.on_done = lambda f, i=i: done.__setitem__(i, f)
        sched.submit(req)
    sched.drain()
    for i, p in enumerate(PROMPTS[:4]):
        assert done[i].stats.output_ids == dec.run(dec.encode(p), 0, 120, timed=False).output_ids
    assert all(f.switched_off for f in done.values())  # each judged after its first WINDOW_PASSES drafting passes
    assert all(len(f.switched_off) >= 2 for f in done.values())  # and again after probing anew
    assert all(x["break_even"] == 100.0 and x["pass"] >= WINDOW_PASSES for f in done.values() for x in f.switched_off)
    assert any(s.rows_off for s in sched.steps) and any(s.rows_off == 0 and s.proposed for s in sched.steps)
