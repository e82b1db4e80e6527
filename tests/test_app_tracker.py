"""The tracker on the dashboard: notes, tags, archive, delete, baselines and any-run comparison, through AppTest."""

from __future__ import annotations

import json
import random

import pytest
from apptest import charts, open_page
from helpers import app_record

pytestmark = pytest.mark.pages  # renders dashboard pages through AppTest: its own loop, -m pages

HOSTILE_NOTE = (
    "# Why\n**new draft** <script>alert('x')</script> <img src=x onerror=alert(1)> "
    "[click](javascript:alert(1)) ![beacon](https://evil.example/b.png) <https://evil.example/a>"
)


def test_a_note_renders_its_formatting_and_nothing_that_runs_or_loads(app_db):

    app_db.set_note(1, HOSTILE_NOTE)
    at = open_page("run", run=1)
    html = " ".join(h.proto.body for h in at.get("html"))
    assert "<strong>new draft</strong>" in html and "<h1>Why</h1>" in html
    assert "<script" not in html and "<img" not in html and "<a " not in html and "href" not in html
    assert "&lt;script&gt;" in html  # shown as text


def test_the_run_page_saves_tags_and_a_note_archives_and_deletes_with_a_confirmation(app_db):

    app_db.add_tags(2, ["draft-v2", "exp", "a, b"])  # known tags the picker offers; one holds a comma
    at = open_page("run", run=1)
    at.multiselect(key="t_tags").set_value(["draft-v2", "exp"])
    at.text_area(key="t_note").input("made to test **v2**")
    at.get("form_submit_button")[-1].click()
    at.run()
    info = app_db.get_run(1)
    assert info.tags == ["draft-v2", "exp"] and info.note == "made to test **v2**"
    at.button(key="t_archive").click().run()
    assert app_db.get_run(1).archived
    assert at.button(key="t_delete").disabled
    assert any("Delete run #1 (run-0) and its 30 requests" in c.label for c in at.checkbox)
    at.checkbox(key="t_delete_confirm").check().run()
    at.button(key="t_delete").click().run()
    assert app_db.get_run(1) is None and app_db.count_requests(1) == 0


def test_the_runs_page_filters_by_tag_hides_archived_and_pages_in_sql(app_db):

    app_db.add_tags(1, ["baseline-run"])
    app_db.set_archived(2, True)
    at = open_page("runs")
    table = next(d.value for d in at.dataframe if "open" in d.value.columns)
    assert table["id"].tolist() == [1]  # run 2 is archived
    at.toggle(key="f_archived").set_value(True).run()
    at.segmented_control(key="f_columns").set_value("setup").run()  # tags are in the table's setup view
    table = next(d.value for d in at.dataframe if "tags" in d.value.columns)
    assert table["id"].tolist() == [2, 1] and table["tags"].tolist() == ["–", "baseline-run"]
    at.segmented_control(key="f_columns").set_value("results").run()
    status = next(d.value for d in at.dataframe if "status" in d.value.columns)["status"]
    assert status.tolist() == ["done (archived)", "done"]
    at = open_page("runs", tag="baseline-run", archived=1)
    assert next(d.value for d in at.dataframe if "open" in d.value.columns)["id"].tolist() == [1]
    assert "2 runs" in open_page("runs", archived=1).number_input(key="f_page").label


def test_a_pinned_baseline_shows_x_baseline_with_welchs_p_value_on_its_targets_runs(app_db):

    app_db.set_baseline(1)
    at = open_page("run", run=2)
    table = next(d.value for d in at.dataframe if "x baseline" in d.value.columns)
    assert set(table["mode"]) == {"target", "model_4", "bandit"}
    assert table["p-value"].between(0, 1).all() and (table["x baseline"] > 0).all()
    assert any("baseline of this target: run #1" in s.value for s in at.subheader)


def test_compare_overlays_two_runs_curves_and_lists_only_the_settings_that_differ(app_db):
    from db.models import Run

    with app_db.session_scope() as s:
        s.get(Run, 2).config = {**s.get(Run, 2).config, "bench": {**s.get(Run, 2).config["bench"], "seed": 7}}
    at = open_page("compare", series="1:model_4,2:model_4")
    assert at.multiselect(key="series").value == ["1:model_4", "2:model_4"]
    specs = charts(at)
    assert any("strokeDash" in json.dumps(sp) for sp in specs)  # the acceptance curves, one color per series
    diff = next(d.value for d in at.dataframe if "setting" in d.value.columns)
    assert diff["setting"].tolist() == ["seed"] and diff["2:model_4"].tolist() == ["7"]
    assert "key" not in diff.columns  # the recorded key is for the checks, not the reader
    verdict = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    assert set(verdict["metric"]) == {"tokens/s", "latency (s)", "acceptance"}


