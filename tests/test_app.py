"""Every dashboard page through AppTest, on a database made through the store."""

from __future__ import annotations

import json
import random
import re

import pytest
from apptest import chart_frames, charts, open_page
from helpers import BREAKOUT, XSS, app_record, build_db, migrated
from streamlit.testing.v1 import AppTest

from db.store import Store, safe_url
from engine.bench.config import validate
from engine.bench.report import summaries
from engine.catalog import SMOLLM2_EAGLE3

pytestmark = pytest.mark.pages  # renders dashboard pages through AppTest: its own loop, -m pages

PAGES = ["runs", "run", "breakeven", "compare", "policies", "requests", "new_run", "regressions", "sweeps"]


def fields(spec) -> set[str]:
    out = set()
    if isinstance(spec, dict):
        if "field" in spec and isinstance(spec["field"], str):
            out.add(spec["field"])
        for v in spec.values():
            out |= fields(v)
    elif isinstance(spec, list):
        for v in spec:
            out |= fields(v)
    return out


TITLES = {
    "runs": "Runs",
    "run": "Run",
    "breakeven": "Break-even",
    "compare": "Compare",
    "policies": "Policies",
    "requests": "Requests",
    "new_run": "New run",
    "regressions": "Regressions",
    "sweeps": "Sweeps",
}


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_on_an_empty_database_and_says_what_to_do(tmp_path, monkeypatch, page):
    monkeypatch.setenv("PHOENIX_DB", f"sqlite:///{tmp_path / 'empty.db'}")
    at = open_page(page)
    assert at.title[0].value == TITLES[page]
    said = [e.value for e in (*at.info, *at.caption, *at.markdown, *at.warning)]
    assert page in ("breakeven", "new_run") or any("No runs yet" in s for s in said), said


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_run_1_of_a_recorded_database_with_its_data(app_db, page):
    at = open_page(page, run=1)
    assert at.title[0].value == TITLES[page]
    tables = [d.value for d in at.dataframe]
    shown = {
        "runs": lambda: sorted(tables[0]["id"]) == [1, 2],
        "run": lambda: len([m for m in at.metric if m.label == "tokens/sec"]) == 3,  # target, model_4, bandit
        "breakeven": lambda: charts(at) and any("verify cost" in t.columns for t in tables),
        "compare": lambda: any("metric" in t.columns for t in tables),
        "policies": lambda: set(tables[0]["mode"]) == {"target", "model_4", "bandit"},
        "requests": lambda: len(tables) > 0 and len(tables[0]) > 0,
        "new_run": lambda: any(b.label == "Queue run" for b in at.button),
        "regressions": lambda: len(tables) == 1 and {"verdict", "figure", "runs"} <= set(tables[0].columns),
        "sweeps": lambda: any("No runs yet" in i.value for i in at.info),  # build_db holds lab runs, no load sweep
    }[page]
    assert shown(), page


def test_empty_install_explains_and_its_demo_button_queues_a_run_and_opens_it(tmp_path, monkeypatch):
    from app import actions

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    monkeypatch.setenv("PHOENIX_DB", url)
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    at = open_page("runs")
    assert "No runs yet" in at.info[0].value
    assert "python -m engine bench" in at.code[0].value
    at.button(key="empty_demo").click().run()
    assert not at.exception
    runs = Store(url).list_runs()
    demo = actions.demo_config()
    assert [(r.status, r.config["bench"]["limit"], r.config["bench"]["modes"]) for r in runs] == [
        ("queued", 8, demo.modes)
    ]
    # the page it was queued from never says "No runs yet" beside the queued run: it opens the run
    assert at.title[0].value == "Run" and not any("No runs yet" in i.value for i in at.info)
    assert at.query_params["run"] in (str(runs[0].id), [str(runs[0].id)])


def test_the_real_pair_demo_leads_with_drafters_that_pay_there_not_the_draft_model_at_k4(monkeypatch):
    """Where the head is built the demo runs it with the model-free drafters; without it, the draft model at its
    best k (model_1, 1.24x in run #1) instead of k = 4 (0.55x)."""
    from app import actions, form

    for head in (True, False):  # the draft model is here; the head is or is not
        monkeypatch.setattr(form, "present", lambda name, role="target", head=head: head or name != SMOLLM2_EAGLE3)
        cfg = actions.demo_config(real=True)
        assert cfg.target == "smollm2" and "model_4" not in cfg.modes and "bandit" not in cfg.modes
        assert cfg.draft == ("smollm2-eagle3" if head else "smollm2-draft")
        assert ("eagle3_3" in cfg.modes) == head and ("model_1" in cfg.modes) != head
        assert {"target", "suffix_16", "ngram_8"} <= set(cfg.modes)
        validate(cfg)


def test_run_page_kpis_equal_what_the_store_computes(app_db):
    at = open_page("run", run=1)
    expected = {m.mode: m for m in summaries(app_db, 1)}
    tps = [m.value for m in at.metric if m.label == "tokens/sec"]
    assert tps == [f"{expected[mode].tokens_per_s:.2f}" for mode in ("target", "model_4", "bandit")]
    speed = [m.value for m in at.metric if m.label == "x target"]
    assert speed[1] == f"{expected['model_4'].speedup.median:.2f}x" and expected["model_4"].speedup.n > 1


