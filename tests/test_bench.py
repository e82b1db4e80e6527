"""Benchmark runner: modes side by side, identity checks, interruption and resume."""

from __future__ import annotations

import pytest
from helpers import CorruptingDecoder, bench_cfg, interrupt_after

from engine.bench.report import summaries
from engine.bench.run import execute
from engine.bench.setup import create_run
from engine.policies.wrappers import FallbackConfig

ALL_MODES = ["target", "model_2", "ngram_2", "hf_2", "bandit"]


def test_every_mode_runs_the_same_prompts_and_every_request_is_recorded(store, tiny_dirs, prompt_file, decoder):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=ALL_MODES)
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, decoder=decoder, progress=False) == "done"
    rows = store.requests(run.id, include_warmup=True)
    assert sum(r.warmup for r in rows) == 5
    real = [r for r in rows if not r.warmup]
    assert len(real) == 15
    for mode in cfg.modes:
        assert [r.prompt_id for r in real if r.mode == mode] == ["p0", "p1", "p2"]
    assert all(r.identical for r in real)
    assert all(len(r.trace_id) == 32 for r in real)
    assert len(store.bandit_steps(run.id)) == 3
    info = store.get_run(run.id)
    assert (info.status, info.progress_done, info.progress_total) == ("done", 15, 15)
    assert info.config["bench"]["modes"] == cfg.modes and "torch" in info.config["environment"]
    assert (info.config["bench"]["device"], info.config["bench"]["dtype"]) == ("cpu", "float32")  # auto, resolved
    fixed = [r for r in real if r.mode == "model_2"]
    assert all(sum(p.proposed for p in r.positions) == r.proposed for r in fixed)
    by = {m.mode: m for m in summaries(store, run.id)}
    assert by["target"].speedup.median == 1.0 and by["model_2"].n == 3 and by["model_2"].speedup.n == 3


def test_a_forced_mismatch_is_recorded_with_its_first_diverging_position(store, tiny_dirs, prompt_file, decoder):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_2"], limit=2)
    run = create_run(store, cfg)
    execute(store, run.id, cfg, decoder=CorruptingDecoder(decoder.pair), progress=False)
    fixed = [r for r in store.requests(run.id) if r.mode == "model_2"]
    assert [(r.identical, r.diverged_at) for r in fixed] == [(False, 3), (False, 3)]
    target = [r for r in store.requests(run.id) if r.mode == "target"]
    assert all(r.identical for r in target)


def test_without_target_mode_a_shadow_sample_fills_identity(store, tiny_dirs, prompt_file, decoder):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["model_2"], shadow_rate=1.0)
    run = create_run(store, cfg)
    execute(store, run.id, cfg, decoder=decoder, progress=False)
    assert [r.identical for r in store.requests(run.id)] == [True, True, True]
    cfg0 = bench_cfg(tiny_dirs, prompt_file, modes=["model_2"], shadow_rate=0.0)
    run0 = create_run(store, cfg0)
    execute(store, run0.id, cfg0, decoder=decoder, progress=False)
    assert [r.identical for r in store.requests(run0.id)] == [None, None, None]


@pytest.mark.parametrize("bandit_mode", ["bandit", "bandit:model_based:pass"])
def test_an_interrupted_run_keeps_its_rows_and_resumes_without_repeats(
    store, tiny_dirs, prompt_file, decoder, bandit_mode
):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", bandit_mode], limit=4)
    run = create_run(store, cfg)
    with pytest.raises(KeyboardInterrupt):
        execute(store, run.id, cfg, decoder=decoder, progress=False, on_request=interrupt_after(5))
    assert store.get_run(run.id).status == "interrupted"
    kept = store.requests(run.id)
    assert len(kept) == 5
    assert execute(store, run.id, cfg, decoder=decoder, progress=False) == "done"
    rows = store.requests(run.id)
    assert len(rows) == 8
    assert len({(r.prompt_id, r.mode) for r in rows}) == 8
    assert [s.t for _, s in store.bandit_steps(run.id)] == [0, 1, 2, 3]
    assert store.get_run(run.id).progress_done == 8


def test_cancel_stops_at_a_request_boundary_and_keeps_rows(store, tiny_dirs, prompt_file, decoder):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target"], limit=4)
    run = create_run(store, cfg)
    calls = iter([False, False, True])
    assert execute(store, run.id, cfg, decoder=decoder, progress=False, should_stop=lambda: next(calls)) == "cancelled"
    assert len(store.requests(run.id)) == 2
    assert store.get_run(run.id).status == "cancelled"


def test_several_policies_run_side_by_side_and_each_step_records_its_policy(store, tiny_dirs, prompt_file, decoder):
    modes = [
        "target",
        "bandit:model_based:pass",
        "bandit:ucb1",
        "bandit:ema_hysteresis:pass",
        "bandit:contextual_thompson",
    ]
    cfg = bench_cfg(
        tiny_dirs, prompt_file, modes=modes, limit=4, max_new_tokens=20, fallback=FallbackConfig(enabled=True)
    )
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, decoder=decoder, progress=False) == "done"
    rows = store.requests(run.id)
    assert all(r.identical for r in rows)  # k changing between passes still reproduces target-only exactly
    steps = store.bandit_steps(run.id)
    assert sorted({s.policy for _, s in steps}) == ["contextual_thompson", "ema_hysteresis", "model_based", "ucb1"]
    by_mode = {}
    for seq, s in steps:
        by_mode.setdefault(next(r.mode for r in rows if r.seq == seq), []).append(s.t)
    assert all(ts == [0, 1, 2, 3] for ts in by_mode.values())
    assert store.get_run(run.id).config["bench"]["fallback"]["enabled"] is True


@pytest.mark.parametrize(
    "modes,policy,match",
    [
        (["bandit:greedy"], "epsilon_greedy", "unknown policy 'greedy'"),
        (["bandit"], "softmax", "unknown policy 'softmax' in --policy"),
        (["bandit:ucb1:token"], "epsilon_greedy", "unknown mode"),
    ],
)
def test_unknown_policies_are_refused_before_anything_runs(store, tiny_dirs, prompt_file, modes, policy, match):
    from engine.bench.config import validate
    from engine.errors import PhoenixError

    cfg = bench_cfg(tiny_dirs, prompt_file, modes=modes, policy=policy)
    with pytest.raises(PhoenixError, match=match) as err:
        validate(cfg)
    assert err.value.field in ("modes", "policy")  # a form puts the message beside that field
    assert store.list_runs() == []


def test_a_run_keeps_each_prompts_text_so_the_requests_page_shows_it_after_the_file_is_gone(
    store, tiny_dirs, prompt_file, decoder, monkeypatch
):
    import json
    from pathlib import Path

    from apptest import open_page

    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_2"], limit=2)
    run = create_run(store, cfg)
    execute(store, run.id, cfg, decoder=decoder, progress=False)
    texts = {json.loads(line)["id"]: json.loads(line)["prompt"] for line in Path(prompt_file).read_text().splitlines()}
    assert store.prompt_text(run.id, "p1") == texts["p1"] and store.prompt_text(run.id, "p3") is None  # limit 2
    Path(prompt_file).unlink()  # the file moves away: the run still shows what it sent
    monkeypatch.setenv("PHOENIX_DB", store.url)
    at = open_page("requests", run=run.id)
    shown = [c.value.strip() for c in at.code]
    assert texts["p0"].strip() in shown or texts["p1"].strip() in shown