def test_saving_only_the_note_keeps_a_tag_that_holds_a_comma_whole(app_db):
    """Before tags travelled as a list, the comma-joined box split 'a, b' into two tags on any save."""

    app_db.add_tags(1, ["a, b", "solo"])
    at = open_page("run", run=1)
    at.text_area(key="t_note").input("only the note changed")
    at.get("form_submit_button")[-1].click()
    at.run()
    assert app_db.get_run(1).tags == ["a, b", "solo"] and app_db.get_run(1).note == "only the note changed"


def test_a_compare_link_naming_too_many_series_draws_the_first_twelve_and_says_so(app_db):
    import random

    from helpers import app_record

    for r in range(3, 7):
        run = app_db.create_run(f"more-{r}", {"bench": {}}, "embedded", "embedded", 3, status="done")
        app_db.add_requests(
            [app_record(run.id, i, "target", 0, random.Random(i)) for i in range(3)]
            + [app_record(run.id, 3 + i, "model_4", 4, random.Random(i)) for i in range(3)]
        )
    series = ",".join(f"{run}:{mode}" for run in range(1, 7) for mode in ("target", "model_4")) + ",1:bandit,2:bandit"
    at = open_page("compare", series=series)
    assert any("Compare draws at most 12" in w.value for w in at.warning)
    assert len(at.multiselect(key="series").value) <= 12


def _spec_bench_run(app_db):
    """A drafter-choosing run on four Spec-Bench questions: target, ngram_4 and a bandit over both."""
    import random
    from dataclasses import replace

    from helpers import app_record

    from db.entities import BanditRecord

    run = app_db.create_run(
        "sb",
        {
            "bench": {
                "prompts": "spec-bench-test",
                "modes": ["target", "ngram_4", "bandit"],
                "drafter_arms": ["target", "ngram_4"],
            }
        },
        "embedded",
        None,
        12,
        status="done",
    )
    recs, seq = [], 0
    for i, (pid, category) in enumerate((("qa-1", "qa"), ("qa-2", "qa"), ("rag-3", "rag"), ("rag-4", "rag"))):
        for mode, k in (("target", 0), ("ngram_4", 4), ("bandit", 4 * (i % 2))):
            rec = replace(app_record(run.id, seq, mode, k, random.Random(seq)), prompt_id=pid, category=category)
            if mode == "bandit":
                arm = "ngram_4" if k else "target"
                rec.bandit = BanditRecord(
                    t=i, explored=i < 2, chosen_k=k, arm_means={}, arm_counts={}, reward=1.0, policy="thompson", arm=arm
                )
            recs.append(rec)
            seq += 1
    app_db.add_requests(recs)
    return run.id


def test_a_spec_bench_run_shows_the_leaderboard_with_n_and_welch_in_every_cell(app_db):
    run_id = _spec_bench_run(app_db)
    at = open_page("run", run=run_id)
    board = next(d.value for d in at.dataframe if "mean accepted" in d.value.columns)
    assert set(board["column"]) == {"QA", "RAG", "Overall"} and set(board["n"]) == {2, 4}
    ngram = board[board["mode"] == "ngram_4"]
    assert (ngram["p_value"] != "–").all() and ngram["p_value"].map(lambda p: 0 <= float(p) <= 1).all()
    for x, ci in zip(ngram["x target"], ngram["95% CI"]):  # every cell's median carries its interval
        low, high = map(float, ci.split("-"))
        assert low <= float(x) <= high
    assert any("column group" in json.dumps(sp) for sp in charts(at))  # acceptance per position per column


def test_compare_overlays_one_column_group_of_a_spec_bench_run(app_db):
    run_id = _spec_bench_run(app_db)
    at = open_page("compare", series=f"{run_id}:target@rag,{run_id}:ngram_4@rag")
    assert at.multiselect(key="series").value == [f"{run_id}:target@rag", f"{run_id}:ngram_4@rag"]
    verdict = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    assert {n.split(" / ")[1] for n in verdict["n (base / series)"]} == {"2"}  # the two RAG questions only


def test_the_policies_page_shows_which_drafter_arm_each_decision_took(app_db):
    run_id = _spec_bench_run(app_db)
    at = open_page("policies", run=run_id)
    assert any(s.value == "Chosen arm over time" for s in at.subheader)
    at.segmented_control(key="pol_columns").set_value("how it chose").run()  # the table's second view
    table = next(d.value for d in at.dataframe if "arms chosen" in d.value.columns)
    assert table.set_index("mode").loc["bandit", "arms chosen"] == "target 50%, ngram_4 50%"


