"""Draft-length policies beyond epsilon-greedy, on a simulated workload with a known best arm.

The simulator follows the break-even model: per-token acceptance a, a verify pass
costing v0 + v1*k seconds and drafting d seconds per token, with 5% timing noise.
At a=0.8, v0=16 ms, v1=1.5 ms, d=2 ms the expected tokens/sec by arm are
k=0: 62.5, 2: 105.6, 4: 111.7, 6: 106.8, 8: 98.4, so arm 4 is best.
"""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.measure import PositionCount
from engine.policies.bandits import UCB1, Thompson
from engine.policies.ema import EmaHysteresis
from engine.policies.model_based import ModelBased
from engine.policies.online_model import OnlineModel
from engine.policies.registry import make_policy, policy_names
from engine.policies.types import Observation, Policy
from engine.policies.wrappers import Fallback, FallbackConfig, PassAdaptive

ARMS = (0, 2, 4, 6, 8)


def simulate(
    k: int,
    rng: random.Random,
    a: float = 0.8,
    v0: float = 0.016,
    v1: float = 0.0015,
    d: float = 0.002,
    tokens: int = 96,
    prompt_tokens: int = 100,
    spread: float = 0.0,
) -> Observation:
    """One request; ``spread`` gives each prompt its own acceptance, a +- spread, as real prompts have."""
    a = min(0.97, max(0.05, a + rng.uniform(-spread, spread))) if spread else a
    out = passes = proposed = accepted = 0
    prop, acc = [0] * k, [0] * k
    verify = draft = 0.0
    while out < tokens:
        n = 0
        while n < k and rng.random() < a:
            n += 1
        for i in range(k):
            prop[i] += 1
            acc[i] += n > i
        passes, proposed, accepted, out = passes + 1, proposed + k, accepted + n, out + n + 1
        verify += (v0 + v1 * k) * rng.uniform(0.95, 1.05)
        draft += d * k
    prefill = 0.02  # in the request's latency, not in its decode-pass times
    latency = prefill + verify + draft
    return Observation(
        k=k,
        reward=out / latency,
        prompt_tokens=prompt_tokens,
        output_tokens=out,
        passes=passes,
        proposed=proposed,
        accepted=accepted,
        latency_s=latency,
        draft_s=draft,
        verify_s=verify,
        positions=[PositionCount(i, p, a) for i, (p, a) in enumerate(zip(prop, acc))],
    )


def play(policy, n: int, seed: int = 0, **env) -> list[int]:
    rng = random.Random(seed)
    chosen = []
    for _ in range(n):
        d = policy.choose(env.get("prompt_tokens", 100))
        obs = simulate(d.arm, rng, **env)
        policy.update(d.arm, obs.reward, obs)
        chosen.append(d.arm)
    return chosen


def expected_tps(k: int, a=0.8, v0=0.016, v1=0.0015, d=0.002) -> float:
    return sum(a**i for i in range(k + 1)) / (v0 + (v1 + d) * k)


BEST = max(ARMS, key=expected_tps)  # arm 4 on this workload: an interior optimum


def test_model_based_settles_on_the_best_arm_after_two_cold_start_tries():
    policy = ModelBased(arms=ARMS, seed=1)
    chosen = play(policy, 60)
    assert chosen[:2] == [8, 2]  # largest arm observes every position, smallest drafting arm pins the slope
    assert chosen[-30:].count(BEST) >= 27
    assert chosen.count(0) == 0  # it never pays for a blind try of the slowest arm


def test_model_based_stops_exploring_once_its_posterior_is_sure():
    policy = ModelBased(arms=(0, 2, 8), seed=3)  # arm 2 (105.6) is far ahead of 8 (98.4) and 0 (62.5)
    play(policy, 40)
    rng = random.Random(9)
    late = []
    for _ in range(20):
        d = policy.choose()
        late.append(d)
        obs = simulate(d.arm, rng)
        policy.update(d.arm, obs.reward, obs)
    assert all(not d.explored and d.arm == 2 for d in late)
    assert all(d.p_not_best < 0.1 and d.epsilon is None for d in late)


def test_the_online_model_recovers_tokens_per_sec_per_arm_from_ten_requests_each():
    model, rng = OnlineModel(), random.Random(0)
    for _ in range(10):  # long requests: with ~100 tokens, pooling per pass biases rates down by 1-2%
        for k in ARMS:
            model.observe(simulate(k, rng, tokens=960))
    for k, predicted in zip(ARMS, model.tokens_per_s(ARMS)[0]):
        assert predicted == pytest.approx(expected_tps(k), rel=0.03)
    assert model.conditional_acceptance() == pytest.approx(0.8, abs=0.02)


