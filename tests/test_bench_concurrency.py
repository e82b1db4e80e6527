"""``engine bench --concurrency N``: a run's modes decoded N prompts at a time through the server's engine core,
every output identical to target-only, the same per-pass counts as a single stream where the drafter's proposals
depend on the text alone, and modes the batched engine does not run refused in one line."""

from __future__ import annotations

import pytest
from helpers import bench_cfg

from engine.bench.config import validate
from engine.bench.run import execute
from engine.bench.setup import create_run
from engine.errors import PhoenixError

MODES = ["target", "model_3", "ngram_4", "suffix_8"]


def rows_of(store, cfg, decoder):
    run = create_run(store, validate(cfg))
    assert execute(store, run.id, cfg, decoder=decoder, progress=False) == "done"
    return {(r.prompt_id, r.mode): r for r in store.requests(run.id)}


def test_a_run_at_concurrency_n_decodes_together_and_counts_as_a_single_stream_does(
    store, tiny_dirs, prompt_file, decoder
):
    single = rows_of(store, bench_cfg(tiny_dirs, prompt_file, limit=5, modes=MODES), decoder)
    batched = rows_of(store, bench_cfg(tiny_dirs, prompt_file, limit=5, modes=MODES, concurrency=3), decoder)
    assert set(batched) == set(single) and len(batched) >= 3 * len(MODES)
    for key, row in batched.items():
        assert row.identical, key
        assert row.output_sha256 == single[key].output_sha256
        if key[1] in ("model_3", "ngram_4"):  # proposals that depend on the text alone: the very same passes
            assert (row.passes, row.proposed, row.accepted) == (
                single[key].passes,
                single[key].proposed,
                single[key].accepted,
            )
    assert max(r.batch_size or 0 for r in batched.values()) > 1  # rows really shared forwards
    assert all(r.batch_size == 1 for r in single.values() if r.batch_size is not None)


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(concurrency=0), "must be in 1..64"),
        (dict(concurrency=65), "must be in 1..64"),
        (dict(concurrency=4, modes=["target", "bandit"]), "bandit run at --concurrency 1"),
        (dict(concurrency=4, modes=["target", "hf_2"]), "hf_2 run at --concurrency 1"),
        (dict(concurrency=4, modes=["target", "model-conf_4"]), "model-conf_4 run at --concurrency 1"),
        (dict(concurrency=4, modes=["target", "ngram_4"], compile=True), "drop --compile"),
        (dict(concurrency=4, modes=["target", "ngram_4"], cache="static"), "drop --compile"),
    ],
)
def test_what_the_batched_engine_does_not_run_is_refused_before_the_run(tiny_dirs, change, message):
    with pytest.raises(PhoenixError, match=message) as exc:
        validate(bench_cfg(tiny_dirs, "humaneval-test", **change))
    assert exc.value.field == "concurrency"


def test_a_sampled_run_checks_every_mode_token_for_token_at_any_concurrency(store, tiny_dirs, prompt_file, decoder):
    """Sampled modes: each prompt draws with one seed in every mode, so speculation's outputs equal target-only's
    (fp32), alone or batched, and the run's config keeps the sampling; another --seed draws other outputs."""
    modes = ["target", "model_3", "ngram_4", "suffix_8", "bandit"]
    sampled = dict(temperature=0.8, top_p=0.95, limit=4, max_new_tokens=16)
    single = rows_of(store, bench_cfg(tiny_dirs, prompt_file, modes=modes, **sampled), decoder)
    batched = rows_of(store, bench_cfg(tiny_dirs, prompt_file, modes=modes[:-1], concurrency=3, **sampled), decoder)
    greedy = rows_of(store, bench_cfg(tiny_dirs, prompt_file, modes=["target"], limit=4, max_new_tokens=16), decoder)
    other = rows_of(store, bench_cfg(tiny_dirs, prompt_file, modes=["target"], seed=7, **sampled), decoder)
    assert all(r.identical for r in single.values()) and all(r.identical for r in batched.values())
    for key, row in batched.items():
        assert row.output_sha256 == single[key].output_sha256, key
    targets = [k for k in single if k[1] == "target"]
    assert any(single[k].output_sha256 != greedy[k].output_sha256 for k in targets)  # it really sampled
    assert any(single[k].output_sha256 != other[k].output_sha256 for k in targets)  # and the seed matters
    assert sum(r.accepted for r in single.values()) > 0
    run = store.get_run(next(iter(single.values())).run_id)
    assert run.config["bench"]["temperature"] == 0.8 and run.config["bench"]["top_p"] == 0.95


def test_sampling_options_are_checked_before_the_run(tiny_dirs):
    for change, message in (
        (dict(temperature=-1.0), "--temperature must be in 0..100"),
        (dict(top_p=0.0), "--top-p must be in"),
        (dict(temperature=0.7, modes=["target", "hf_2"]), "decodes greedily here"),
    ):
        with pytest.raises(PhoenixError, match=message):
            validate(bench_cfg(tiny_dirs, "humaneval-test", **change))