def test_run_page_charts_carry_the_expected_fields(app_db):
    specs = charts(open_page("run", run=1))
    assert len(specs) == 5
    assert {"position", "rate", "arm", "kind"} <= fields(specs[0])
    assert {"tokens_per_s", "trace"} <= fields(specs[1])
    assert {"seconds_per_request", "part"} <= fields(specs[2])
    assert {"chosen_k", "signal", "value", "mean_reward"} <= fields(specs[3])
    assert "latency_s" in fields(specs[4])


def test_acceptance_chart_data_holds_the_unconditional_rate(app_db):
    df = chart_frames(open_page("run", run=1), 0)[0]
    row = df[(df["arm"] == "model_4") & (df["kind"] == "unconditional (vLLM)") & (df["position"] == 2)]
    # every model_4 request proposes 12 per position and accepts 12, 9, 6, 3
    assert row["rate"].tolist() == [pytest.approx(9 / 12)]
    fit = df[(df["arm"] == "model_4") & (df["kind"] == "fit a^(i+1)")].sort_values("position")
    assert 0.6 < fit["rate"].iloc[0] < 1.0


def test_query_params_round_trip_to_the_same_view(app_db):
    at = open_page("run", as_link=True, run=2)
    assert at.selectbox(key="pick_run").value == 2
    assert at.query_params["run"] == ["2"] or at.query_params["run"] == "2"
    at = open_page("requests", as_link=True, run=2, mode="model_4", identical="no")
    assert at.selectbox(key="r_mode").value == "model_4"
    requests_table = next(d.value for d in at.dataframe if "latency_s" in d.value.columns)
    assert len(requests_table) == 1 and requests_table["diverged_at"].tolist() == [17]  # the one forced mismatch


def test_a_divergence_stands_out_with_its_position(app_db):
    at = open_page("run", run=2)
    assert any("DIVERGENCE" in e.value for e in at.error)
    bad = at.dataframe[0].value
    assert bad["diverged_at"].tolist() == [17]
    assert any("identical to target-only" in s.value for s in open_page("run", run=1).success)


def test_request_text_is_shown_as_code_never_as_html(app_db):
    at = open_page("requests", run=1)
    assert any(XSS in c.value for c in at.code)
    assert not any(XSS in m.value for m in at.markdown)
    assert not at.get("html")


def test_without_sentry_the_trace_id_is_shown_instead_of_a_dead_link(app_db, monkeypatch):
    at = open_page("requests", run=1)
    assert any("trace id:" in c.value for c in at.caption)
    monkeypatch.setenv("PHOENIX_SENTRY_WEB", "https://myorg.sentry.io")
    at = open_page("requests", run=1)
    df = at.dataframe[0].value
    assert df["trace"].iloc[0] == f"https://myorg.sentry.io/explore/traces/trace/{df['trace_id'].iloc[0]}"


def test_compare_gives_welch_p_values_and_a_verdict(app_db):
    at = open_page("compare", series="1:target,1:model_4", alpha="0.05")
    table = next(d.value for d in at.dataframe if "metric" in d.value.columns)
    assert set(table["metric"]) == {"tokens/s", "latency (s)"}  # no acceptance row: target-only drafts nothing
    assert table["verdict"].isin(["significant", "not significant"]).all()
    assert (table["p-value"] < 0.05).all()  # 2.0 s vs 1.4 s latency over 10 requests each


def test_breakeven_fits_a_and_c_from_a_run(app_db):
    at = open_page("breakeven", run=1)
    assert any("Fitted a =" in c.value for c in at.caption)
    assert len(charts(at)) == 1


def test_breakeven_uses_the_verify_cost_each_arm_measured(app_db):
    rows = app_db.requests(1)
    arm = {
        "target": [r for r in rows if r.mode == "target"],
        4: [r for r in rows if r.k == 4],
    }  # an arm is a k: the bandit's requests at that k count too
    per_pass = {m: sum(r.verify_s for r in rs) / sum(r.passes for r in rs) for m, rs in arm.items()}
    at = open_page("breakeven", run=1)
    table = next(d.value for d in at.dataframe if "verify cost" in d.value.columns).set_index("arm")
    assert table.loc["model_4", "verify cost"] == pytest.approx(per_pass[4] / per_pass["target"])
    assert table.loc["bandit k=4", "verify cost"] == table.loc["model_4", "verify cost"]  # a cost of the width
    # k = 0 is target-only itself: a verify of one token costs one step by definition, and a bandit's k = 0
    # requests are not pooled into it
    assert table.loc["target", "verify cost"] == 1.0 and table.loc["target", "measured speedup"] == 1.0
    run_page = {m.mode: m.speedup.median for m in summaries(app_db, 1)}
    assert table.loc["model_4", "measured speedup"] == run_page["model_4"]  # the one speedup, per arm
    assert "predicted, measured V(k+1)" in json.dumps(charts(at))


