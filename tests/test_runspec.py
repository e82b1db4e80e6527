"""One record of what ran (engine.runspec): every spelling of speculation Phoenix stored or accepts is an alias of
one grammar, two runs compare only where they measured the same work, and a run keeps its own record."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from engine import runspec
from engine.runspec import Speculation

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("spelling", "text"),
    [
        ("target", "off"),
        ("none", "off"),
        ({"drafter": "none"}, "off"),
        ("eagle3_3", "eagle3:3"),
        ("ngram_8", "ngram:8"),
        ("model_5", "model:5"),
        ("hybrid_16", "hybrid:16"),
        ("eagle3-conf_4", "eagle3:4 -conf"),
        ("bandit", "bandit:auto"),
        ("bandit:thompson", "bandit:auto thompson"),
        ("eagle3-k3", "eagle3:3"),
        ("model-auto", "model:auto"),
        ("draft-model-k2", "model:2"),
        ("draft-eagle3-k3", "eagle3:3"),
        ("ngram-k4-n2-m4", "ngram:4 -n2-m4"),
        ("none-eager", "off -eager"),
        ("phoenix-eagle3-auto_live", "eagle3:auto"),
        ("vllm-eagle3-k3_c8", "eagle3:3"),
        ({"drafter": "suffix", "k": 8}, "suffix:8"),
        ("eagle3:3", "eagle3:3"),
    ],
)
def test_every_spelling_is_an_alias_of_one_grammar(spelling, text):
    assert Speculation.parse(spelling).text() == text


def test_a_servers_own_drafter_fills_the_spellings_that_leave_it_out():
    assert Speculation.parse("auto", "eagle3").text() == "eagle3:auto"
    assert Speculation.parse("k3", "suffix").text() == "suffix:3"
    assert Speculation.parse({"k": 2}, "model").text() == "model:2"
    assert Speculation.parse("k0", "model").text() == "off"


def _load_run(run_id, engine="phoenix", level=4, cpu="CPU A", prompts="humaneval-test", cache="cold", **extra):
    cfg = {
        "load": {"engine": engine, "prompts": prompts, "limit": 16, "max_new_tokens": 64, "chat": True},
        "level": level,
        "request_rate": None,
        "cache_scenario": cache,
        "environment": {"cpu": cpu, "threads": 2},
        "figures": {"none": {}},
        **extra,
    }
    return SimpleNamespace(id=run_id, name=f"r c={level}", config=cfg, target="smollm2", draft=None, bench=None,
                           created_at=datetime(2026, 12, 5, tzinfo=UTC))  # fmt: skip


def test_comparable_names_the_first_field_of_the_work_that_differs():
    a = runspec.of(_load_run(1), "none")
    assert runspec.comparable(a, runspec.of(_load_run(2, engine="vllm"), "none")) is None  # another engine: a setting
    assert runspec.comparable(a, runspec.of(_load_run(3, level=8), "none")).startswith("load: c=4 against c=8")
    assert runspec.comparable(a, runspec.of(_load_run(4, cpu="CPU B"), "none")).startswith("cpu")
    assert runspec.comparable(a, runspec.of(_load_run(5, cache="warm: prompts re-sent"), "none")).startswith("cache")


def test_unequal_compute_is_labelled_not_refused():
    vllm = _load_run(2, engine="vllm", servers=[{"variant": "none", "cores": "0-1", "dtype": "bfloat16"}])
    llama = _load_run(
        3, engine="llamacpp", servers=[{"variant": "none", "command": "llama-server -m x.Q4_K_M.gguf -t 1"}]
    )
    a, b = runspec.of(vllm, "none"), runspec.of(llama, "none")
    assert runspec.comparable(a, b) is None
    said = runspec.compute_differs(a, b)
    assert any("cores: 0-1 against 1 threads" in s for s in said) and any("Q4_K_M" in s for s in said)


def test_a_run_keeps_its_record_and_reads_it_back_as_the_type():
    run = _load_run(1)
    run.config |= runspec.recorded(run, ["none"])
    run.config["load"]["engine"] = "edited later"  # the record, not a later edit, says what ran
    assert runspec.of(run, "none").engine == "phoenix"
    assert runspec.of(run, "none") == runspec.from_dict(run.config["run_spec"]["none"])
    with pytest.raises(ValueError, match="unknown fields"):
        runspec.from_dict({**run.config["run_spec"]["none"], "colour": "red"})


def test_the_series_key_leaves_out_versions_and_names():
    settings = {"max_batch": 16, "runner": "auto"}
    a = _load_run(1, server={"version": "abc", "settings": settings})
    b = _load_run(2, server={"version": "def", "settings": settings})
    b.name = "another sweep c=4"
    assert runspec.of(a, "none").key() == runspec.of(b, "none").key()


@pytest.mark.parametrize(
    ("typed", "lab", "load"),
    [
        ("off", "target", "none"),
        ("eagle3:3", "eagle3_3", "eagle3-k3"),
        ("ngram:8", "ngram_8", "ngram-k8"),
        ("model:auto", "model:auto", "model-auto"),
        ("none:0", "target", "none"),
        ("eagle3_3", "eagle3_3", "eagle3_3"),  # today's spellings pass through unchanged
        ("bandit:thompson", "bandit:thompson", "bandit:thompson"),
    ],
)
def test_the_one_grammar_is_accepted_where_modes_and_variants_are_typed(typed, lab, load):
    from engine.modes import lab_spelling, load_spelling

    assert lab_spelling(typed) == lab and load_spelling(typed) == load


def test_a_bench_config_takes_the_one_grammar_and_stores_the_labs_spelling():
    from engine.bench.config import BenchConfig, validate

    cfg = validate(BenchConfig(target="embedded", draft="embedded", drafter="eagle3", modes=["off", "ngram:4"]))
    assert cfg.modes == ["target", "ngram_4"]


def test_a_side_by_side_run_is_its_engines_own_setting_not_phoenixs_served_traffic():
    """`engines side-by-side` (one managed server per variant) as a run from before it kept its record stored it."""
    command = "llama-server -m /m/SmolLM2-135M-Instruct.Q4_1.gguf -t 2 -np 1 --spec-type draft-eagle3"
    config = {
        "serve_engines": {"engine": "llamacpp", "model": "smollm2", "prompts": "humaneval-test", "limit": 20,
                          "max_new_tokens": 96, "chat": True, "head": "smollm2-eagle3", "draft": "smollm2-draft"},
        "engine": {"engine": "llamacpp", "version": "b0-0c1e570"},
        "servers": [{"variant": "draft-eagle3-k2", "command": command}],
        "environment": {"cpu": "AMD EPYC (family 25, model 17)"},
    }  # fmt: skip
    run = SimpleNamespace(id=64, target="smollm2", draft=None, config=config, bench=None)
    spec = runspec.of(run, "llamacpp-draft-eagle3-k2_c1")
    assert (spec.engine, spec.load, spec.prompts, spec.cores) == ("llamacpp", "c=1", "humaneval-test x20", "2 threads")
    assert spec.target.label() == "smollm2 (Q4_1)" and spec.draft and spec.draft.name == "smollm2-eagle3"
    assert spec.speculation.text() == "eagle3:2" and spec.version == "b0-0c1e570"
    vllm = {**config, "serve_engines": {**config["serve_engines"], "engine": "vllm", "dtype": "bfloat16"}}
    vllm["servers"] = [{"variant": "none", "command": "python -m vllm.entrypoints.openai.api_server --enforce-eager"}]
    spec = runspec.of(SimpleNamespace(**{**vars(run), "config": vllm}), "vllm-none_c1")
    assert (spec.engine, spec.target.quantization, spec.runner, spec.draft) == ("vllm", "bfloat16", "eager", None)


def test_a_load_runs_spec_names_the_draft_each_engine_drafted_with():
    head = "/m/models/smollm2-eagle3"
    vllm = _load_run(
        1,
        engine="vllm",
        servers=[
            {"variant": "none", "speculative_config": None},
            {"variant": "eagle3-k3", "speculative_config": {"method": "eagle3", "model": head}},
        ],
    )
    assert runspec.of(vllm, "none").draft is None
    assert runspec.of(vllm, "eagle3-k3").draft == runspec.ModelCard("smollm2-eagle3")
    command = "llama-server -m t.gguf -md d.Q8_0.gguf"
    llama = _load_run(2, engine="llamacpp", servers=[{"variant": "draft-model-k3", "command": command}])
    assert runspec.of(llama, "draft-model-k3").draft == runspec.ModelCard("d.Q8_0.gguf", "Q8_0")
    phoenix = _load_run(3, server={"drafter": "eagle3", "draft": "smollm2-eagle3"})
    assert runspec.of(phoenix, "eagle3-auto").draft == runspec.ModelCard("smollm2-eagle3")
    assert runspec.of(phoenix, "ngram-k3").draft is None  # a model-free drafter drafts with no draft
    other = _load_run(4, server={"drafter": "eagle3", "draft": "another-head"})
    assert runspec.of(phoenix, "eagle3-auto").key() != runspec.of(other, "eagle3-auto").key()  # two heads, two series


def test_migration_0029_names_the_draft_in_a_load_runs_stored_spec(tmp_path):
    """A Phoenix load run stored before /health named the draft: its spec takes its server run's draft, and a
    stored spec then reads the same as one derived anew (one series, not two)."""
    import sqlalchemy as sa

    from db import migrate
    from db.store import Store

    url = f"sqlite:///{tmp_path / 'p.db'}"
    migrate.upgrade(url, "0028")
    load = _load_run(1, server={"run_id": 1, "drafter": "eagle3"})
    load.config |= runspec.recorded(load, ["none", "eagle3-auto"])
    assert load.config["run_spec"]["eagle3-auto"]["draft"] is None
    with sa.create_engine(url).begin() as conn:  # a server run and its load run, as 0028's Phoenix wrote them
        for rid, cfg, draft in ((1, {"phoenix_serve": {}}, "smollm2-eagle3"), (2, load.config, None)):
            conn.execute(
                sa.text(
                    "INSERT INTO runs (id, name, status, created_at, config, target, draft, progress_done, "
                    "progress_total, cancel_requested, archived) VALUES (:i, 'r c=4', 'done', '2026-12-01', :c, "
                    "'smollm2', :d, 0, 0, false, false)"
                ),
                {"i": rid, "c": json.dumps(cfg), "d": draft},
            )
    assert migrate.upgrade(url) == migrate.head()
    run = Store(url).get_run(2)
    stored = runspec.of(run, "eagle3-auto")
    assert stored.draft == runspec.ModelCard("smollm2-eagle3") and runspec.of(run, "none").draft is None
    derived = {k: v for k, v in run.config.items() if k != "run_spec"}
    fresh = SimpleNamespace(**{**vars(_load_run(2)), "config": derived})
    assert stored.key() == runspec.of(fresh, "eagle3-auto").key()


def test_a_phoenix_load_points_series_holds_what_its_server_served_before():
    """Phoenix's tuner learns its cost cells from every level and setting its server served before: a point of a
    server's second sweep, or of another level order or setting set, is another series (runs #1051-#1059 shared one
    with points of another load history); the work is still the same, so the two still compare."""

    def point(index=1, before=0, order="1,2,4,8,16", variants=("none", "eagle3-auto")):
        run = _load_run(1, server={"served_before": before}, level_index=index, variants=list(variants))
        run.config["load"]["concurrency"] = order
        return runspec.of(run, "none")

    a = point()
    assert a.history == "a fresh server; levels 1,2,4,8,16, point 2; settings none,eagle3-auto"
    assert point().key() == a.key()
    for other in (point(before=330), point(order="16,8,4,2,1"), point(index=3), point(variants=("none",))):
        assert other.key() != a.key() and runspec.comparable(a, other) is None
    vllm = runspec.of(_load_run(2, engine="vllm", level_index=1), "none")
    assert vllm.history == "" and "history" not in vllm.key_text()  # its servers keep no tuner between points
    stored = _load_run(3, server={"served_before": 0}, level_index=1, variants=["none", "eagle3-auto"])
    stored.config["load"]["concurrency"] = "1,2,4,8,16"
    record = runspec.recorded(stored, ["none"])
    del record["run_spec"]["none"]["history"]  # a record written before the spec kept the history
    stored.config |= record
    assert runspec.of(stored, "none").key() == a.key()
    assert runspec.of(_load_run(4), "none").history == "history not recorded; levels not recorded; settings "