def test_a_run_of_model_free_drafters_gets_their_figures_instead_of_no_drafting_data(app_db):
    import random

    from helpers import app_record

    run = app_db.create_run(
        "free", {"bench": {"modes": ["target", "ngram_4", "suffix_4"]}}, "embedded", None, 6, status="done"
    )
    app_db.add_requests(
        [
            app_record(run.id, i * 3 + j, mode, k, random.Random(i))
            for i in range(2)
            for j, (mode, k) in enumerate((("target", 0), ("ngram_4", 4), ("suffix_4", 4)))
        ]
    )
    at = open_page("run", run=run.id)
    text = " ".join(i.value for i in at.info)
    assert "No drafting data yet" not in text
    assert "ngram_4: acceptance" in text and "suffix_4: acceptance" in text


def test_a_queued_run_with_target_says_what_its_identity_check_waits_for(app_db):
    run = app_db.create_run(
        "waiting", {"bench": {"modes": ["target", "model_4"]}}, "embedded", "embedded", 6, status="queued"
    )
    at = open_page("run", run=run.id)
    assert not any("No output of this run was checked" in w.value for w in at.warning)
    assert any("No output checked yet" in i.value for i in at.info)


def test_the_self_hosted_dashboard_shows_no_deploy_menu():
    import tomllib
    from pathlib import Path

    config = tomllib.loads((Path(__file__).resolve().parent.parent / ".streamlit" / "config.toml").read_text())
    assert config["client"]["toolbarMode"] == "viewer"


def test_archiving_redraws_the_banner_at_once_and_keeps_the_message(app_db):
    at = open_page("run", run=1)
    at.button(key="t_archive").click().run()
    assert any("This run is archived" in i.value for i in at.info)
    assert any(s.value == "Archived." for s in at.success)
    assert at.button(key="t_archive").label == "Unarchive"


def test_a_run_that_finished_since_the_page_was_drawn_offers_no_cancel(app_db):
    run = app_db.create_run("soon done", {"bench": {"modes": ["target"]}}, "embedded", None, 2, status="queued")
    at = open_page("run", run=run.id)
    assert any(e.label == "Cancel" for e in at.expander)
    app_db.set_status(run.id, "done")
    at.run()
    assert not any(e.label == "Cancel" for e in at.expander)


def test_warm_up_requests_are_counted_openly_on_the_run_page(app_db):
    import random

    from helpers import app_record

    app_db.add_requests(
        [
            app_record(1, 100 + i, mode, k, random.Random(i), warmup=True)
            for i, (mode, k) in enumerate((("target", 0), ("model_4", 4), ("bandit", 4)))
        ]
    )
    at = open_page("run", run=1)
    assert any("plus 3 warm-up requests (one per mode" in t.value for t in at.text)


def _walk(spec, key):
    """Every value of ``key`` anywhere in a Vega-Lite spec."""
    if isinstance(spec, dict):
        return ([spec[key]] if key in spec else []) + [v for x in spec.values() for v in _walk(x, key)]
    if isinstance(spec, list):
        return [v for x in spec for v in _walk(x, key)]
    return []


def test_run_page_charts_have_room_whole_number_decision_axes_and_dashes_in_the_legend(app_db):
    at = open_page("run", run=1)
    specs = charts(at)
    heights = [h for sp in specs for h in _walk(sp, "height") if isinstance(h, (int, float))]
    assert heights and min(heights) >= 160
    assert any(a.get("tickMinStep") == 1 for sp in specs for a in _walk(sp, "axis") if isinstance(a, dict))
    assert any(
        leg.get("symbolType") == "stroke" for sp in specs for leg in _walk(sp, "legend") if isinstance(leg, dict)
    )


def test_a_run_without_a_draft_model_never_shows_none(app_db):
    import random

    from helpers import app_record

    run = app_db.create_run("free", {"bench": {"modes": ["target", "ngram_4"]}}, "embedded", None, 2, status="done")
    app_db.add_requests(
        [app_record(run.id, i, m, k, random.Random(i)) for i, (m, k) in enumerate((("target", 0), ("ngram_4", 4)))]
    )
    at = open_page("run", run=run.id)
    assert not any("None" in t.value for t in at.text)
    assert any("draft none" in t.value for t in at.text)