@pytest.mark.parametrize("hostile", ["'; DROP TABLE runs; --", "%", "_", '" OR 1=1 --'])
def test_filters_reach_sql_as_bound_parameters(app_db, hostile):
    at = open_page("runs", name=hostile)
    assert any("No run matches" in w.value for w in at.warning)
    assert len(app_db.list_runs()) == 2


def test_policies_page_measures_each_policy_against_the_best_fixed_arm(app_db):
    at = open_page("policies", run=1)
    table = at.dataframe[0].value.set_index("mode")
    rows = [r for r in app_db.requests(1)]
    tps = {m: [r.tokens_per_s for r in rows if r.mode == m] for m in ("target", "model_4", "bandit")}
    best = max(("target", "model_4"), key=lambda m: sum(tps[m]) / len(tps[m]))
    assert best == "model_4"  # 1.4 s against 2.0 s per request
    assert table.loc["model_4", "verdict"] == "best fixed arm"
    share = (sum(tps["bandit"]) / 10) / (sum(tps["model_4"]) / 10)
    shown = table.loc["bandit", "share of best fixed (95% CI)"]  # the ratio with its interval, in one cell
    assert float(shown.split(" ")[0]) == pytest.approx(share, abs=5e-4) and re.search(r"\(\d\.\d\d-\d\.\d\d\)", shown)
    assert table.loc["bandit", "verdict"] in ("significant", "not significant")
    assert 0 < float(table.loc["bandit", "p-value"]) < 1 and table.loc["bandit", "n"] == 10
    assert table.loc["model_4", "p-value"] == "–"  # the best arm against itself: a dash, never None
    curves = chart_frames(at, 0)[0]
    ref = {}
    for r in rows:
        if r.mode == "model_4":
            ref.setdefault(r.prompt_id, []).append(r.tokens_per_s)
    expected = sum(sum(ref[b.prompt_id]) / len(ref[b.prompt_id]) - b.tokens_per_s for b in rows if b.mode == "bandit")
    assert curves["cumulative regret"].iloc[-1] == pytest.approx(expected)
    assert any("Best fixed arm in hindsight (the highest speedup): model_4" in c.value for c in at.caption)


def test_a_distillations_before_and_after_runs_link_to_each_other(app_db):

    job = app_db.create_distill({"distill": {"draft": "embedded", "eval_ks": "4"}}, "models/x-distilled")
    app_db.set_distill_fields(job.id, before_run_id=1, after_run_id=2, losses=[2.5, 1.25], status="done")
    at = open_page("run", run=1)
    assert any("before evaluation of distillation #1" in t.value for t in at.text)
    before = " ".join(m.value for m in at.markdown)
    assert "run?run=2" in before and "compare?series=1:model_4,2:model_4" in before
    at = open_page("run", run=2)
    assert "run?run=1" in " ".join(m.value for m in at.markdown)
    assert any("2.500 → 1.250" in c.value for c in at.caption)


def test_a_vllm_sweep_run_shows_throughput_and_acceptance_by_concurrency(tmp_path, monkeypatch):
    from fake_vllm import FakeVllm

    from engine.engines.config import SweepConfig
    from engine.engines.record import sweep

    url = f"sqlite:///{tmp_path / 'v.db'}"
    migrated(url)
    monkeypatch.setenv("PHOENIX_DB", url)
    server = FakeVllm()
    try:
        path = tmp_path / "p.jsonl"
        path.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"q {i}"}) + "\n" for i in range(3)))
        run_id = sweep(
            Store(url), SweepConfig(url=server.url, model=server.model, prompts=str(path), concurrency="1,2")
        )
    finally:
        server.stop()
    at = open_page("run", run=run_id)
    frames = [f for i in range(len(at.get("vega_lite_chart"))) for f in chart_frames(at, i)]
    sweep_df = next(f for f in frames if "metric" in f.columns and "concurrency" in f.columns)
    assert set(sweep_df["metric"]) == {"throughput (tok/s)", "acceptance", "mean acceptance length"}
    assert sorted(sweep_df["concurrency"].unique()) == [1, 2]


def test_the_form_names_the_real_pair_with_its_size_and_whether_it_is_here(tmp_path, monkeypatch):
    import engine.catalog as catalog

    monkeypatch.setenv("PHOENIX_DB", f"sqlite:///{tmp_path / 'f.db'}")
    monkeypatch.setitem(
        catalog.NAMED,
        "smollm2",
        catalog.Named(
            "smollm2", tmp_path / "absent", "SmolLM2-135M-Instruct", "python -m engine zoo fetch smollm2", 517
        ),
    )
    at = open_page("new_run")
    box = at.selectbox(key="n_target")
    assert "smollm2 (target, 517 MB) · not here: fetched first" in box.options  # short: no label is cut
    assert "**smollm2**: SmolLM2-135M-Instruct" in box.help


