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
    assert "figures of" in out and "series had enough points to judge" in out and "0 regression" in out


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


def test_a_collapse_to_zero_is_a_regression_never_dropped():
    assert walk([100, 101, 99, 100, 0, 0], "throughput_tok_s")[-1] == REGRESSION
    assert walk([0.04] * 5 + [float("inf")] * 2, "ttft_p50_s")[-1] == REGRESSION  # every request failed
    assert walk([100, 101, 99, float("nan"), 100], "throughput_tok_s")[-1] == NO_REGRESSION  # NaN: not measured


def test_a_baseline_of_zero_or_inf_gives_no_ratio_of_it():
    v = judge(series([0, 0, 0, 0, 0]), "throughput_tok_s")
    assert v.verdict == REGRESSION and all(r != r for r in v.ratios)  # no "0.00x of the baseline inf"


def _fixture_runs(slow: float, wobble: float):
    """A served series as stored: eight load levels of one configuration on one server, each a run of its own
    (two sweep names: the name is not the key), the newest two slowed by ``slow`` and every point wobbling."""
    from datetime import UTC, datetime, timedelta
    from types import SimpleNamespace

    rng = random.Random(7)
    runs = []
    for i in range(8):
        factor = (1 - slow if i >= 6 else 1.0) * rng.uniform(1 - wobble, 1 + wobble)
        cfg = {
            "load": {"engine": "phoenix", "prompts": "humaneval-test", "limit": 16, "max_new_tokens": 64},
            "level": 4,
            "request_rate": None,
            "cache_scenario": "cold",
            "server": {"dtype": "bfloat16", "threads": 2, "drafter": "eagle3", "settings": {"max_batch": 16}},
            "environment": {"cpu": "fixture CPU"},
            "figures": {
                v: {
                    "answered": 16,
                    "output_throughput": 100 * factor,
                    "ttft_ms_p50": 80 / factor,
                    "tpot_ms_p50": 30 / factor,
                }
                for v in ("none", "eagle3-auto")
            },  # fmt: skip
        }
        at = datetime(2026, 12, 1, tzinfo=UTC) + timedelta(days=i)
        name = f"{'nightly' if i % 2 else 'phoenix load'} c=4"
        runs.append(SimpleNamespace(id=i + 1, name=name, status="done", created_at=at, config=cfg, target="smollm2",
                                    draft=None, bench=None))  # fmt: skip
    return runs


@pytest.mark.parametrize(("slow", "caught"), [(0.25, True), (0.05, False)])
def test_a_planted_slowdown_in_a_served_series_is_caught_and_a_wobble_is_not(slow, caught):
    from engine.analysis.regressions import series_of, series_verdicts

    series = series_of(_fixture_runs(slow, wobble=0.03), lambda _: [])
    assert len(series) == 2  # one series per variant: the two sweep names did not split them
    verdicts = series_verdicts(series)
    assert all(v.verdict != INSUFFICIENT for v in verdicts)  # every series with >= 3 runs is judged
    assert any(v.verdict == REGRESSION for v in verdicts) == caught


def test_the_regressions_gate_fails_on_a_database_slowed_on_purpose(tmp_path, capsys):
    """The CI gate can fail: a served series in a real store, its newest two runs 25% slower, exits 1."""
    from helpers import migrated, run_cli

    from db.store import Store

    url = migrated(f"sqlite:///{tmp_path / 'slow.db'}")
    store = Store(url)
    for run in _fixture_runs(0.25, wobble=0.02):
        run_id = store.create_run(run.name, run.config, "smollm2", None, 0).id
        store.set_status(run_id, "done")
    code, out, _ = run_cli(capsys, "regressions", "--db", url, "--exit-code")
    assert code == 1 and "regression   throughput_tok_s" in out, out


def test_runs_tagged_disturbed_stay_in_the_store_but_in_no_series_and_the_gate_says_so(tmp_path, capsys):
    """A machine's bad day (the same CPU model 1.6x slower, vLLM's own figures with it) is no regression of the code:
    runs tagged 'disturbed' are left out of every series, and the gate names them."""
    from helpers import migrated, run_cli

    from db.store import Store

    url = migrated(f"sqlite:///{tmp_path / 'slow.db'}")
    store = Store(url)
    ids = []
    for run in _fixture_runs(0.25, wobble=0.02):
        ids.append(store.create_run(run.name, run.config, "smollm2", None, 0).id)
        store.set_status(ids[-1], "done")
    for run_id in ids[-2:]:  # the two slowed runs: measured on a slower machine, and said so
        store.add_tags(run_id, ["disturbed"])
        store.set_note(run_id, "the machine ran 1.6x slower this day (vLLM alone 15.5 against 25.1 tok/s)")
    code, out, _ = run_cli(capsys, "regressions", "--db", url, "--exit-code")
    assert code == 0 and "2 runs tagged 'disturbed' left out" in out and f"#{ids[-2]}-#{ids[-1]}" in out, out
    assert "regression   " not in out
    assert len(store.list_runs(limit=100)) == len(ids)  # kept: left out of the series only


def test_a_judging_command_refuses_a_database_that_is_not_there(tmp_path, capsys):
    from helpers import run_cli

    missing = tmp_path / "typo.db"
    code, _, err = run_cli(capsys, "regressions", "--db", str(missing), "--exit-code")
    assert code == 2 and "no Phoenix database" in err and not missing.exists()
