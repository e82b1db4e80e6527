"""Regressions as the PyTorch HUD catches them (engine.analysis.regressions): a known step is flagged at the point
where two runs in a row are past the line, a flat noisy series never, and the committed runs are judged in CI."""

from __future__ import annotations

import random

import pytest

from engine.analysis.regressions import (
    INSUFFICIENT,
    NO_REGRESSION,
    REGRESSION,
    SUSPICIOUS,
    Point,
    judge,
)


def series(values: list[float]) -> list[Point]:
    return [Point(i, f"2026-12-{1 + i // 24:02d}T{i % 24:02d}:00:00", v) for i, v in enumerate(values)]


def walk(values: list[float], figure: str) -> list[str]:
    """The verdict the rule gives after each run lands, as a dashboard would show it over time."""
    return [judge(series(values[: n + 1]), figure).verdict for n in range(len(values))]


def test_a_known_step_in_throughput_is_suspicious_at_its_first_run_and_a_regression_at_its_second():
    rng = random.Random(1)
    values = [100 * rng.uniform(0.95, 1.05) for _ in range(8)] + [70 * rng.uniform(0.97, 1.03) for _ in range(4)]
    verdicts = walk(values, "throughput_tok_s")
    assert verdicts[:2] == [INSUFFICIENT, INSUFFICIENT]
    assert set(verdicts[2:8]) == {NO_REGRESSION}
    assert verdicts[8] == SUSPICIOUS and verdicts[9] == REGRESSION  # the step is run 8; two past the line: run 9


def test_a_latency_step_is_caught_the_same_way_with_its_own_direction():
    values = [0.040] * 6 + [0.052, 0.053]  # TPOT up 30%: past 1.2x
    assert walk(values, "tpot_p50_s")[-2:] == [SUSPICIOUS, REGRESSION]
    assert walk([0.040] * 6 + [0.030, 0.029], "tpot_p50_s")[-1] == NO_REGRESSION  # faster is no regression


@pytest.mark.parametrize("seed", range(20))
def test_a_flat_series_with_its_noise_is_never_flagged(seed):
    rng = random.Random(seed)
    values = [100 * rng.uniform(0.88, 1.12) for _ in range(15)]  # +-12%: the block-to-block noise seen here
    assert REGRESSION not in walk(values, "throughput_tok_s")


def test_one_bad_run_then_a_good_one_is_no_regression():
    assert walk([100, 101, 99, 100, 60, 100], "throughput_tok_s")[-2:] == [SUSPICIOUS, NO_REGRESSION]


@pytest.mark.e2e
def test_the_committed_runs_are_judged_and_none_regressed(capsys):
    from helpers import run_cli

    from engine.paths import RESULTS_DB

    code, out, _ = run_cli(capsys, "regressions", "--db", f"sqlite:///{RESULTS_DB}", "--exit-code")
    assert code == 0, out
    assert "over" in out and "series (the PyTorch HUD's rule)" in out and "0 regression" in out


@pytest.mark.pages
def test_the_regressions_page_shows_each_verdict_with_its_series(app_db):
    from apptest import open_page

    at = open_page("regressions")
    assert not at.exception
    assert {m.label for m in at.metric} == {REGRESSION, SUSPICIOUS, NO_REGRESSION, INSUFFICIENT}
    assert any("PyTorch HUD" in c.value for c in at.caption)


@pytest.mark.pages
def test_a_baseline_pinned_in_the_link_gives_each_run_its_delta_with_its_interval_and_noise_verdict(app_db):
    from apptest import open_page

    at = open_page("runs", baseline="1")
    table = at.dataframe[0].value
    assert {"Δ% tok/s vs #1", "Δ 95% CI", "vs baseline"} <= set(table.columns)
    rows = table.set_index("id")
    assert rows.loc[1, "vs baseline"] == "the baseline"
    assert rows.loc[2, "vs baseline"] in ("within the noise", "faster", "slower")
    assert at.query_params["baseline"] in ("1", ["1"])  # the pin is part of the shareable link
    setup = open_page("runs", columns="setup")
    assert setup.query_params["columns"] in ("setup", ["setup"])  # the columns view is kept in the link too