def test_ucb1_tries_each_arm_once_then_follows_its_index_by_hand():
    p = UCB1(arms=(0, 2), seed=0)
    assert [p.choose().arm for _ in range(1)] == [0]
    p.update(0, 50.0)
    assert p.choose().arm == 2
    p.update(2, 100.0)
    # t=2: index(0) = 50/100 + sqrt(2 ln 2 / 1) = 1.677; index(2) = 1 + 1.177 = 2.177
    assert p.index(0) == pytest.approx(0.5 + math.sqrt(2 * math.log(2)))
    assert p.choose().arm == 2


def share_of_best(chosen: list[int]) -> float:
    """Expected tokens/sec of the choices made, as a share of always playing the best arm."""
    return sum(expected_tps(k) for k in chosen) / len(chosen) / expected_tps(BEST)


def test_thompson_is_seeded_and_reaches_most_of_the_best_arm():
    a, b = Thompson(arms=ARMS, seed=5), Thompson(arms=ARMS, seed=5)
    ca = play(a, 60)
    assert ca == play(b, 60)
    shares = [share_of_best(play(Thompson(arms=ARMS, seed=s), 60, seed=s)) for s in range(5)]
    assert sum(shares) / 5 >= 0.95


@pytest.mark.parametrize("seed", range(5))
def test_model_based_loses_less_than_the_reward_only_bandits_over_60_requests(seed):
    # prompts differ in acceptance (0.8 +- 0.12), so passes of one request are not independent evidence
    share = {
        name: share_of_best(play(make_policy(name, ARMS, seed), 60, seed=seed, spread=0.12))
        for name in ("model_based", "epsilon_greedy", "ucb1", "thompson")
    }
    assert share["model_based"] >= 0.97
    assert share["model_based"] > max(share["epsilon_greedy"], share["ucb1"], share["thompson"])


def test_ema_hysteresis_steps_up_on_high_acceptance_and_down_on_low():
    p = EmaHysteresis(arms=ARMS)
    assert p.choose().arm == 4  # starts in the middle of the drafting arms 2, 4, 6, 8

    def feed(rate):
        k = p.choose().arm
        p.update(k, 100.0, Observation(k=k, reward=100.0, proposed=100, accepted=int(rate * 100)))
        return p.choose().arm

    assert feed(0.9) == 6  # ema 0.9 > 0.8
    assert feed(0.9) == 8
    assert feed(0.9) == 8  # top of the ladder
    # ema: 0.9 -> 0.7*0.9 + 0.3*0.1 = 0.66 (hold) -> 0.492 (down)
    assert feed(0.1) == 8
    assert feed(0.1) == 6
    assert 0 not in [p.choose().arm for _ in range(3)]


def test_contextual_learns_a_different_k_per_prompt_length_bucket():
    policy = make_policy("contextual_model_based", ARMS, seed=2)
    rng = random.Random(4)
    for i in range(80):
        short = i % 2 == 0
        pt, a = (40, 0.5) if short else (400, 0.95)
        d = policy.choose(pt)
        obs = simulate(d.arm, rng, a=a, prompt_tokens=pt)
        policy.update(d.arm, obs.reward, obs)
    assert policy.choose(40).arm == 2  # a = 0.5: E(2)/tau(2) = 75.4 beats E(4)/tau(4) = 64.6
    assert policy.choose(400).arm == 8  # a = 0.95: the longest arm wins
    assert policy.t == 80 and len(policy.inners) == 2


def test_a_category_policy_learns_a_different_arm_per_category_whatever_the_prompt_length():
    policy = make_policy("category_thompson", (0, 1, 2), seed=3)
    best = {"translation": 1, "math": 2}
    rng = random.Random(5)
    for i in range(60):
        category = "translation" if i % 2 else "math"
        d = policy.choose(100, category)
        reward = (30.0 if d.arm == best[category] else 20.0) + rng.gauss(0, 1)
        policy.update(d.arm, reward, Observation(k=d.arm, reward=reward, prompt_tokens=100, category=category))
    assert policy.name == "category_thompson" and set(policy.inners) == {"translation", "math"}
    assert policy.inners["translation"].best_mean() == 1 and policy.inners["math"].best_mean() == 2
    assert policy.t == 60


def test_pass_granularity_lowers_k_after_rejections_and_keeps_it_after_acceptances():
    policy = make_policy("epsilon_greedy", ARMS, seed=0, granularity="pass")
    assert isinstance(policy, PassAdaptive)
    play(policy, 12)  # fits the run-level model (a ~ 0.8)
    decision = SimpleNamespace(arm=8, fallback=False)
    bad = policy.pass_controller(decision)
    assert bad(None) == 8  # before the first pass: the request's own k
    ks = [bad(SimpleNamespace(proposed=8, accepted=0)) for _ in range(1, 8)]  # each pass rejects all eight
    assert ks[-1] < 4 and ks == sorted(ks, reverse=True)
    good = policy.pass_controller(decision)
    ks = [good(SimpleNamespace(proposed=8, accepted=8)) for _ in range(1, 8)]
    assert ks[-1] == 8
    assert policy.pass_controller(SimpleNamespace(arm=0, fallback=False)) is None  # a k=0 request stays target-only