@pytest.mark.parametrize("pair_here,target", [(True, "smollm2"), (False, "embedded")])
def test_the_quick_demo_uses_the_real_pair_once_it_is_here(monkeypatch, pair_here, target):
    from app import actions, form

    monkeypatch.setattr(form, "present", lambda name, role="target": pair_here)
    cfg = actions.demo_config()
    assert (cfg.target, cfg.limit, cfg.max_new_tokens) == (target, 8, 64)
    assert actions.demo_config(real=True).target == "smollm2"


def test_until_the_real_pair_is_here_a_second_demo_fetches_it_first(tmp_path, monkeypatch):

    url = f"sqlite:///{tmp_path / 'empty.db'}"
    monkeypatch.setenv("PHOENIX_DB", url)
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    from app import form

    monkeypatch.setattr(form, "present", lambda name, role="target": name == "embedded")
    at = open_page("runs")
    assert "fetches SmolLM2-135M first" in at.button(key="empty_demo_real").label
    at.button(key="empty_demo_real").click().run()
    assert not at.exception
    (run,) = Store(url).list_runs()
    # nothing builds a draft on a fresh machine: the demo the worker fetches the target for needs no draft
    assert (run.target, run.draft, run.status) == ("smollm2", None, "queued")
    assert run.config["bench"]["modes"] == ["target", "suffix_16", "ngram_8"]


def test_once_the_real_pair_is_here_the_embedded_demo_is_still_offered(tmp_path, monkeypatch):
    """Issue 58's walk: the README promises an embedded-pair demo, but a machine with SmolLM2 offered only the real
    pair's (minutes where the embedded one takes seconds)."""
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    monkeypatch.setenv("PHOENIX_DB", url)
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    from app import form

    monkeypatch.setattr(form, "present", lambda name, role="target": True)
    at = open_page("runs")
    assert "embedded pair" in at.button(key="empty_demo_embedded").label
    assert "smollm2" in at.button(key="empty_demo").label.lower()
    at.button(key="empty_demo_embedded").click().run()
    (run,) = Store(url).list_runs()
    assert (run.target, run.status) == ("embedded", "queued")


def test_a_missing_fetchable_target_passes_the_form_checks(monkeypatch, tmp_path):
    import engine.catalog as catalog
    from app import actions
    from engine.bench.config import BenchConfig

    monkeypatch.setitem(
        catalog.NAMED, "smollm2", catalog.Named("smollm2", tmp_path / "absent", "SmolLM2", "fetch", 517)
    )
    monkeypatch.setattr(actions, "present", catalog.present)
    cfg = BenchConfig(target="smollm2", draft=None, drafter="ngram", modes=["target", "ngram_4"], limit=2)
    assert actions.field_checks(cfg, "0,2,4") == {}


def markdown_like(at: AppTest) -> list[str]:
    """Every element whose text Streamlit interprets as Markdown."""
    return [e.value for kind in ("markdown", "caption", "info", "error", "warning", "success") for e in at.get(kind)]


def test_user_text_with_a_markdown_breakout_is_shown_literally_on_the_run_and_requests_pages(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'breakout.db'}"
    migrated(url)
    store = Store(url)
    run = store.create_run(
        "breakout",
        {"bench": {"modes": ["model_4"], "drafter": "model", "prompt_format": BREAKOUT}},
        BREAKOUT,
        BREAKOUT,
        1,
        status="done",
    )
    record = app_record(run.id, 0, "model_4", 4, random.Random(0))
    record.prompt_id = BREAKOUT
    store.add_requests([record])
    monkeypatch.setenv("PHOENIX_DB", url)
    for page in ("run", "requests"):
        at = open_page(page, run=run.id)
        assert not any("evil.example" in text for text in markdown_like(at)), page
        assert any("evil.example" in t.value for t in at.text), page


def test_a_field_error_quoting_user_input_is_literal_text(app_db, monkeypatch):
    at = open_page("new_run")
    at.text_input(key="n_arms").input(BREAKOUT)  # its message quotes what was typed
    at.get("form_submit_button")[0].click()
    at.run()
    assert any("Not accepted" in e.value for e in at.error)
    assert any("evil.example" in c.value for c in at.code)
    assert not any("evil.example" in text for text in markdown_like(at))


@pytest.mark.parametrize(
    "page, params",
    [
        ("requests", {"run": 1, "arm": "²"}),
        ("requests", {"run": 1, "arm": "٣"}),
        ("requests", {"run": 1, "arm": str(2**70)}),
        ("requests", {"run": 1, "arm": "-1"}),
        ("breakeven", {"k": "²"}),
        ("breakeven", {"k": "999"}),
        ("breakeven", {"a": "nan", "c": "inf"}),
        ("breakeven", {"run": str(2**70)}),
        ("run", {"run": "²"}),
        ("run", {"run": str(2**70)}),
        ("policies", {"run": "x"}),
        ("compare", {"series": "²:model_4,1:nope"}),
    ],
)
def test_hostile_query_parameters_never_raise(app_db, page, params):
    open_page(page, **params)  # open_page asserts no exception was rendered


