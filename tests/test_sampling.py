"""Sampling with speculation, exact in distribution (engine.decode.sampling).

For each drafter, several k, batch 1 and batch 4: thousands of samples of a request's first tokens drawn with
speculation on are compared with as many drawn target-only (other seeds, so the two sets are independent) by a
chi-square test of homogeneity, which must not reject at a Bonferroni-corrected 1%. The same test must reject a
deliberately biased sampler (verified greedily where it drafted, sampled only past its drafts), so it can fail.
And, per seed, speculation on equals speculation off token for token in fp32 (the sampler's coupling).
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from scipy.stats import chi2_contingency
from test_serve_batch import PROMPTS, make_decoders, scheduler

from engine.decode import sampling as sampling_mod
from engine.decode.sampling import logprobs_of, pick, processed, uniform
from engine.decode.sampling_params import SamplingParams
from engine.decode.sequence import Request

DRAFTERS = ["model", "ngram", "suffix", "eagle3", "hybrid"]
CASES = [(2, 1), (4, 1), (3, 4)]  # (k, batch): two k alone, and rows drafting beside each other
SAMPLES = 500  # per arm: at this size the biased sampler's p is 1.7e-68 (model) and 2.5e-5 (n-gram)
TOKENS = 3  # the first three tokens: the prefill's pick and the first verification pass's
TESTS = len(DRAFTERS) * len(CASES)
ALPHA = 0.01 / TESTS  # Bonferroni over every drafter x k x batch
PARAMS = SamplingParams(temperature=1.0, top_k=4, top_p=0.95)
# most of the tiny vocabulary once, in order: whatever the target samples first is often in it, so the model-free
# drafters find it and propose what followed it, and the first verification pass has drafts to judge
PROMPT = list(range(10, 400))


@pytest.fixture(scope="module")
def decoders(tiny_dirs, tmp_path_factory):
    return make_decoders(tiny_dirs, tmp_path_factory)


def draw(dec, drafter: str, k: int, batch: int, seeds: range) -> tuple[list[tuple[int, ...]], int]:
    """The first TOKENS tokens of one request per seed, and the drafts proposed over all of them."""
    ids = list(PROMPT)
    params = [SamplingParams(**{**PARAMS.__dict__, "seed": s}) for s in seeds]
    if batch == 1:
        runs = [dec.run(ids, k, TOKENS, drafter if k else "none", timed=False, sampling=p) for p in params]
        return [tuple(r.output_ids) for r in runs], sum(r.proposed for r in runs)
    sched = scheduler(dec, None, max_batch=batch, max_queue=len(params))
    done: dict[str, object] = {}
    for j, p in enumerate(params):
        r = Request(list(ids), TOKENS, drafter if k else "none", k=k or None, sampling=p, id=str(j))
        r.on_done = lambda f, j=j: done.__setitem__(str(j), f)
        sched.submit(r)
    sched.drain()
    runs = [done[str(j)].stats for j in range(len(params))]  # type: ignore[attr-defined]
    return [tuple(r.output_ids) for r in runs], sum(r.proposed for r in runs)


def homogeneity_p(a: list[tuple[int, ...]], b: list[tuple[int, ...]]) -> float:
    """Chi-square test that two samples of outcomes come from one distribution; outcomes seen under 10 times in
    both together are pooled, so every expected count is at least about 5."""
    ca, cb = Counter(a), Counter(b)
    kept = [o for o in ca.keys() | cb.keys() if ca[o] + cb[o] >= 10]
    rest_a, rest_b = len(a) - sum(ca[o] for o in kept), len(b) - sum(cb[o] for o in kept)
    table = [[ca[o] for o in kept], [cb[o] for o in kept]]
    if rest_a + rest_b:
        table[0].append(rest_a)
        table[1].append(rest_b)
    if len(table[0]) < 2:
        return 1.0
    return float(chi2_contingency(table)[1])


@pytest.fixture(scope="module")
def target_only(decoders):
    return draw(decoders["model"], "none", 0, 1, range(0, SAMPLES))[0]


@pytest.mark.e2e
@pytest.mark.parametrize("k,batch", CASES)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_speculative_sampling_is_not_told_apart_from_target_only(decoders, target_only, drafter, k, batch):
    dec = decoders[drafter]
    first = SAMPLES * (1 + CASES.index((k, batch)))  # seeds no other arm uses: independent samples
    seeds = range(first, first + SAMPLES)
    if drafter in ("eagle3", "hybrid"):  # another decoder object on the same target weights: the same reference
        assert draw(dec, "none", 0, 1, range(0, 20))[0] == target_only[:20]
    got, proposed = draw(dec, drafter, k, batch, seeds)
    assert proposed > 0, "the drafter proposed nothing: the test would not exercise speculation"
    p = homogeneity_p(target_only, got)
    assert p >= ALPHA, f"{drafter} k={k} batch {batch}: p = {p:.2e} < {ALPHA:.1e}"


@pytest.mark.e2e
@pytest.mark.parametrize("drafter", ["model", "ngram"])
def test_a_biased_sampler_is_rejected(decoders, target_only, monkeypatch, drafter):
    """Verification that takes the argmax where a draft sits and samples only the last position (a plausible
    bug) shifts the distribution toward the argmax: the same test rejects it at the same level."""
    real = sampling_mod.pick

    def biased(logits, params, start):
        picks = real(logits, params, start)
        if logits.shape[0] > 1:  # a verification pass with drafts: greedy at every drafted position
            picks[:-1] = logits[:-1].argmax(dim=-1).tolist()
        return picks

    monkeypatch.setattr("engine.decode.sequence.pick", biased)
    got, proposed = draw(decoders[drafter], drafter, 2, 1, range(10 * SAMPLES, 11 * SAMPLES))
    assert proposed > 0
    p = homogeneity_p(target_only, got)
    assert p < ALPHA, f"the biased sampler was not rejected: p = {p:.3f}"


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_a_seed_gives_the_target_only_output_with_speculation_on_at_batch_1_and_4(decoders, drafter):
    """The coupling: the same seed, the same tokens, drafting or not, alone or beside other requests (fp32)."""
    dec = decoders[drafter]
    rnd = random.Random(5)
    for prompt in PROMPTS[:3]:
        ids = dec.encode(prompt)
        for seed in (1, 2, 3):
            params = SamplingParams(temperature=rnd.choice([0.7, 1.0, 1.3]), top_p=0.9, seed=seed)
            off = dec.run(ids, 0, 20, timed=False, sampling=params).output_ids
            on = dec.run(ids, 3, 20, drafter, timed=False, sampling=params).output_ids
            assert on == off, f"{drafter} seed {seed}"
    sched = scheduler(dec, None, max_batch=4)
    done: dict[str, object] = {}
    reqs = []
    for j in range(8):
        params = SamplingParams(temperature=0.9, min_p=0.05, seed=100 + j)
        r = Request(dec.encode(PROMPTS[j % 3]), 16, drafter, k=1 + j % 4, sampling=params, id=str(j))
        r.on_done = lambda f, j=j: done.__setitem__(str(j), f)
        reqs.append(r)
        sched.submit(r)
    sched.drain()
    for r in reqs:
        alone = dec.run(r.prompt_ids, 0, 16, timed=False, sampling=r.sampling).output_ids
        assert done[r.id].stats.output_ids == alone  # type: ignore[attr-defined]


def test_processors_keep_what_they_should_and_sample_in_proportion():
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    p_all = processed(logits, SamplingParams(temperature=1.0))
    assert torch.allclose(p_all, torch.softmax(logits.double(), -1))
    assert (processed(logits, SamplingParams(temperature=1.0, top_k=2))[0, 2:] == 0).all()
    top_p = processed(logits, SamplingParams(temperature=1.0, top_p=0.6))[0]
    assert top_p[0] > 0 and top_p[1] > 0 and (top_p[2:] == 0).all()  # 0.52 alone is under 0.6: two kept
    assert (processed(logits, SamplingParams(temperature=1.0, min_p=0.2))[0] > 0).tolist() == [1, 1, 1, 0, 0, 0]
    cold = processed(logits, SamplingParams(temperature=0.1))[0]
    assert cold[0] > 0.99
    draws = Counter(pick(logits, SamplingParams(temperature=1.0, seed=s), 0)[0] for s in range(4000))
    for tok, share in enumerate(p_all[0].tolist()):
        assert abs(draws[tok] / 4000 - share) < 0.03
    assert len({uniform(1, t) for t in range(1000)}) == 1000 and 0 <= min(uniform(s, 0) for s in range(99))


def test_greedy_needs_no_seed_and_a_sampled_request_gets_one():
    assert SamplingParams().resolved().seed is None and SamplingParams(top_k=1).greedy
    assert SamplingParams(temperature=0.5).resolved().seed is not None
    for bad in ({"temperature": -1.0}, {"top_p": 0.0}, {"min_p": 1.5}, {"top_k": -2}, {"logprobs": 21}):
        with pytest.raises(ValueError):
            SamplingParams(**bad)


def test_logprobs_are_the_targets_and_equal_with_speculation_on_and_off(decoders):
    """fp32 greedy: every emitted token's logprob and top 3 equal the target's own log-softmax over the whole
    sequence in one forward, drafting or not, alone or in a batch."""
    dec = decoders["model"]
    got = {}
    for k, batch in ((None, 1), (3, 1), (3, 4)):
        sched = scheduler(dec, None, max_batch=batch)
        done: dict[str, object] = {}
        for j, prompt in enumerate(PROMPTS[:3]):
            drafter = "model" if k else "none"
            r = Request(dec.encode(prompt), 12, drafter, k=k, sampling=SamplingParams(logprobs=3), id=str(j))
            r.on_done = lambda f, j=j, done=done: done.__setitem__(str(j), f)
            sched.submit(r)
        sched.drain()
        got[(k, batch)] = [done[str(j)] for j in range(3)]
    for j, prompt in enumerate(PROMPTS[:3]):
        ids = dec.encode(prompt)
        out = got[(None, 1)][j].stats.output_ids  # type: ignore[attr-defined]
        with torch.inference_mode():
            logits = dec.pair.target(input_ids=torch.tensor([ids + out])).logits[0, len(ids) - 1 : -1]
        want = logprobs_of(logits, out, 3)
        for key, runs in got.items():
            f = runs[j]
            assert f.stats.output_ids == out, key  # type: ignore[attr-defined]
            lps = f.logprobs  # type: ignore[attr-defined]
            assert [t.token for t in lps] == out and len(lps) == len(out)
            for a, b in zip(lps, want):
                assert abs(a.logprob - b.logprob) < 1e-4, key
                assert [t for t, _ in a.top] == [t for t, _ in b.top], key
    one = logprobs_of(torch.zeros(1, 5), [2], 2)[0]
    assert one.token == 2 and abs(one.logprob - torch.log(torch.tensor(0.2)).item()) < 1e-6 and len(one.top) == 2


def test_a_temperature_below_vllms_epsilon_decodes_greedily_instead_of_overflowing():
    """temperature 1e-40 divided the logits into float32 infinities and sampled 'seenseen...'; vLLM treats any
    temperature under 1e-5 as greedy, and so does Phoenix."""
    from engine.decode.sampling import pick

    logits = torch.tensor([[0.1, 3.0, 2.9, -1.0]])
    for t in (1e-40, 1e-7, 9.9e-6):
        params = SamplingParams(temperature=t, seed=5)
        assert params.greedy and params.resolved() == params
        assert pick(logits, params, 0) == [1]
    assert not SamplingParams(temperature=1e-5, seed=5).greedy
