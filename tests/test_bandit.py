"""Phoenix's epsilon-greedy policy against a hand-computed trace."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.policies.bandits import EpsilonGreedy


def test_every_arm_is_tried_twice_first_in_round_robin():
    p = EpsilonGreedy(arms=(0, 2, 4), seed=1)
    chosen = []
    for _ in range(6):
        d = p.choose()
        assert d.explored and d.epsilon == 1.0
        chosen.append(d.arm)
        p.update(d.arm, 10.0)
    assert chosen == [0, 2, 4, 0, 2, 4]
    assert p.counts == {0: 2, 2: 2, 4: 2}


def test_running_means_follow_the_incremental_update_by_hand():
    p = EpsilonGreedy(arms=(0, 2), seed=1)
    for r in (10.0, 30.0, 20.0, 50.0):  # arms 0, 2, 0, 2
        p.update(p.choose().arm, r)
    # arm 0: 10 then 10 + (20 - 10)/2 = 15; arm 2: 30 then 30 + (50 - 30)/2 = 40
    assert p.means == {0: 15.0, 2: 40.0}
    assert p.t == 4


@pytest.mark.parametrize("t,expected", [(0, 0.3), (10, 0.3 * 0.97**10), (40, 0.3 * 0.97**40), (59, 0.05), (500, 0.05)])
def test_epsilon_decays_to_its_floor(t, expected):
    assert EpsilonGreedy().epsilon(t) == pytest.approx(expected)


def test_after_warm_start_it_exploits_the_best_mean_unless_the_seeded_draw_explores():
    arms = (0, 2, 4, 6, 8)
    reward = {0: 20.0, 2: 26.0, 4: 30.0, 6: 25.0, 8: 21.0}
    p = EpsilonGreedy(arms=arms, seed=7)
    for _ in range(10):
        d = p.choose()
        p.update(d.arm, reward[d.arm])
    for t in range(10, 80):
        d = p.choose()
        draw = random.Random(f"7:{t}")  # the documented per-decision RNG
        eps = max(0.05, 0.3 * 0.97**t)
        explore = draw.random() < eps
        assert d.t == t and d.epsilon == pytest.approx(eps) and d.explored == explore
        if not explore:
            assert d.arm == 4
        p.update(d.arm, reward[d.arm])


def test_replaying_the_rewards_makes_the_same_choices_as_an_uninterrupted_run():
    rewards = [float(x % 7 + 10) for x in range(40)]
    a = EpsilonGreedy(seed=3)
    trace_a = []
    for r in rewards:
        d = a.choose()
        trace_a.append(d.arm)
        a.update(d.arm, r)
    b = EpsilonGreedy(seed=3)  # the resumed run: replay the first 17 recorded steps, then go on
    for k, r in zip(trace_a[:17], rewards[:17]):
        b.update(k, r)
    trace_b = trace_a[:17]
    for r in rewards[17:]:
        d = b.choose()
        trace_b.append(d.arm)
        b.update(d.arm, r)
    assert trace_a == trace_b


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**6), 10**6)), max_size=80),
    st.integers(0, 2**31),
)
def test_any_reward_stream_keeps_arms_in_the_set_and_means_finite(rewards, seed):
    p = EpsilonGreedy(seed=seed)
    for r in rewards:
        d = p.choose()
        assert d.arm in p.arms
        p.update(d.arm, float(r))
        assert all(math.isfinite(m) for m in p.means.values())