@pytest.mark.parametrize("page", ["run", "requests", "policies"])
def test_a_run_that_does_not_exist_is_said_not_found_instead_of_showing_another(app_db, page):
    at = open_page(page, run=99)
    assert any("Run #99 was not found" in e.value for e in at.error)
    assert at.selectbox(key="pick_run").value is None
    assert not at.get("vega_lite_chart")


@pytest.mark.parametrize("kind", ["not_sqlite", "corrupt", "unknown_scheme", "unknown_revision"])
def test_every_page_says_what_is_wrong_with_an_unusable_database(tmp_path, monkeypatch, kind):
    import sqlite3

    path = tmp_path / "bad.db"
    if kind == "not_sqlite":
        path.write_text("hello")
    elif kind == "corrupt":
        path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)
    elif kind == "unknown_revision":
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
            conn.execute("INSERT INTO alembic_version VALUES ('f00dcafe')")
    monkeypatch.setenv("PHOENIX_DB", "nosuch://x/y" if kind == "unknown_scheme" else f"sqlite:///{path}")
    for page in PAGES:
        at = open_page(page)
        assert [e.value for e in at.error] == ["The database cannot be used:"], page
        assert at.code and at.code[0].value


@pytest.mark.parametrize(
    "field, key", [("target", "n_target_typed"), ("draft", "n_draft_typed"), ("prompts", "n_prompts_file")]
)
def test_the_form_reads_only_inside_its_roots_and_never_tells_which_files_exist(app_db, tmp_path, field, key):
    answers = []
    for path in ("/etc/passwd", "/no/such/file", str(tmp_path / "app.db"), "../../etc/hostname"):
        at = open_page("new_run")
        if field != "prompts":
            at.selectbox(key=f"n_{field}").set_value("other…")
        at.text_input(key=key).input(path)
        at.get("form_submit_button")[0].click()
        at.run()
        answers.append(sorted(c.value for c in at.code))
    assert all("must lie inside models/, data/" in " ".join(a) for a in answers)
    assert all(a == answers[0] for a in answers)  # one message, whatever is there


def test_an_adaptive_drafters_run_shows_its_draft_lengths_and_the_share_of_empty_passes(tmp_path, monkeypatch):
    from db.entities import PositionCount

    url = f"sqlite:///{tmp_path / 'suffix.db'}"
    migrated(url)
    store = Store(url)
    run = store.create_run(
        "suffix", {"bench": {"modes": ["target", "suffix_4"], "drafter": "model"}}, "t", None, 2, status="done"
    )
    rng = random.Random(0)
    rec = app_record(run.id, 0, "suffix_4", 4, rng)
    # 10 passes: 4 drafted nothing, 3 drafted one token, 2 drafted three, 1 drafted four
    rec.passes, rec.proposed = 10, 3 + 6 + 4
    rec.positions = [
        PositionCount(0, 6, 5, 6),
        PositionCount(1, 3, 2, 3),
        PositionCount(2, 3, 1, 2),
        PositionCount(3, 1, 0, 1),
    ]
    store.add_requests([app_record(run.id, 1, "target", 0, rng), rec])
    monkeypatch.setenv("PHOENIX_DB", url)
    at = open_page("run", run=run.id)
    index = next(i for i, sp in enumerate(charts(at)) if "draft length" in json.dumps(sp))
    bars = chart_frames(at, index)[0]
    assert list(zip(bars["draft length"], bars["passes"])) == [(0, 4), (1, 3), (2, 0), (3, 2), (4, 1)]
    assert any("proposed nothing: suffix_4 40.0% (4 of 10)" in c.value for c in at.caption)


@pytest.mark.parametrize("page, key", [("runs", "name"), ("runs", "model"), ("requests", "q")])
def test_a_free_text_filter_longer_than_sqlites_like_limit_is_cut_not_an_error(app_db, page, key):
    at = open_page(page, run=1, **{key: "%" * 60_000})  # open_page asserts no exception was rendered
    assert not at.error or all("LIKE" not in e.value for e in at.error)


@pytest.mark.parametrize(
    "typed, says",
    [
        ("", "you chose other…; type a model folder"),
        ("models/no-such-draft", "there is no models/no-such-draft in this project"),
    ],
)
def test_the_form_says_what_is_wrong_with_a_typed_model_and_where_to_put_it(app_db, typed, says):
    at = open_page("new_run")
    at.selectbox(key="n_draft").set_value("other…")
    at.text_input(key="n_draft_typed").input(typed)
    at.get("form_submit_button")[0].click()
    at.run()
    text = " ".join(c.value for c in at.code) + " ".join(e.value for e in at.error)
    assert says in text and "hf download" not in text and "must lie inside" not in text


def test_the_prompt_file_message_says_where_relative_paths_start(app_db):
    at = open_page("new_run")
    at.text_input(key="n_prompts_file").input("/etc/passwd")
    at.get("form_submit_button")[0].click()
    at.run()
    assert any("a relative path starts at the project folder" in c.value for c in at.code)


def test_the_demo_buttons_stay_on_the_home_page_once_runs_exist(app_db):
    at = open_page("runs")
    assert at.button(key="more_demo").label.startswith("Quick demo")


