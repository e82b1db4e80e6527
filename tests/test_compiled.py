"""The static cache and --compile: the same greedy outputs as the growing cache, every architecture and k; compile
time, graphs and recompiles recorded; a platform where compile fails runs eager and says why."""

from __future__ import annotations

import pytest
import torch
from helpers import bench_cfg
from transformers import StaticCache

from engine.bench.run import execute
from engine.bench.setup import create_run
from engine.decode import compiled
from engine.decode.compiled import CACHE_BUCKET, StaticCaches, bucket
from engine.decode.decoder import Decoder
from engine.decode.loading import load_pair

PROMPTS = ["def add(a, b):\n    return a + b\n", "class Stack:\n    def __init__(self):\n        self.items = []\n"]


@pytest.fixture(scope="module")
def pairs(tiny_dirs):
    return {arch: load_pair(d["target"], d["near"], "cpu", "float32") for arch, d in tiny_dirs.items()}


# each architecture once in the full suite; the working loop (-m fast) keeps llama, the code path is the same
ARCHS = ["llama", pytest.param("qwen3", marks=pytest.mark.e2e), pytest.param("mistral", marks=pytest.mark.e2e)]


@pytest.mark.parametrize("arch", ARCHS)
def test_a_static_cache_gives_the_growing_caches_outputs_for_every_k(pairs, arch):
    dynamic, static = Decoder(pairs[arch]), Decoder(pairs[arch], cache="static")
    accepted, rejected = 0, 0
    for prompt in PROMPTS:
        ids = dynamic.encode(prompt)
        reference = dynamic.run(ids, 0, 40).output_ids
        assert static.run(ids, 0, 40).output_ids == reference
        for drafter in ("model", "ngram", "suffix"):
            for k in (1, 3, 8):  # every k on the growing cache is test_spec's; here the write position's moves
                stats = static.run(ids, k, 40, drafter)
                assert stats.output_ids == reference, f"{arch} {drafter} k={k} diverged on the static cache"
                accepted, rejected = accepted + stats.accepted, rejected + stats.proposed - stats.accepted
    assert accepted > 0 and rejected > 0  # the write position moved forward and back


def test_k_changing_between_passes_on_a_static_cache_still_equals_target_only(pairs):
    dec = Decoder(pairs["llama"], cache="static")
    ids = dec.encode(PROMPTS[1])
    reference = Decoder(pairs["llama"]).run(ids, 0, 40).output_ids
    schedule = iter([3, 0, 1, 5, 2, 0, 8] * 20)
    assert dec.run(ids, 4, 40, "model", choose_k=lambda s: next(schedule)).output_ids == reference


def test_one_cache_per_size_bucket_is_reused_and_emptied_between_requests(pairs):
    caches, model = StaticCaches(), pairs["qwen3"].target
    first = caches.get(model, 10)
    model(input_ids=torch.tensor([[1, 2, 3]]), cache=first, use_cache=True)
    again = caches.get(model, CACHE_BUCKET)
    assert again is first and int(again.get_seq_length()) == 0
    assert caches.get(model, CACHE_BUCKET + 1) is not first and bucket(CACHE_BUCKET + 1) == 2 * CACHE_BUCKET


