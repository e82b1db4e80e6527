"""What a reader sees in tables and beside figures: headers in words, a dash for a missing value (never None),
Break-even opening on a run and saying why its optimum and the measured best differ, and a run's provenance
(duration, CPU, versions, commit, full config) and latency as a server user reads it."""

from __future__ import annotations

import math
import pathlib
import re

import pandas as pd
import pytest
from apptest import open_page

from app import tables
from engine.analysis.breakeven import optimum_k, optimum_note

pytestmark = pytest.mark.pages  # renders dashboard pages through AppTest: its own loop, -m pages


def test_headers_read_as_words_and_modes_keep_their_names():
    assert tables.header("prompt_id") == "prompt" and tables.header("created_at") == "created"
    assert tables.header("latency_s") == "latency (s)" and tables.header("output_tokens") == "output tokens"
    assert tables.header("model_4") == "model_4" and tables.header("bandit:epsilon_greedy") == "bandit:epsilon_greedy"
    assert tables.is_raw("progress_done") and not tables.is_raw("eagle3_3") and not tables.is_raw("x reference")


def test_a_null_reaches_the_grid_as_a_dash_and_a_full_numeric_column_stays_numeric():
    df = pd.DataFrame(
        {"p_value": [0.01234, None], "n": [3, 4], "speedup": [1.5, math.nan], "note": ["", None], "ok": [True, False]}
    )
    shown, config = tables.prepared(df, formats={"speedup": "%.2fx", "p_value": "%.4f"})
    assert shown["p_value"].tolist() == ["0.0123", "–"] and shown["speedup"].tolist() == ["1.50x", "–"]
    assert shown["note"].tolist() == ["–", "–"]
    assert shown["n"].tolist() == [3, 4] and config["n"]["type_config"]["type"] == "number"
    assert shown["ok"].tolist() == [True, False]
    assert config["p_value"]["label"] == "Welch p" and config["speedup"]["label"] == "speedup"
    # nothing the grid would paint as None: no null in any column handed over
    assert not shown.isna().any().any()


def test_every_table_on_every_page_goes_through_the_one_helper():
    app = pathlib.Path(__file__).resolve().parent.parent / "app"
    for path in [*app.glob("*.py"), *app.glob("views/*.py")]:
        if path.name == "tables.py":
            continue
        assert not re.search(r"\.dataframe\(", path.read_text()), f"{path.name} draws a table around tables.show"


def test_the_optimum_note_says_why_the_model_and_the_run_disagree():
    measured = pd.DataFrame(
        {
            "arm": ["target", "model_1", "model_2", "model_4"],
            "k": [0, 1, 2, 4],
            "measured speedup": [1.0, 1.22, 1.02, 0.96],
            "n": [20] * 4,
            "verify cost": [1.0, 1.05, 1.3, 1.6],
        }
    )
    agree = optimum_note(0.375, 0.139, measured)
    assert optimum_k(0.375, 0.139) == 1 and "the same k (model_1, 1.22x)" in agree
    text = optimum_note(0.8, 0.05, measured)
    assert f"optimum is k = {optimum_k(0.8, 0.05)}" in text and "best measured arm is model_1 (1.22x)" in text
    assert "did not try k = 8" in text and "up to 1.60 target steps at k = 4" in text


def test_break_even_opens_on_the_newest_run_it_can_fit_and_explains_its_optimum(app_db):
    at = open_page("breakeven")  # no run in the link: not the made-up a = 0.7, c = 0.1
    assert at.toggle(key="fit_toggle").value is True
    assert any("Fitted a =" in c.value for c in at.caption)
    assert any(c.value.startswith("The model's optimum is k =") for c in at.caption)
    by_hand = open_page("breakeven", a="0.50", c="0.20")  # a link with values by hand keeps them
    assert by_hand.toggle(key="fit_toggle").value is False
    assert by_hand.slider[0].value == 0.5


def test_the_run_page_names_its_duration_machine_versions_commit_and_full_config(app_db):
    from db.models import Run

    with app_db.session_scope() as s:
        run = s.get(Run, 1)
        run.config = {
            **run.config,
            "environment": {
                "cpu": "AMD EPYC (family 25, model 17)",
                "cores": 2,
                "cpu_flags": ["avx2", "avx512f"],
                "torch": "2.13.0",
                "git_sha": "035e7fb0123456789",
            },
        }
    at = open_page("run", run=1)
    texts = [t.value for t in at.text]
    assert any(
        "CPU AMD EPYC (family 25, model 17), 2 cores (avx2, avx512f)" in t and "git 035e7fb01234" in t for t in texts
    )
    assert any(re.search(r"created \d{4}-\d\d-\d\d \d\d:\d\d UTC", t) for t in texts)
    assert at.json and "environment" in at.json[0].value


def test_the_run_page_shows_ttft_and_time_per_output_token_per_mode(app_db):
    from engine.analysis.load import level_table

    at = open_page("run", run=1)
    table = next(d.value for d in at.dataframe if "ttft_p50_s" in d.value.columns)
    expected = level_table(app_db.served_requests(1)).set_index("mode")
    for row in table.itertuples():
        assert row.ttft_p50_s == expected.loc[row.mode, "ttft_p50_s"]
        assert row.tpot_p50_s == expected.loc[row.mode, "tpot_p50_s"]


def test_a_policy_without_an_exploration_signal_draws_no_empty_panel():
    """Run 80's Thompson sampling drew an "epsilon / P(not best)" panel with axes and nothing in it (issue 50)."""
    import pandas as pd

    from app.charts import bandit_charts

    def history(epsilon):
        return {
            "choices": pd.DataFrame(
                {"t": [0, 1], "chosen_k": [2, 3], "n": [1, 1], "explored_n": [1, 0], "trace_id": [None, None]}
            ),  # fmt: skip
            "signals": pd.DataFrame({"t": [0, 1], "n": [1, 1], "epsilon": epsilon, "p_not_best": [None, None]}),
            "means": pd.DataFrame(
                {"t": [0, 1], "arm_means": [{2: 1.0}, {2: 1.0, 3: 2.0}], "arm_counts": [{2: 1}, {2: 1, 3: 1}]}
            ),  # fmt: skip
        }

    thompson = bandit_charts(history([None, None]), lambda t: None).to_dict()
    epsilon = bandit_charts(history([0.2, 0.1]), lambda t: None).to_dict()
    assert len(thompson["vconcat"]) == 2 and len(epsilon["vconcat"]) == 3
    titles = [c["encoding"]["y"].get("title") for c in thompson["vconcat"]]
    assert "epsilon / P(not best)" not in titles