def test_every_kpi_speedup_and_acceptance_carries_n_and_an_interval(app_db):
    at = open_page("run", run=1)
    expected = {m.mode: m for m in summaries(app_db, 1)}
    m = expected["model_4"]
    line = next(c.value for c in at.caption if c.value.startswith("x target"))
    assert f"95% CI {m.speedup.low:.2f}-{m.speedup.high:.2f}, n={m.speedup.n}" in line
    lo, hi = m.acceptance_ci
    assert f"{m.accepted:,} of {m.proposed:,} drafted tokens, 95% CI {lo:.1%}-{hi:.1%} (Wilson)" in line
    assert [t.value for t in at.text if t.value.startswith("model_4 · n = ")] == [f"model_4 · n = {m.n} requests"]


def test_acceptance_points_carry_wilson_intervals_and_thin_points_are_drawn_hollow(app_db):
    at = open_page("run", run=1)
    df = chart_frames(at, 0)[0]
    rates = df[df["kind"] != "fit a^(i+1)"]
    assert {"n", "low", "high"} <= set(df.columns)
    assert ((rates["low"] <= rates["rate"] + 1e-9) & (rates["rate"] <= rates["high"] + 1e-9)).all()
    spec = json.dumps(charts(at)[0])
    assert "datum.n < 5" in spec and '"filled": false' in spec
    assert any(
        "hollow points rest on fewer than 5 passes" in c.value and "(a + a^2 + ... + a^k) / k" in c.value
        for c in at.caption
    )


def _fixed_domains(spec) -> list[tuple[str, float, float]]:
    """(field, low, high) for every encoding in a Vega-Lite spec whose scale names a numeric domain."""
    out = []
    if isinstance(spec, dict):
        domain = (spec.get("scale") or {}).get("domain") if isinstance(spec.get("scale"), dict) else None
        if "field" in spec and isinstance(domain, list) and all(isinstance(v, (int, float)) for v in domain):
            out.append((spec["field"], float(domain[0]), float(domain[-1])))
        for value in spec.values():
            out += _fixed_domains(value)
    elif isinstance(spec, list):
        for value in spec:
            out += _fixed_domains(value)
    return out


@pytest.fixture(scope="module")
def bad_counter_db(tmp_path_factory):
    """A recorded database where one request's counter says more accepted than proposed tokens."""
    from db.entities import PositionCount

    url = f"sqlite:///{tmp_path_factory.mktemp('bad') / 'bad.db'}"
    store = build_db(url)
    rec = app_record(1, 1000, "model_4", 4, random.Random(1))
    rec.positions = [PositionCount(0, 2, 5, 2)] + rec.positions[1:]
    store.add_requests([rec])
    return url


@pytest.mark.parametrize("page", ["run", "compare", "policies", "breakeven"])
def test_no_chart_clips_a_value_outside_its_fixed_axis(bad_counter_db, monkeypatch, page):
    """A counter that reports more accepted than proposed tokens (a bug somewhere upstream) must show above 1,
    not vanish past the top of a 0-1 axis."""
    monkeypatch.setenv("PHOENIX_DB", bad_counter_db)
    at = open_page(page, run=1, series="1:model_4,1:bandit")
    checked = 0
    for i, spec in enumerate(charts(at)):
        frames = chart_frames(at, i)
        for field, low, high in _fixed_domains(spec):
            for frame in frames:
                if field in frame:
                    values = frame[field].dropna()
                    assert values.between(low, high).all(), f"{page}: {field} outside [{low}, {high}]"
                    checked += len(values)
    assert page not in ("run", "compare") or checked


def test_a_queued_run_shows_its_place_the_live_workers_an_eta_and_how_to_add_a_worker(app_db):

    busy = app_db.create_run("busy", {"bench": {}}, "embedded", "embedded", 30, status="queued")
    app_db.claim_next("elsewhere:42")  # a worker on another machine runs it now
    app_db.create_run("ahead", {"bench": {}}, "embedded", "embedded", 12, status="queued")
    mine = app_db.create_run("mine", {"bench": {}}, "embedded", "embedded", 6, status="queued")
    at = open_page("run", run=mine.id)
    info = " ".join(i.value for i in at.info)
    assert "Queued: number 2 in the queue (1 run ahead, 12 requests); 1 run in progress (30 requests left)" in info
    assert "Live workers: 1 (elsewhere:42)" in info and busy.id != mine.id
    q = app_db.queue_state(mine.id)
    eta = (12 + 30 + 6) * q.mean_request_s
    assert any(
        f"ETA: done in about {eta / 60:.0f} min ({eta:,.0f} s)" in c.value and "latest 60 measured" in c.value
        for c in at.caption
    )
    assert any("python -m engine worker" in c.value for c in at.code)


