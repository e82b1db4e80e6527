"""The one comparison builder (ratio of means on the log scale, Welch's test) and the one speedup."""

from __future__ import annotations

import pandas as pd
import pytest

from engine.analysis.compare import TOO_FEW, compare
from engine.analysis.speedup import best, speedups, speedups_by, spread
from engine.analysis.stats import welch


def test_the_ratio_is_of_means_and_its_interval_is_symmetric_on_the_log_scale():
    base, faster = [10.0, 11.0, 9.0, 10.0], [20.0, 21.0, 19.0, 20.0]
    c = compare(base, faster)
    assert c.ratio == pytest.approx(2.0) and c.verdict == "significant" and c.p_value < 0.001
    assert welch(base, faster).diff == pytest.approx(c.difference)
    assert c.ratio_low < 2.0 < c.ratio_high
    assert c.ratio / c.ratio_low == pytest.approx(c.ratio_high / c.ratio)


def test_a_ratio_interval_of_positive_numbers_never_reaches_below_zero():
    # the disturbed demo of issue 34: 13.97 against 234 tok/s; a linear interval went to -0.1055
    base, noisy = [234.0, 230.0, 238.0, 236.0], [13.97, 240.0, 15.0, 236.0]
    c = compare(base, noisy)
    assert c.ratio_low is not None and 0 < c.ratio_low < c.ratio < c.ratio_high


@pytest.mark.parametrize("base,values", [([10.0], [11.0, 12.0]), ([], [1.0, 2.0]), ([1.0, 2.0], [3.0])])
def test_fewer_than_two_requests_on_a_side_says_so_instead_of_a_verdict(base, values):
    c = compare(base, values)
    assert c.verdict == TOO_FEW and c.p_value is None and c.ratio_low is None


def test_speedups_pair_each_request_with_target_only_on_the_same_prompt():
    frame = pd.DataFrame(
        {
            "prompt_id": ["a", "a", "b", "b", "c"],
            "mode": ["target", "model_4", "target", "model_4", "model_4"],
            "tokens_per_s": [10.0, 20.0, 40.0, 40.0, 99.0],
        }
    )
    s = speedups(frame)["model_4"]
    assert (s.median, s.n) == (1.5, 2)  # ratios 2.0 and 1.0; prompt c has no target request and drops out
    assert (s.p25, s.p75) == (1.25, 1.75)
    assert speedups(frame)["target"].median == 1.0  # the reference against itself


def test_a_run_without_a_reference_mode_has_no_speedup():
    frame = pd.DataFrame({"prompt_id": ["a", "a"], "mode": ["model_2", "model_4"], "tokens_per_s": [1.0, 2.0]})
    assert speedups(frame) == {}


def test_a_served_runs_speedups_are_against_its_server_without_speculation():
    frame = pd.DataFrame(
        {
            "prompt_id": ["a", "a", "b", "b"],
            "mode": ["llamacpp-none_c1", "llamacpp-ngram-simple_c1"] * 2,
            "tokens_per_s": [10.0, 12.0, 10.0, 14.0],
        }
    )
    s = speedups(frame)
    assert s["llamacpp-ngram-simple_c1"].median == pytest.approx(1.3)
    assert best(s, "llamacpp-none_c1")[0] == "llamacpp-ngram-simple_c1"


def test_speedups_by_k_pool_every_request_that_drafted_k_across_modes():
    frame = pd.DataFrame(
        {
            "prompt_id": ["a", "a", "a", "b", "b", "b"],
            "mode": ["target", "model_4", "bandit"] * 2,
            "k": [0, 4, 4, 0, 4, 2],
            "tokens_per_s": [10.0, 20.0, 30.0, 10.0, 10.0, 15.0],
        }
    )
    by_k = speedups_by(frame, "k")
    assert by_k[4].median == pytest.approx(2.0) and by_k[4].n == 3  # ratios 2.0, 3.0 and 1.0
    assert by_k[2].median == pytest.approx(1.5) and by_k[0].median == 1.0


def test_a_spread_of_one_value_is_that_value_and_of_none_is_empty():
    assert spread([2.0]).median == 2.0 and spread([2.0]).p25 == 2.0
    assert spread([]).median is None and spread([]).text() == "n/a"


@pytest.mark.parametrize(
    "successes,trials,low,high",
    [
        (0, 3, 0.0, 0.5615),  # Wilson's closed form: z^2 / (n + z^2) at zero successes
        (88, 1000, 0.0720, 0.1072),
        (5, 5, 0.5655, 1.0),
    ],
)
def test_a_rate_carries_wilsons_interval(successes, trials, low, high):
    from engine.analysis.stats import wilson

    assert wilson(successes, trials) == pytest.approx((low, high), abs=5e-4)


@pytest.mark.parametrize("successes,trials", [(1, 0), (4, 3), (-1, 3)])
def test_counts_that_do_not_make_a_rate_have_no_interval(successes, trials):
    from engine.analysis.stats import wilson

    assert wilson(successes, trials) is None


def test_a_speedups_median_carries_a_bootstrap_interval_and_a_hint_below_five_requests():
    wide, narrow = spread([1.0, 2.0, 1.5]), spread([1.50, 1.52, 1.48, 1.51, 1.49, 1.50, 1.53, 1.47])
    assert wide.low <= wide.median <= wide.high and narrow.low <= narrow.median <= narrow.high
    assert narrow.high - narrow.low < wide.high - wide.low
    assert "a hint, not a finding" in wide.interval_text() and "a hint" not in narrow.interval_text()
    assert spread([1.2]).low is None and "no interval from one request" in spread([1.2]).interval_text()
    assert spread([1.0, 2.0, 1.5]).low == wide.low  # seeded: the same page shows the same interval on every rerun


def test_target_only_slowing_down_inside_a_run_reads_as_a_busy_machine():
    from engine.analysis.stats import load_drift

    rng = __import__("random").Random(0)
    quiet = [40.0 * rng.uniform(0.85, 1.15) for _ in range(24)]  # prompts alone move tokens/s by 15%
    assert not load_drift(quiet).busy
    slowed = quiet[:8] + [v / 2.2 for v in quiet[8:]]  # something else took the cores after the first third
    drift = load_drift(slowed)
    assert drift.busy and drift.early_n == 6 and drift.later_p50_ms > 1.5 * drift.early_ms
    spikes = quiet[:20] + [v / 4 for v in quiet[20:]]  # a tail: p95 far above the start, the median unmoved
    assert load_drift(spikes).busy and load_drift(quiet[:7]) is None
