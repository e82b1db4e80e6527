"""The New run form as a newcomer meets it: it can queue every run the README's table cites (through "Run again"),
it says every bad field at once, refuses a drafter the draft cannot drive, remembers what was entered across pages,
and opens on the prompt set and pair the README measures."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest
from apptest import open_page
from helpers import ROOT, migrated

from app import form
from db.store import Store
from engine.bench.config import BenchConfig, stored
from engine.errors import PhoenixError

pytestmark = pytest.mark.pages  # renders dashboard pages through AppTest: its own loop, -m pages

# what makes two runs the same experiment: everything the worker reads, not the name
SAME = (
    "target",
    "draft",
    "drafter",
    "prompts",
    "limit",
    "limit_per_column",
    "max_new_tokens",
    "prompt_format",
    "dtype",
    "device",
    "modes",
    "arms",
    "drafter_arms",
    "policy",
    "granularity",
    "seed",
    "shadow_rate",
)


def readme_runs() -> dict[int, BenchConfig]:
    """The runs the README's results table links, with their stored configs from benchmarks/results.db."""
    table = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| ")]
    ids = sorted({int(n) for line in table for n in re.findall(r"\[#(\d+)\]\(docs/results\.md", line)})
    con = sqlite3.connect(ROOT / "benchmarks" / "results.db")
    out = {}
    for run_id in ids:
        config = json.loads(con.execute("select config from runs where id = ?", (run_id,)).fetchone()[0])
        if "bench" in config:  # the lab runs: a load level (the server table's) is no form's run
            out[run_id] = (config, stored(config))
    con.close()
    return out


def as_queued(cfg: BenchConfig) -> dict:
    return {key: getattr(cfg, key) for key in SAME}


def test_the_readme_table_cites_runs_the_form_can_hold(tmp_path):
    runs = readme_runs()
    assert len(runs) >= 4  # one per drafter row, HumanEval and Spec-Bench
    targets, drafts = ["embedded", "smollm2", form.OTHER], ["embedded", "smollm2-draft", "smollm2-eagle3", "none"]
    for run_id, (_, cfg) in runs.items():
        back = form.config_of(form.values_of(cfg, targets, drafts))
        assert as_queued(back) == as_queued(cfg), run_id


@pytest.fixture
def readme_db(tmp_path, monkeypatch):
    """A database holding the README's runs under their ids, and the real pair taken as here (the form's model
    checks are the store's, not this machine's)."""
    from app import actions

    url = f"sqlite:///{tmp_path / 'readme.db'}"
    migrated(url)
    store = Store(url)
    runs = readme_runs()
    for run_id in range(1, max(runs) + 1):
        config, cfg = runs.get(run_id, ({"bench": {"modes": ["target"]}}, None))
        store.create_run(f"run {run_id}", config, "smollm2", cfg.draft if cfg else None, 0, status="done")
    monkeypatch.setenv("PHOENIX_DB", url)
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    monkeypatch.setattr(actions, "resolve", lambda name, role: None)  # named models: the catalog says what they are
    return store, runs


def test_every_run_of_the_readme_table_can_be_queued_again_from_the_form(readme_db):
    store, runs = readme_db
    for run_id, (_, cfg) in runs.items():
        at = open_page("new_run", **{"from": run_id})
        assert any(f"Settings of run #{run_id}" in c.value for c in at.caption)
        assert at.multiselect(key="n_modes").value == cfg.modes
        queue(at)
        assert not at.exception and not at.error, (run_id, [e.value for e in at.error], [c.value for c in at.code])
        queued = store.list_runs()[0]
        assert queued.status == "queued" and queued.id > max(runs)
        assert as_queued(stored(queued.config)) == as_queued(cfg), run_id


def test_the_run_page_offers_to_run_again_with_the_runs_settings(app_db):
    at = open_page("run", run=1)
    links = [(el.proto.label, el.proto.page, el.proto.query_string) for el in at.get("page_link")]
    assert ("Run again with these settings", "new", "from=1") in links


def queue(at):
    next(b for b in at.button if b.label == "Queue run").click()
    return at.run()


def submit(at, **values):
    for key, value in values.items():
        widget = at.multiselect(key=key) if key == "n_modes" else None
        if widget is not None:
            widget.set_value(value)
        elif isinstance(value, str) and key in ("n_target", "n_draft", "n_prompts", "n_policy"):
            at.selectbox(key=key).set_value(value)
        else:
            at.text_input(key=key).set_value(value)
    return queue(at)


def test_every_bad_field_is_said_at_once_not_one_per_submit(app_db, monkeypatch):
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    at = open_page("new_run")
    submit(
        at,
        n_target=form.OTHER,
        n_target_typed="models/no-such-model",
        n_modes=["target", "model_99"],
        n_arms="0,2,x",
    )
    said = " ".join(c.value for c in at.code)
    assert "no models/no-such-model" in said  # the model id
    assert "mode 'model_99': k must be in 1..16" in said  # k out of range, in the same submit
    assert "arms must be comma-separated whole numbers" in said
    assert any(re.match(r"\d+ fields to fix", e.value) for e in at.error)
    assert app_db.list_runs()[0].name == "run-1"  # nothing queued


