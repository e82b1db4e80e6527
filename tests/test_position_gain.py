"""The acceptance gain of one drafter over another at a draft position, paired by prompt (issue 67's traffic goal)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.analysis.position_gain import counts, gain
from engine.measure import PositionCount

pytestmark = pytest.mark.fast


def request(prompt: str, rows: list[tuple[int, int]], mode: str = "eagle3_3", **kw):
    positions = [PositionCount(i, p, a) for i, (p, a) in enumerate(rows)]
    return SimpleNamespace(prompt_id=prompt, mode=mode, positions=positions, warmup=False, error=None, **kw)


def test_counts_keep_one_mode_and_leave_out_warm_ups_and_failures():
    rows = [
        request("a", [(10, 4), (8, 2)]),
        request("a", [(10, 6)]),  # a second request of one prompt adds to its counts
        request("b", [(5, 5)], mode="model_3"),
        SimpleNamespace(**{**vars(request("c", [(9, 9)])), "warmup": True}),
        SimpleNamespace(**{**vars(request("d", [(9, 9)])), "error": "timeout"}),
    ]
    assert counts(rows, "eagle3_3", 0) == {"a": (20, 10)}
    assert counts(rows, "eagle3_3", 1) == {"a": (8, 2)}


def test_a_gain_across_every_prompt_is_met_and_noise_is_not():
    base = {f"p{i}": (100, 50) for i in range(40)}
    raised = {f"p{i}": (100, 62) for i in range(40)}
    g = gain(base, raised)
    assert g is not None and g.diff == pytest.approx(0.12) and g.low == pytest.approx(0.12)
    assert g.verdict(0.05) == "met" and g.prompts == 40 and g.proposed == (4000, 4000)
    # the same mean gain carried by a few prompts: the point clears 0.05, its interval does not
    lumpy = {f"p{i}": (100, 98 if i < 5 else 50) for i in range(40)}
    g = gain(base, lumpy)
    assert g is not None and g.diff > 0.05 and g.low < 0.05 < g.high
    assert g.verdict(0.05) == "met by the point estimate only"
    assert gain(base, base).verdict(0.05) == "missed"  # type: ignore[union-attr]


def test_only_shared_prompts_are_compared():
    g = gain({"a": (10, 5), "b": (10, 5), "c": (10, 0)}, {"a": (10, 7), "b": (10, 7), "z": (10, 10)})
    assert g is not None and g.prompts == 2 and g.base == 0.5 and g.other == 0.7
    assert gain({"a": (10, 5)}, {"a": (10, 6)}) is None  # one prompt: no interval


def test_the_block_names_both_runs_the_interval_and_a_verdict_only_where_a_goal_is_given():
    from engine.export.published_gain import position_gain

    runs = {
        1: [request(f"p{i}", [(10, 4)]) for i in range(6)],
        2: [request(f"p{i}", [(10, 8)]) for i in range(6)],
    }
    store = SimpleNamespace(requests=lambda run_id: runs[run_id])
    fig = SimpleNamespace(store=store, run=lambda run_id: runs[run_id])
    text = position_gain(fig, "1:eagle3_3 2:eagle3_3 0.05")
    assert "0.400 (#1, 60 drafts) -> 0.800 (#2, 60 drafts)" in text and text.endswith("goal +0.05: **met**")
    assert "goal" not in position_gain(fig, "2:eagle3_3 1:eagle3_3 -")  # a cost measured elsewhere: no verdict
    assert "-0.400" in position_gain(fig, "2:eagle3_3 1:eagle3_3 -")


def test_a_runs_rate_at_a_position_has_its_interval_over_prompts():
    from engine.analysis.position_gain import rate

    steady = rate({f"p{i}": (10, 6) for i in range(20)})
    assert steady == (0.6, 0.6, 0.6)  # every prompt alike: nothing to resample
    mixed = rate({f"p{i}": (10, 9 if i % 2 else 3) for i in range(20)})
    assert mixed is not None and mixed[1] < mixed[0] == 0.6 < mixed[2]
    assert rate({"p": (10, 6)}) is None