def test_a_queued_runs_eta_prices_the_runs_ahead_by_their_own_target_not_by_its_own(app_db):
    """Issue 58: a queued embedded-pair run behind a SmolLM2 run was priced at the embedded pair's 1.8 s a request,
    while SmolLM2's took about 40 s. A run ahead whose target was never measured here leaves the ETA unknown."""
    app_db.create_run("ahead", {"bench": {}}, "smollm2", None, 20, status="queued")
    mine = app_db.create_run("mine", {"bench": {}}, "embedded", "embedded", 6, status="queued")
    q = app_db.queue_state(mine.id)
    assert q.mean_request_s is not None and q.ahead_s is None and q.eta_s(6, 1) is None
    at = open_page("run", run=mine.id)
    assert any("a run ahead has a target with no measured request" in c.value for c in at.caption)


def test_a_queued_run_without_any_worker_says_nothing_will_run_and_gives_the_command(app_db):
    mine = app_db.create_run("mine", {"bench": {}}, "unmeasured", None, 6, status="queued")
    at = open_page("run", run=mine.id)
    assert any("No worker serves this database now" in w.value for w in at.warning)
    assert any("No ETA yet" in c.value for c in at.caption) and any("engine worker" in c.value for c in at.code)


def test_a_run_whose_target_only_timings_drift_warns_that_the_machine_was_busy(app_db):
    from db.models import Request

    assert not any("machine was busy" in w.value for w in open_page("run", run=1).warning)
    with app_db.session_scope() as s:
        for r in s.query(Request).filter(Request.run_id == 1, Request.mode == "target", Request.seq > 12):
            r.tokens_per_s = r.tokens_per_s / 3
    __import__("streamlit").cache_data.clear()  # the page reads through a 5 s cache; this test changed rows under it
    assert any("The machine was busy during this run" in w.value for w in open_page("run", run=1).warning)


def test_the_demos_bandit_gets_past_its_forced_first_tries():
    """Five prompts over five arms never left the forced tries, so the demo's bandit panels had nothing to show."""
    from app import actions
    from engine.policies.registry import make_policy

    cfg = actions.demo_config(real=False)
    policy = make_policy(cfg.policy, cfg.arms, cfg.seed)
    decisions = []
    for _ in range(cfg.limit):
        d = policy.choose()
        policy.update(d.arm, 10.0 + d.arm)
        decisions.append(d)
    assert sum(d.epsilon is not None and d.epsilon < 1.0 for d in decisions) >= 2


def test_a_bandit_that_only_explored_so_far_says_why_its_panels_are_thin(tmp_path, monkeypatch):
    from db.entities import BanditRecord

    url = f"sqlite:///{tmp_path / 'young.db'}"
    migrated(url)
    store = Store(url)
    run = store.create_run("young", {"bench": {"modes": ["bandit"]}}, "t", "d", 4, status="done")
    recs = []
    for t in range(4):
        rec = app_record(run.id, t, "bandit", [0, 2][t % 2], random.Random(t))
        rec.bandit = BanditRecord(
            t=t,
            epsilon=1.0,
            explored=True,
            chosen_k=rec.k,
            arm_means={"0": 30.0},
            arm_counts={"0": 1},
            reward=rec.tokens_per_s,
        )
        recs.append(rec)
    store.add_requests(recs)
    monkeypatch.setenv("PHOENIX_DB", url)
    assert any("All 4 decisions so far explored" in i.value for i in open_page("run", run=run.id).info)


def test_a_server_runs_reference_is_named_so_and_its_divergences_show_no_none(tmp_path, monkeypatch):
    """An `engines side-by-side` run: llamacpp-none_c1 is what every ratio is against, and a diverging server output
    (text, no token position, no trace) shows blanks, not Python's None."""
    url = f"sqlite:///{tmp_path / 'served.db'}"
    store = Store(migrated(url))
    run = store.create_run("served", {"engine": {"engine": "llamacpp"}}, "smollm2", None, 4, status="done")
    rng = random.Random(0)
    rows = [
        app_record(run.id, i, mode, 0, rng)
        for i, mode in enumerate(["llamacpp-none_c1", "llamacpp-ngram-simple_c1"] * 2)
    ]
    for r in rows:
        r.trace_id, r.identical = None, (None if r.mode == "llamacpp-none_c1" else r.seq != 3)
    store.add_requests(rows)
    monkeypatch.setenv("PHOENIX_DB", url)
    at = open_page("run", run=run.id)
    assert any(c.value.startswith("the reference: every x target") for c in at.caption)
    bad = next(d.value for d in at.dataframe if "diverged_at" in d.value.columns)
    assert len(bad) == 1 and not bad.isna().any().any() and "None" not in bad.astype(str).values


def test_after_resume_the_run_page_is_drawn_for_the_new_status_and_polls(app_db, monkeypatch):
    """It once stayed on the page drawn for the old status (no polling) until a reload."""
    monkeypatch.setenv("PHOENIX_OPERATOR_TOKEN", "t0ken")
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")  # a resumed run would get a worker of its own
    app_db.set_status(1, "cancelled")
    at = open_page("run", run=1)
    at.text_input(key="run_token").input("t0ken")
    at.button(key="run_action").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("queued to resume" in el.value for el in at.info)
    assert app_db.get_run(1).status == "queued"
    assert any("#1 · queued" in t.value for t in at.text)  # the header shows the status it now has