def test_fallback_drops_to_k0_when_speculation_is_slower_and_recovers_when_it_pays():
    policy = make_policy(
        "epsilon_greedy", (2, 4), seed=0, fallback=FallbackConfig(enabled=True, window=4, margin=0.05, probe_every=3)
    )
    assert isinstance(policy, Fallback)
    policy.observe_reference(100.0)  # target-only runs at 100 tok/s
    decisions = []

    def step(speculative_tps):
        d = policy.choose()
        decisions.append(d)
        policy.update(d.arm, 100.0 if d.arm == 0 else speculative_tps)
        return d

    for _ in range(4):
        assert step(80.0).arm in (2, 4)
    d = step(80.0)
    assert (d.arm, d.fallback, d.event) == (0, True, "fallback_engaged")
    assert step(80.0).arm == 0
    probe = step(80.0)  # every third decision probes the policy's own choice
    assert probe.arm in (2, 4) and not probe.fallback
    # the probes now see 130 tok/s; recovery needs two probes in a row above 105
    assert [step(130.0).fallback for _ in range(6)] == [True, True, False, True, True, False]
    d = step(130.0)
    assert d.event == "fallback_recovered" and d.arm in (2, 4) and not d.fallback


@pytest.mark.parametrize("granularity", ["request", "pass"])
@pytest.mark.parametrize("name", policy_names())
def test_replaying_recorded_observations_makes_the_same_next_choices(name, granularity):
    live = make_policy(name, ARMS, seed=11, granularity=granularity)
    rng = random.Random(3)
    history, chosen = [], []
    for i in range(30):
        d = live.choose(50 + 20 * i)
        obs = simulate(d.arm, rng, prompt_tokens=50 + 20 * i)
        live.update(d.arm, obs.reward, obs)
        history.append(obs)
        chosen.append(d.arm)
    resumed = make_policy(name, ARMS, seed=11, granularity=granularity)
    for obs in history[:13]:
        resumed.update(obs.k, obs.reward, obs)
    assert [resumed.choose(50 + 20 * i).arm for i in [13]] == [chosen[13]]
    for i, obs in enumerate(history[13:], start=13):
        assert resumed.choose(50 + 20 * i).arm == chosen[i]
        resumed.update(obs.k, obs.reward, obs)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(policy_names()),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=40),
    st.integers(0, 2**31),
)
def test_any_reward_stream_keeps_every_policy_inside_its_arms(name, rewards, seed):
    policy = make_policy(name, ARMS, seed=seed)
    for r in rewards:
        d = policy.choose(100)
        assert d.arm in ARMS
        policy.update(d.arm, r, Observation(k=d.arm, reward=r, prompt_tokens=100))


@pytest.mark.parametrize("granularity", ["request", "pass"])
@pytest.mark.parametrize("fallback", [False, True])
@pytest.mark.parametrize("name", policy_names())
def test_every_policy_and_wrapper_implements_the_policy_protocol(name, granularity, fallback):
    policy = make_policy(name, ARMS, 0, granularity, FallbackConfig(enabled=fallback))
    assert isinstance(policy, Policy)
    assert isinstance(policy, Fallback) == fallback
    d = policy.choose(100)
    assert d.arm in ARMS and d.t == 0
    with pytest.raises(TypeError):
        type(d)(0, d.arm, d.explored)  # decisions are built with keywords only


def test_a_disabled_fallback_config_leaves_the_policy_unwrapped():
    assert not isinstance(make_policy("ucb1", ARMS, 0, fallback=FallbackConfig()), Fallback)


def test_unknown_policy_and_granularity_are_refused():
    with pytest.raises(ValueError, match="unknown policy 'greedy'"):
        make_policy("greedy", ARMS, 0)
    with pytest.raises(ValueError, match="granularity"):
        make_policy("ucb1", ARMS, 0, granularity="token")


@pytest.mark.parametrize("name", ["ema_hysteresis", "contextual_ema_hysteresis"])
def test_a_request_granularity_policy_keeps_one_k_per_request_and_only_pass_granularity_adapts_within(name):
    from engine.policies.registry import make_policy

    per_request = make_policy(name, (0, 2, 4, 6, 8), 42, "request")
    per_pass = make_policy(name, (0, 2, 4, 6, 8), 42, "pass")
    for policy in (per_request, per_pass):
        for _ in range(3):  # enough for the per-pass wrapper's model to be ready
            d = policy.choose(100)
            policy.update(
                d.arm,
                50.0,
                Observation(
                    k=d.arm,
                    reward=50.0,
                    prompt_tokens=100,
                    passes=10,
                    proposed=10 * d.arm,
                    accepted=2 * d.arm,
                    latency_s=1.0,
                    draft_s=0.1,
                    verify_s=0.8,
                    positions=[PositionCount(i, 10, 2) for i in range(d.arm)],
                ),
            )
    assert per_request.pass_controller(per_request.choose(100)) is None
    assert per_pass.pass_controller(per_pass.choose(100)) is not None