def test_an_eagle3_mode_with_a_draft_model_as_its_draft_is_refused_before_the_worker_fails(app_db, monkeypatch):
    from app import actions

    monkeypatch.setattr(actions, "resolve", lambda name, role: None)
    cfg = BenchConfig(target="smollm2", draft="smollm2-draft", modes=["target", "eagle3_3"], limit=2)
    errors = actions.field_checks(cfg, "0,2,4")
    assert "EAGLE-3 head" in errors["draft"]
    cfg = BenchConfig(target="smollm2", draft="smollm2-eagle3", drafter="eagle3", modes=["target", "eagle3_3"], limit=2)
    assert actions.field_checks(cfg, "0,2,4") == {}
    cfg = BenchConfig(target="smollm2", draft="smollm2-eagle3", modes=["target", "model_2"], limit=2)
    assert "need a draft model" in actions.field_checks(cfg, "0,2,4")["draft"]


def test_the_form_remembers_what_was_entered_after_a_visit_to_another_page(app_db, monkeypatch):
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    at = open_page("new_run")
    submit(at, n_modes=["target", "ngram_8"], n_name="my try", n_arms="0,1,x")  # refused: the arms
    assert at.error
    at.switch_page("views/runs.py").run()
    at.switch_page("views/new_run.py").run()
    assert at.multiselect(key="n_modes").value == ["target", "ngram_8"]
    assert at.text_input(key="n_name").value == "my try" and at.text_input(key="n_arms").value == "0,1,x"


def test_the_form_opens_on_the_readmes_prompt_set_and_the_real_pair_once_it_is_here(app_db, monkeypatch):
    at = open_page("new_run")
    assert at.selectbox(key="n_prompts").value == "humaneval-test"
    monkeypatch.setattr(form, "present", lambda name, role="target": True)
    cfg = form.starting_config()
    assert (cfg.target, cfg.draft, cfg.drafter) == ("smollm2", "smollm2-eagle3", "eagle3")
    assert "model_4" not in cfg.modes and "eagle3_3" in cfg.modes
    monkeypatch.setattr(form, "present", lambda name, role="target": False)
    assert form.starting_config().target == "embedded"


def test_labels_are_short_enough_not_to_be_cut_and_the_shadow_rate_is_explained(app_db):
    at = open_page("new_run")
    from engine.catalog import NAMED

    named = [o for o in at.selectbox(key="n_target").options + at.selectbox(key="n_draft").options if o in NAMED]
    assert all(len(form.label(o)) <= 48 for o in named)  # present or not: a select box shows about 48 characters
    for name in named:  # the longest case: not here yet
        assert len(form.label(name).split(" · ")[0] + " · not here: fetched first") <= 52
    assert "decoded a second time target-only" in at.number_input(key="n_shadow").help


def test_a_second_press_within_a_minute_warns_of_a_duplicate_before_queueing_it(app_db, monkeypatch):
    """Three Enter presses once queued four runs; the form submits on its button only (enter_to_submit off) and a
    run with the very same settings queued in the last minute is named first; pressing again queues it anyway."""
    monkeypatch.setenv("PHOENIX_AUTOSTART_WORKER", "0")
    before = len(app_db.list_runs())
    at = open_page("new_run")
    queue(at)
    assert not at.exception and len(app_db.list_runs()) == before + 1
    queue(at)
    assert len(app_db.list_runs()) == before + 1  # not queued: warned
    assert any("with these very settings was queued moments ago" in w.value for w in at.warning)
    queue(at)
    assert len(app_db.list_runs()) == before + 2  # pressed again on purpose: queued
    app_db.set_status(app_db.list_runs()[0].id, "done")  # a free worker finished it before the next press
    at = open_page("new_run")
    queue(at)
    assert len(app_db.list_runs()) == before + 2 and any("moments ago (done)" in w.value for w in at.warning)
    source = (Path(__file__).parents[1] / "app" / "views" / "new_run.py").read_text()
    assert 'st.form("new_run", enter_to_submit=False)' in source  # AppTest cannot press Enter; the flag is the fix


def test_every_named_head_counts_as_a_head_not_only_smollm2s():
    """The Qwen head re-queued from the README's table was refused as 'a draft model' by a check that knew one
    head by name."""
    from app.actions import check_draft_kind
    from engine.catalog import HEADS, NAMED, QWEN05

    for head in HEADS:
        assert "EAGLE-3 head" in NAMED[head].what
        check_draft_kind(BenchConfig(target="qwen2.5-coder-1.5b", draft=head, modes=["target", "eagle3_3"]), None)
    with pytest.raises(PhoenixError, match="is a draft model"):
        check_draft_kind(BenchConfig(target="qwen2.5-coder-1.5b", draft=QWEN05, modes=["eagle3_3"]), None)