def test_a_demo_says_how_long_it_takes_before_it_starts(monkeypatch):
    from app import actions, form

    monkeypatch.setattr(form, "present", lambda name, role="target", head=True: True)
    real = actions.demo_length(actions.demo_config(real=True))
    assert real.startswith("32 requests after 4 untimed warm-ups, about ") and "min on a quiet 2-core CPU" in real
    embedded = actions.demo_length(actions.demo_config(real=False))
    assert embedded.startswith("24 requests after 3 untimed warm-ups, about 1 min")


def test_a_run_still_warming_up_says_so_rather_than_showing_a_stalled_count(app_db):
    from db.models import Run, utcnow

    with app_db.session_scope() as s:
        run = s.get(Run, 1)
        run.status, run.progress_done, run.heartbeat_at = "running", 0, utcnow()  # alive, nothing measured yet
    info = app_db.get_run(1)
    assert info.status == "running"
    warming = app_db.warmup_count(1) < len(info.config["bench"]["modes"])
    at = open_page("run", run=1)
    shown = any("Warming up: one untimed request per mode" in el.value for el in at.info)
    assert shown == warming


def test_a_served_run_names_its_drafter_and_says_while_rows_wait_in_a_spill_file(tmp_path, monkeypatch):
    """A server's Run page once said "the run's --drafter (model)" for `--drafter eagle3` and "7/0 requests"; and the
    recorder's held rows showed nowhere on the dashboard. Now: the server's drafter, "N requests", and a warning
    naming the spill file while one waits to be written."""
    from app import data
    from engine.record.spills import spill_path

    url = f"sqlite:///{tmp_path / 'served.db'}"
    store = Store(migrated(url))
    cfg = {"phoenix_serve": {"max_batch": 4, "drafter": "eagle3"}, "drafter": "eagle3"}
    run = store.create_run("phoenix serve eagle3", cfg, "smollm2", "smollm2-eagle3", 0, status="failed")
    rng = random.Random(0)
    store.add_requests([app_record(run.id, i, "phoenix-eagle3-auto_live", 3, rng) for i in range(7)], (run.id, 7))
    spill = spill_path(store, run.id)
    held = {"run_id": run.id, "seq": 9, "mode": "phoenix-eagle3-auto_live", "prompt_id": "p", "tokens_per_s": 1.0,
            "output_text": "", "output_sha256": ""}  # fmt: skip
    header = {"spill": 1, "database": safe_url(url), "run_id": run.id, "progress": 8}
    spill.write_text(json.dumps(header) + "\n" + json.dumps({"request": held}) + "\n")
    monkeypatch.setenv("PHOENIX_DB", url)
    at = open_page("run", run=run.id)
    assert not at.exception, [e.value for e in at.exception]
    page = " ".join(str(el.value) for el in [*at.markdown, *at.caption, *at.text, *at.subheader, *at.warning])
    assert "drafter eagle3" in page and "(model)" not in page and "7/0" not in page
    warned = [w.value for w in at.warning if "spill file" in w.value]
    assert warned and warned[0].startswith("1 answered requests of this run are not in the database yet")
    assert any(str(spill) == c.value for c in at.code)
    spill.unlink()  # written: the warning goes at the next read (cached reads last TTL seconds)
    data.changed()
    assert not any("spill file" in w.value for w in open_page("run", run=run.id).warning)


def test_every_status_and_label_on_the_run_page_is_the_current_one(app_db, monkeypatch):
    """Round five's stale states: "[queued]" in the selector beside a "cancelled" header; "add `target` mode" on a
    cancelled run that has one; "No worker serves this database... Live workers: 0" while the worker starts."""
    from engine.queue import autostart

    monkeypatch.setenv("PHOENIX_OPERATOR_TOKEN", "t0ken")
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    app_db.set_status(1, "cancelled")
    at = open_page("run", run=1)
    at.text_input(key="run_token").input("t0ken")
    at.button(key="run_action").click().run()
    label = next(o for o in at.selectbox(key="pick_run").options if o.startswith("#1 "))
    assert "[queued]" in label and "cancelled" not in label  # the selector says what the header says

    monkeypatch.setattr(autostart, "worker_pid", lambda data_dir, url: 4242)  # started, not yet registered
    at = open_page("run", run=1)
    assert any("A worker is starting for this database (pid 4242)" in i.value for i in at.info)
    assert not any("No worker serves this database" in w.value for w in at.warning)

    bench = {"modes": ["target", "model_4"], "prompts": "humaneval-test", "drafter": "model", "max_new_tokens": 64}
    run = app_db.create_run("never checked", {"bench": bench}, "embedded", "embedded", 4, status="cancelled")
    app_db.add_requests([app_record(run.id, 0, "model_4", 4, random.Random(0), identical=None)], (run.id, 1))
    at = open_page("run", run=run.id)
    warned = " ".join(w.value for w in at.warning)
    assert "it ended (cancelled) before any prompt had both" in warned and "add `target` mode" not in warned
