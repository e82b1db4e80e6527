"""One speedup: a mode of a run shows the same number on every page, in the report, its CSV and the MLflow export.

Checked on a real run of the embedded pair (decoded here, every mode side by side) and on the committed
benchmarks/results.db (runs #5, #9 and #14, where the Runs list once said 2.22x, 1.79x and blank against the Run
page's 2.02x, 1.45x and 1.01x).
"""

from __future__ import annotations

import shutil

import pytest
from apptest import open_page

from db.store import Store
from engine.bench import report
from engine.modes import reference_mode
from engine.paths import ROOT

pytestmark = pytest.mark.e2e


def _report(store: Store, run_id: int) -> dict[str, float]:
    return {m.mode: m.speedup.median for m in report.summaries(store, run_id) if m.speedup is not None}


def _run_page(run_id: int) -> dict[str, str]:
    """The KPI row's speedup per mode: each mode's block is its n line, then eight metrics."""
    at = open_page("run", run=run_id)
    modes = [t.value.split(" · ")[0] for t in at.text if " · n = " in t.value]
    values = [m.value for m in at.metric if m.label in ("x target", "x reference")]
    assert len(modes) == len(values)
    return dict(zip(modes, values))


def _runs_list(store: Store, run_id: int) -> tuple[str, float]:
    """The Runs list, sorted by best speedup and filtered to the run's name (its first page holds 50 runs, and the
    committed database holds more)."""
    from app.urlstate import FILTER_MAX

    at = open_page("runs", sort="best_speedup", name=store.get_run(run_id).name[:FILTER_MAX])
    table = at.dataframe[0].value.set_index("id")
    return table.loc[run_id, "best_mode"], table.loc[run_id, "best_speedup"]


def _compare(run_id: int, modes: list[str]) -> dict[str, float]:
    at = open_page("compare", series=",".join(f"{run_id}:{m}" for m in modes))
    table = next(d.value for d in at.dataframe if "x reference" in d.value.columns)
    return {s.split(" (")[0].split(":", 1)[1]: v for s, v in zip(table["series"], table["x reference"])}


def _policies(run_id: int) -> tuple[dict[str, float], dict[str, float]]:
    """The Policies page's table, and its oracle table (every mode's x reference beside the oracle's row)."""
    at = open_page("policies", run=run_id)
    tables = [d.value for d in at.dataframe if "x reference" in d.value.columns]
    oracle = [t for t in tables if "share of oracle (IQR)" in t.columns]
    policies = [t for t in tables if "share of oracle (IQR)" not in t.columns]
    shown = dict(zip(policies[0]["mode"], policies[0]["x reference"])) if policies else {}
    rows = dict(zip(oracle[0]["mode"], oracle[0]["x reference"])) if oracle else {}
    return shown, {m: v for m, v in rows.items() if m != "oracle"}


def _breakeven(run_id: int) -> dict[str, float]:
    at = open_page("breakeven", run=run_id)
    tables = [d.value for d in at.dataframe if "verify cost" in d.value.columns]
    return dict(zip(tables[0]["arm"], tables[0]["measured speedup"])) if tables else {}


def _mlflow(store: Store, run_id: int) -> dict[str, float]:
    from engine.export.mlflow import key, metrics_of

    values = {name: v for name, v, step in metrics_of(store, run_id) if step == 0}
    return {m: values[key(f"{m}/speedup")] for m in _report(store, run_id) if key(f"{m}/speedup") in values}


def assert_one_speedup(store: Store, run_id: int) -> None:
    truth = _report(store, run_id)
    ref = reference_mode(truth)
    assert ref is not None and truth[ref] == 1.0 and len(truth) >= 2
    csv = {r["mode"]: r["speedup_median"] for r in report.csv_rows(report.summaries(store, run_id))}
    assert csv == truth
    assert _mlflow(store, run_id) == truth
    assert _run_page(run_id) == {m: f"{v:.2f}x" for m, v in truth.items()}
    best_mode, best = _runs_list(store, run_id)
    assert best == max(v for m, v in truth.items() if m != ref) and truth[best_mode] == best
    assert _compare(run_id, list(truth)) == truth
    policies, oracle = _policies(run_id)
    for mode, value in policies.items():
        assert value == truth[mode], mode
    for mode, value in oracle.items():  # the oracle table shows the same speedup, rounded for the screen
        assert round(float(value), 6) == round(truth[mode], 6), mode
    for arm, value in _breakeven(run_id).items():
        if arm in truth:  # fixed modes' arms; a bandit's arms are its k's, which no other page splits out
            assert value == truth[arm], arm


def test_every_page_shows_one_speedup_for_a_real_run_of_the_embedded_pair(tmp_path, monkeypatch):
    from engine.bench.config import BenchConfig
    from engine.bench.run import execute
    from engine.bench.setup import create_run

    url = f"sqlite:///{tmp_path / 'embedded.db'}"
    monkeypatch.setenv("PHOENIX_DB", url)
    from db.migrate import ensure_schema

    ensure_schema(url)
    store = Store(url)
    modes = ["target", "model_2", "ngram_4", "bandit"]
    cfg = BenchConfig(target="embedded", draft="embedded", limit=4, max_new_tokens=24, modes=modes, arms=[0, 2, 4])
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, progress=False) == "done"
    assert_one_speedup(store, run.id)


@pytest.mark.parametrize("run_id", [5, 9, 14, 83])
def test_every_page_shows_one_speedup_for_the_committed_results(run_id, tmp_path, monkeypatch):
    copy = tmp_path / "results.db"
    shutil.copy(ROOT / "benchmarks" / "results.db", copy)  # pages may migrate; the committed file stays as it is
    url = f"sqlite:///{copy}"
    monkeypatch.setenv("PHOENIX_DB", url)
    assert_one_speedup(Store(url), run_id)


def test_the_committed_results_database_opens_read_only_with_no_button_that_writes(monkeypatch):
    monkeypatch.setenv("PHOENIX_DB", f"sqlite:///{ROOT / 'benchmarks' / 'results.db'}")
    before = (ROOT / "benchmarks" / "results.db").read_bytes()
    home = open_page("runs")
    assert not [b for b in home.button if b.label.startswith("Quick demo")]
    assert any("committed results database" in c.value for c in home.caption)
    run = open_page("run", run=9)
    assert not [b for b in run.button if "Archive" in b.label or "Delete" in b.label]
    new = open_page("new_run")
    assert not new.button and any("committed results database" in i.value for i in new.info)
    assert (ROOT / "benchmarks" / "results.db").read_bytes() == before
