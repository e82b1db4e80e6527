"""Noise is named, not called a finding: a disturbed run beside a quiet one of the same work, and repeats."""

from __future__ import annotations

import random

import pytest
from apptest import open_page
from helpers import app_record, migrated

from db.store import Store

pytestmark = pytest.mark.pages  # renders dashboard pages through AppTest: its own loop, -m pages

SLOW = 17.0  # the disturbed demo of issue 34: target-only at 13.97 against 234 tok/s


@pytest.fixture
def two_demos(tmp_path, monkeypatch):
    """Two runs of one config; in the first, everything ran 17x slower (a busy machine), evenly, so the run's own
    drift check (its first requests against its later ones) sees nothing."""
    url = migrated(f"sqlite:///{tmp_path / 'noise.db'}")
    store = Store(url)
    rng = random.Random(1)
    cfg = {"bench": {"modes": ["target", "model_4"], "prompts": "humaneval-test", "max_new_tokens": 64}}
    for slow in (SLOW, 1.0):
        run = store.create_run("demo", cfg, "embedded", "embedded", 20, status="done")
        recs = []
        for i in range(10):
            for j, (mode, k) in enumerate((("target", 0), ("model_4", 4))):
                rec = app_record(run.id, 2 * i + j, mode, k, rng)
                rec.latency_s *= slow
                rec.tokens_per_s /= slow
                recs.append(rec)
        store.add_requests(recs)
    monkeypatch.setenv("PHOENIX_DB", url)
    return store


def test_a_run_whose_target_only_ran_far_slower_than_the_same_work_elsewhere_is_named_busy(two_demos):
    at = open_page("run", run=1)
    warnings = [w.value for w in at.warning]
    assert any("machine was busy in run #1" in w and "the same 5 prompts" in w for w in warnings), warnings
    assert any("machine was busy in run #1" in w for w in (x.value for x in open_page("run", run=2).warning))


def test_compare_of_two_disturbed_repeats_says_noise_and_repeats_not_a_finding(two_demos):
    at = open_page("compare", series="1:model_4,2:model_4")
    warnings = " ".join(w.value for w in at.warning)
    assert "the machine was disturbed" in warnings and "noise, not a finding" in warnings
    assert "These series are repeats" in warnings
    assert not any("identical apart from the mode" in c.value for c in at.caption)
    verdict = next(d.value for d in at.dataframe if "metric" in d.value.columns).set_index("metric")
    ratio = [c for c in verdict.columns if c.startswith("ratio of means")][0]
    assert verdict.loc["tokens/s", "verdict"] == "significant"  # Welch sees the 17x; the page says why
    low = float(verdict.loc["tokens/s", ratio].split("(")[1].split("-")[0])
    assert low > 0  # a ratio of positive numbers: the interval stays above 0


def test_two_quiet_runs_of_the_same_work_raise_no_busy_warning(app_db):
    assert not [w for w in open_page("run", run=1).warning if "machine was busy" in w.value]
    at = open_page("compare", series="1:model_4,2:target")
    assert not [w for w in at.warning if "disturbed" in w.value]