def test_compare_warns_when_the_series_ran_other_prompts_or_token_budgets(app_db):
    from db.models import Run

    with app_db.session_scope() as s:
        run = s.get(Run, 2)
        run.config = {
            **run.config,
            "bench": {**run.config["bench"], "prompts": "spec-bench-test", "max_new_tokens": 16},
        }
    at = open_page("compare", series="1:model_4,2:model_4")
    warning = " ".join(w.value for w in at.warning)
    assert "differ in prompts, max new tokens" in warning and "bench." not in warning  # in words
    assert not any("differ in" in w.value for w in open_page("compare", series="1:target,1:model_4").warning)


def test_compare_draws_one_acceptance_curve_per_arm_of_a_bandit_series(app_db):
    from apptest import chart_frames

    at = open_page("compare", series="1:model_4,1:bandit")
    arms = {
        a
        for i in range(len(at.get("vega_lite_chart")))
        for frame in chart_frames(at, i)
        if {"arm", "kind"} <= set(frame.columns)
        for a in frame["arm"]
    }
    assert "1:model_4 (model)" in arms and any(a.startswith("1:bandit (model) ") for a in arms)
    assert "1:bandit (model)" not in arms  # never one zig-zag curve over several arms
    caption = " ".join(c.value for c in at.caption if "Fitted a" in c.value)  # after the definitions note
    assert "1:bandit (model) bandit k=2" in caption and "1:bandit (model) bandit k=4" in caption


def test_compare_names_the_drafter_each_series_used_not_the_runs_drafter_flag(app_db):
    """A suffix_4 series of a run started with --drafter ngram drafted with suffix trees: the label and the
    settings diff say suffix (before: the diff said bench.drafter: ngram and the label said nothing)."""
    from db.models import Run

    with app_db.session_scope() as s:
        run = s.get(Run, 2)
        run.config = {**run.config, "bench": {**run.config["bench"], "drafter": "ngram"}}
    app_db.add_requests([app_record(2, 100 + i, "suffix_4", 4, random.Random(i)) for i in range(3)])
    at = open_page("compare", series="1:model_4,2:suffix_4")
    verdict = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    assert set(verdict["series"]) == {"2:suffix_4 (suffix)"}
    assert any(h.value == "Series against the baseline, 1:model_4 (model)" for h in at.subheader)
    diff = next(d.value for d in at.dataframe if "setting" in d.value.columns)
    assert diff.set_index("setting").loc["drafter"].tolist() == ["model", "suffix"]
    assert "bench.drafter" not in set(diff["setting"]) and "drafter" in set(diff["setting"])


def test_a_baseline_pinned_on_unlike_runs_is_compared_with_a_warning_naming_the_difference(app_db):
    from db.models import Run

    app_db.set_baseline(1)
    with app_db.session_scope() as s:
        run = s.get(Run, 2)
        run.config = {**run.config, "bench": {**run.config["bench"], "max_new_tokens": 16}}
    warning = " ".join(w.value for w in open_page("run", run=2).warning)
    assert "max new tokens 64 there, 16 here" in warning and "not a verdict on the drafter" in warning
    with app_db.session_scope() as s:
        run = s.get(Run, 2)
        run.config = {**run.config, "bench": {**run.config["bench"], "max_new_tokens": 64}}
    assert not any("baseline run #1 differ" in w.value for w in open_page("run", run=2).warning)


def test_the_settings_that_differ_read_as_words_with_no_none():
    """Compare's settings table once showed `bench.limit_per_column` and a literal `None` at 1280 px."""
    from app.likeness import shown, words

    assert words("bench.limit_per_column") == "limit per column" and words("environment.cpu") == "environment · cpu"
    assert shown(None) == "not set" and shown(12) == "12"


def test_compare_says_why_a_series_has_no_speedup_and_its_too_few_verdict_is_short(app_db):
    """A series whose run has a target mode but no prompt both modes answered read "no reference mode in this run",
    which was untrue; and the too-few verdict was cut at 1280 px ("too few requests (ne")."""
    from engine.analysis.compare import TOO_FEW

    bench = {"modes": ["target", "model_4"], "prompts": "humaneval-test", "drafter": "model", "max_new_tokens": 64}
    run = app_db.create_run("one each", {"bench": bench}, "embedded", "embedded", 2, status="done")
    rng = random.Random(0)
    app_db.add_requests([app_record(run.id, 0, "target", 0, rng), app_record(run.id, 1, "model_4", 4, rng)])
    at = open_page("compare", series=f"1:model_4,{run.id}:model_4")
    assert not at.exception, [e.value for e in at.exception]
    speedups = next(d.value for d in at.dataframe if "95% CI and n" in d.value.columns)
    assert speedups["95% CI and n"].tolist()[1] == "no prompt of it paired with the reference"
    verdicts = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
    assert set(verdicts["verdict"]) == {TOO_FEW} and len(TOO_FEW) <= len("not significant")
