"""A policy that chooses the drafter as well as k: arms are (drafter, k) modes, stored as drafter plus k, judged
against the best single arm of the same run."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import bench_cfg, interrupt_after

from engine.analysis.regret import best_fixed, policy_table, regret_curves
from engine.bench.config import validate
from engine.bench.run import execute
from engine.bench.setup import create_run
from engine.errors import PhoenixError
from engine.policies.wrappers import FallbackConfig

ARMS = ["target", "ngram_2", "suffix_4"]


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(drafter_arms=["ngram_2"]), "two or more different arms"),
        (dict(drafter_arms=["ngram_2", "ngram_2"]), "two or more different arms"),
        (dict(drafter_arms=["ngram_2", "bandit"]), "is not one \\(drafter, k\\)"),
        (dict(drafter_arms=["ngram_2", "hf_2"]), "is not one \\(drafter, k\\)"),
        (dict(drafter_arms=["ngram_2", "nonsense"]), "is not one \\(drafter, k\\)"),
        (dict(drafter_arms=["target", "eagle3_3"], draft=None), "needs --draft"),
        (dict(drafter_arms=ARMS, modes=["target", "bandit:model_based"]), "models k of one drafter"),
        (dict(drafter_arms=ARMS, modes=["target", "bandit:ucb1:pass"]), "chooses per request"),
        (dict(drafter_arms=ARMS, fallback=FallbackConfig(enabled=True)), "chooses per request"),
    ],
)
def test_a_drafter_arm_setting_that_cannot_run_is_refused_before_the_run(tiny_dirs, change, message):
    cfg = bench_cfg(tiny_dirs, "humaneval-test", **{"modes": ["target", "bandit"], **change})
    with pytest.raises(PhoenixError, match=message) as exc:
        validate(cfg)
    assert exc.value.field == "drafter_arms"


def test_drafter_arms_need_no_draft_model_when_no_arm_uses_one(tiny_dirs):
    cfg = bench_cfg(
        tiny_dirs, "humaneval-test", draft=None, modes=["target", "bandit:contextual_thompson"], drafter_arms=ARMS
    )
    assert validate(cfg).policy_arms() == [0, 1, 2]


def test_each_request_stores_the_drafter_and_k_of_the_arm_its_policy_chose(store, tiny_dirs, prompt_file, decoder):
    cfg = bench_cfg(
        tiny_dirs, prompt_file, limit=4, modes=["target", "ngram_2", "suffix_4", "bandit"], drafter_arms=ARMS
    )
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, decoder=decoder, progress=False) == "done"
    rows = {r.seq: r for r in store.requests(run.id)}
    steps = store.bandit_steps(run.id)
    assert len(steps) == 4 and {s.arm for _, s in steps} == set(ARMS)  # epsilon-greedy tries the arms in turn first
    expected = {"target": ("none", 0), "ngram_2": ("ngram", 2), "suffix_4": ("suffix", 4)}
    for seq, step in steps:
        assert (rows[seq].drafter, rows[seq].k) == expected[step.arm] == (rows[seq].drafter, step.chosen_k)
    last = steps[-1][1]
    assert set(last.arm_counts) == set(ARMS) and sum(last.arm_counts.values()) == 4
    assert all(r.identical for r in rows.values())


def test_an_interrupted_drafter_choosing_run_resumes_with_its_counts(store, tiny_dirs, prompt_file, decoder):
    cfg = bench_cfg(tiny_dirs, prompt_file, limit=4, modes=["target", "bandit:ucb1"], drafter_arms=ARMS)
    run = create_run(store, cfg)
    with pytest.raises(KeyboardInterrupt):
        execute(store, run.id, cfg, decoder=decoder, progress=False, on_request=interrupt_after(5))
    assert execute(store, run.id, cfg, decoder=decoder, progress=False) == "done"
    steps = [s for _, s in store.bandit_steps(run.id)]
    assert [s.t for s in steps] == [0, 1, 2, 3]
    assert [s.arm for s in steps[:3]] == ARMS  # ucb1 tries each arm once, in order, across the restart
    assert sum(steps[-1].arm_counts.values()) == 4


def _frame(rows):
    return pd.DataFrame(rows, columns=["seq", "mode", "k", "arm", "prompt_id", "tokens_per_s", "explored", "fallback"])


def test_the_best_single_arm_may_be_a_model_free_drafter_and_regret_is_counted_against_it():
    rows, seq = [], 0
    for i in range(4):
        for mode, k, arm, tps in (
            ("target", 0, None, 10.0),
            ("ngram_4", 4, None, 20.0),
            ("suffix_16", 16, None, 15.0),
            ("bandit", 4 if i % 2 else 0, "ngram_4" if i % 2 else "target", 20.0 if i % 2 else 10.0),
        ):
            rows.append((seq, mode, k, arm, f"p{i}", tps + 0.1 * i, False, False))
            seq += 1
    frame = _frame(rows)
    assert best_fixed(frame) == "ngram_4"
    curves = regret_curves(frame, "ngram_4")
    assert curves["cumulative regret"].iloc[-1] == pytest.approx(20.0)  # two requests on target, 10 tok/s short each
    assert list(curves["arm"]) == ["target", "ngram_4", "target", "ngram_4"]
    table = policy_table(frame, "ngram_4").set_index("mode")
    assert table.loc["bandit", "arms chosen"] == "target 50%, ngram_4 50%"
    assert table.loc["suffix_16", "verdict"] == "significant"


def test_a_drafter_choosing_bandit_stays_out_of_the_break_even_fit():
    from engine.analysis.fit import fit_run

    split = pd.DataFrame(
        [
            {
                "mode": "target",
                "k": 0,
                "verify_s": 4.0,
                "passes": 100,
                "draft_s": 0.0,
                "proposed": 0,
                "tokens_per_s_sum": 200.0,
                "n": 10,
            },
            {
                "mode": "model_4",
                "k": 4,
                "verify_s": 2.4,
                "passes": 50,
                "draft_s": 0.8,
                "proposed": 200,
                "tokens_per_s_sum": 300.0,
                "n": 10,
            },
            {
                "mode": "bandit",
                "k": 16,
                "verify_s": 1.0,
                "passes": 20,
                "draft_s": 0.01,
                "proposed": 300,
                "tokens_per_s_sum": 400.0,
                "n": 10,
            },
        ]
    )
    pos = pd.DataFrame(
        [
            {"mode": m, "k": k, "position": i, "proposed": 50, "accepted": 50 - 10 * i, "reached": 50}
            for m, k in (("model_4", 4), ("bandit", 16))
            for i in range(4)
        ]
    )
    rewards = pd.DataFrame(
        [
            {"prompt_id": f"p{i}", "mode": m, "k": k, "tokens_per_s": t}
            for i in range(3)
            for m, k, t in (("target", 0, 20.0), ("model_4", 4, 30.0), ("bandit", 16, 40.0))
        ]
    )
    mixed = fit_run(pos, split, rewards, drafter_arms=False)
    alone = fit_run(pos, split, rewards, drafter_arms=True)
    assert 16 in set(mixed.measured["k"]) and 16 not in set(alone.measured["k"])
    assert mixed.measured.set_index("k").loc[16, "measured speedup"] == pytest.approx(2.0)
    assert alone.c == pytest.approx((0.8 / 200) / (4.0 / 100))  # the draft model's own seconds per drafted token