def test_a_platform_where_compile_fails_runs_eager_and_says_why(pairs, monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("no C++ compiler here\nsecond line")

    monkeypatch.setattr(compiled.torch, "compile", refuse)
    dec = Decoder(pairs["qwen3"])
    stats = dec.compile(4, 200)
    assert not stats.compiled and stats.error == "RuntimeError: no C++ compiler here"
    ids = dec.encode(PROMPTS[0])
    assert dec.run(ids, 4, 30, "model").output_ids == Decoder(pairs["qwen3"]).run(ids, 0, 30).output_ids


@pytest.mark.compile
def test_compiled_decoding_equals_eager_and_adds_no_graph_inside_measured_requests(pairs):
    eager, dec = Decoder(pairs["qwen3"]), Decoder(pairs["qwen3"])
    stats = dec.compile(4, 200)
    assert stats.compiled and stats.error is None and stats.warmup_s > 0 and stats.graphs > 0
    after_warmup = compiled.graph_count()
    for prompt in PROMPTS:
        ids = eager.encode(prompt)
        reference = eager.run(ids, 0, 40).output_ids
        for k in (0, 1, 4):
            assert dec.run(ids, k, 40, "model" if k else "none").output_ids == reference
    assert compiled.finish(stats, after_warmup)["recompiles"] == 0


@pytest.mark.compile
def test_frozen_weights_decoding_equals_eager_in_fp32_and_adds_no_graph_inside_measured_requests(pairs):
    """Freezing folds and prepacks the weights into the graphs: a different kernel, the same greedy outputs."""
    eager, dec = Decoder(pairs["llama"]), Decoder(pairs["llama"])
    stats = dec.compile(4, 200, freeze=True)
    assert stats.compiled and stats.frozen and stats.error is None and stats.graphs > 0
    after_warmup = compiled.graph_count()
    for prompt in PROMPTS:
        ids = eager.encode(prompt)
        reference = eager.run(ids, 0, 40).output_ids
        for drafter, k in (("none", 0), ("model", 1), ("model", 4), ("ngram", 4)):
            assert dec.run(ids, k, 40, drafter).output_ids == reference, f"{drafter} k={k} diverged when frozen"
    assert compiled.finish(stats, after_warmup)["recompiles"] == 0


@pytest.mark.compile
def test_a_frozen_bf16_run_records_its_compile_and_counts_drift_against_bf16_target_only(store, tiny_dirs, prompt_file):
    """bf16 is not exact: what a run owes is the count, every request checked against target-only in bf16."""
    from engine.bench.run import load_decoder

    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_2"], freeze=True, dtype="bfloat16", limit=2)
    cfg.compile = True  # as validate() sets it: --freeze implies --compile
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, decoder=load_decoder(cfg), progress=False) == "done"
    info = store.get_run(run.id)
    assert info.config["compile"]["compiled"] and info.config["compile"]["frozen"]
    assert info.config["compile"]["recompiles"] == 0 and info.config["bench"]["dtype"] == "bfloat16"
    requests = [r for r in store.requests(run.id) if not r.warmup]
    assert len(requests) == 4 and all(r.identical is not None for r in requests)


def test_a_static_cache_run_keeps_every_output_identical(store, tiny_dirs, prompt_file, decoder):
    cfg = bench_cfg(tiny_dirs, prompt_file, modes=["target", "model_2", "ngram_2"], cache="static")
    run = create_run(store, cfg)
    assert execute(store, run.id, cfg, decoder=decoder, progress=False) == "done"
    assert decoder.cache == "static" and decoder.cache_positions > 0
    assert all(r.identical for r in store.requests(run.id))
    decoder.cache, decoder.cache_positions = "dynamic", 0  # the fixture is shared by the module


def test_a_one_token_forward_runs_as_two_and_leaves_the_cache_and_outputs_of_one(pairs):
    """Compiled pads a single token to two (a size-1 length is a graph of its own, and the slowest frozen); the
    copy must leave no trace: the logits and hidden states of one position, the cache one token longer."""
    model = pairs["llama"].target
    wrapper = compiled.Compiled(model, 4)
    wrapper.fn = model.forward  # the padding's bookkeeping, without minutes of compiling
    caches = StaticCaches()
    with torch.inference_mode():
        prompt, token = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[9]])
        plain, padded = caches.get(model, 64), StaticCache(config=model.config, max_cache_len=64)
        for cache in (plain, padded):
            model(input_ids=prompt, cache=cache, use_cache=True)
        want = model(input_ids=token, cache=plain, use_cache=True, output_hidden_states=True)
        got = wrapper(token, cache=padded, logits_to_keep=1, output_hidden_states=True)
        # a two-token GEMM rounds differently from a one-token one: equal to fp32 rounding, not bit for bit
        assert got.logits.shape == want.logits[:, -1:].shape
        assert torch.allclose(got.logits, want.logits[:, -1:], atol=1e-5)
        assert all(
            g.shape[1] == 1 and torch.allclose(g, w, atol=1e-5) for g, w in zip(got.hidden_states, want.hidden_states)
        )
        assert int(padded.get_seq_length()) == int(plain.get_seq_length()) == 5
        after = torch.tensor([[3, 4]])  # the next forward writes over the copy's slot and sees only real tokens
        assert torch.allclose(
            model(input_ids=after, cache=padded, use_cache=True).logits,
            model(input_ids=after, cache=plain, use_cache=True).logits,
            atol=1e-5,
        )
