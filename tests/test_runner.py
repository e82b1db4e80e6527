"""Phoenix's runner (engine.decode.runner) against transformers' modeling, the reference: the same logits and hidden
states in fp32 for every Llama-family architecture, alone, chunked, batched with holes and padding, and through the
prefix cache; greedy speculation through it exact at every batch and drafter; anything else runs on transformers."""

from __future__ import annotations

import pytest
import torch
from test_serve_batch import PROMPTS, decode_all, references
from transformers import DynamicCache

from engine.decode.batch import BatchCache, accept_batch, verify_batch
from engine.decode.decoder import Decoder
from engine.decode.intake import prefill_together
from engine.decode.loading import load_pair, prepare
from engine.decode.runner import Runner, unsupported, use_runner

# every family the runner reproduces: Granite's multipliers, OLMo2's norms after each block and over the whole
# projection, Phi3's fused projections with partial rotary are each their own math
ARCHS = ["llama", "qwen2", "olmo2"] + [
    pytest.param(a, marks=pytest.mark.e2e) for a in ("qwen3", "mistral", "granite", "phi3")
]
KIN = {"granite", "olmo2", "phi3"}  # built from test_architectures' configs


def pair_of(tiny_dirs, arch: str):
    return load_pair(tiny_dirs[arch]["target"], tiny_dirs[arch]["near"], "cpu", "float32")


def target_of(tiny_dirs, tiny_tokenizer, arch: str):
    """The architecture's tiny target with its norm weights moved off 1, so a norm in the wrong place, or weighted
    in the wrong order, shows in the logits."""
    from test_architectures import _model

    model = _model(arch, tiny_tokenizer, 1) if arch in KIN else pair_of(tiny_dirs, arch).target
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    return model


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_prompt_then_steps_give_transformers_logits_and_hidden_states(tiny_dirs, tiny_tokenizer, arch):
    model = target_of(tiny_dirs, tiny_tokenizer, arch)
    runner = Runner(model)
    assert unsupported(model) is None
    prompt, steps = torch.tensor([[5, 9, 31, 7, 100, 3, 8]]), [torch.tensor([[11]]), torch.tensor([[4, 77, 2]])]
    with torch.inference_mode():
        ours, theirs = DynamicCache(config=model.config), DynamicCache(config=model.config)
        a = model(input_ids=prompt, cache=theirs, use_cache=True, output_hidden_states=True)
        b = runner(input_ids=prompt, cache=ours, use_cache=True, output_hidden_states=True)
        assert close(a.logits, b.logits) and len(a.hidden_states) == len(b.hidden_states)
        assert all(close(x, y) for x, y in zip(a.hidden_states, b.hidden_states))
        for ids in steps:
            a = model(input_ids=ids, cache=theirs, use_cache=True, logits_to_keep=1)
            b = runner(input_ids=ids, cache=ours, use_cache=True, logits_to_keep=1)
            assert b.logits.shape == a.logits.shape and close(a.logits, b.logits)
        assert ours.get_seq_length() == theirs.get_seq_length() == 11


@pytest.mark.parametrize("arch", ARCHS)
def test_rows_with_holes_and_padding_give_what_transformers_gives_for_each(tiny_dirs, tiny_tokenizer, arch):
    """Prompts of three lengths prefilled together (left padding), then a verify of rows with 4, 2 and 0 drafts
    (right padding), then one row's rejection masked: the flattened forward sees none of the padding."""
    model = target_of(tiny_dirs, tiny_tokenizer, arch)
    out = {}
    for name, forward in (("transformers", model), ("runner", Runner(model))):
        with torch.inference_mode():
            rows = prefill_together(forward, [list(range(3, 10)), [40, 41, 42], list(range(60, 72))], (0, 1))
            assert rows is not None
            batch = BatchCache.empty(torch.device("cpu"))
            for _, _, cache in rows:
                batch.add_row(cache, cache.layers[0].keys.shape[-2])
            drafted = [[5, 6, 7, 8], [9, 10], []]
            picks, feats = verify_batch(forward, batch, [[1] + d for d in drafted], (0, 2))
            accept_batch(batch, drafted, picks, feats)
            again, _ = verify_batch(forward, batch, [[2], [3], [4]])
        out[name] = ([r[0] for r in rows], [r[1] for r in rows], picks, feats, again)
    ref, got = out["transformers"], out["runner"]
    assert ref[0] == got[0] and ref[2] == got[2] and ref[4] == got[4]
    assert all(close(x, y) for x, y in zip(ref[1], got[1])) and all(close(x, y) for x, y in zip(ref[3], got[3]))


def test_a_prompt_prefilled_beside_others_gives_what_it_gives_alone(tiny_dirs, tiny_tokenizer):
    """A prefill on an empty cache attends row by row with SDPA's causal path (engine.decode.runner._causal): a
    prompt right-aligned among longer ones gets its first token, taps and keys as alone (the linear layers see
    another token count, so fp32's last bits may differ)."""
    runner = Runner(target_of(tiny_dirs, tiny_tokenizer, "qwen2"))
    prompts = [list(range(3, 10)), [40, 41, 42], list(range(60, 72))]
    with torch.inference_mode():
        together = prefill_together(runner, prompts, (0, 1))
        alone = [prefill_together(runner, [p], (0, 1)) for p in prompts]
    assert together is not None
    for (first, feats, cache), single in zip(together, alone):
        assert single is not None
        assert first == single[0][0] and close(feats, single[0][1])
        assert close(cache.layers[-1].keys, single[0][2].layers[-1].keys)


@pytest.mark.parametrize("arch", ["qwen2", pytest.param("olmo2", marks=pytest.mark.e2e)])
def test_calls_run_as_one_forward_give_what_each_gives_alone(tiny_dirs, tiny_tokenizer, arch):
    """``forward_parts``: a batch's verify (rows of different lengths and widths: a mask), a fresh prompt and a
    prompt's second chunk in one forward give each call's logits, hidden states and keys as its own forward does."""
    runner = Runner(target_of(tiny_dirs, tiny_tokenizer, arch))
    config = runner.config

    def calls():
        batch = BatchCache.empty(torch.device("cpu"))
        for prompt in ([5, 9, 31, 7], [100, 3]):
            cache = DynamicCache(config=config)
            runner(input_ids=torch.tensor([prompt]), cache=cache)
            batch.add_row(cache, len(prompt))
        rows = [[11, 12, 13], [4]]
        n = 3
        mask = torch.cat([batch.valid, torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)], dim=1).long()
        positions = torch.tensor(batch.lengths)[:, None] + torch.arange(n)[None, :]
        ids = torch.tensor([r + [0] * (n - len(r)) for r in rows])
        later = DynamicCache(config=config)
        runner(input_ids=torch.tensor([[8, 6, 4]]), cache=later)
        return [
            dict(input_ids=ids, cache=batch.cache, attention_mask=mask, position_ids=positions),
            dict(input_ids=torch.tensor([[40, 41, 42, 43, 44]]), cache=DynamicCache(config=config), logits_to_keep=1),
            dict(input_ids=torch.tensor([[2, 9]]), cache=later, logits_to_keep=1),
        ]

    with torch.inference_mode():
        together = runner.forward_parts(calls(), True)
        alone = [runner.forward_parts([c], True)[0] for c in calls()]
    with pytest.raises(ValueError, match="growing caches only"):
        runner.forward_parts([dict(input_ids=torch.tensor([[1]]), cache=None)])
    for a, b in zip(together, alone):
        assert a.logits.shape == b.logits.shape and close(a.logits, b.logits)
        assert a.hidden_states is not None and b.hidden_states is not None
        assert all(close(x, y) for x, y in zip(a.hidden_states, b.hidden_states))
        assert close(a.cache.layers[-1].keys, b.cache.layers[-1].keys)


@pytest.mark.parametrize("mix", [True, False])
def test_prompts_joining_a_running_batch_ride_in_its_verify_and_every_row_stays_exact(tiny_dirs, monkeypatch, mix):
    """The scheduler's mixed step (engine.decode.mixed): prompts' chunks go into the running rows' verify forward
    (with ``mix``; without it, forwards of their own), and every row's greedy output is target-only's."""
    pair = prepare(pair_of(tiny_dirs, "qwen2"), "off", "phoenix")
    dec = Decoder(pair)
    refs = references(dec)
    sizes: list[int] = []
    runs = Runner._run  # every forward of the runner, one call or several
    monkeypatch.setattr(Runner, "_run", lambda self, c, h: sizes.append(len(c)) or runs(self, c, h))
    reqs, done, _ = decode_all(dec, "model", 3, seed=7, budget=9, long_prefill=5, mix=mix)
    for j, r in enumerate(reqs):
        assert done[r.id].stats.output_ids == refs[j % len(PROMPTS)][: r.max_new_tokens], f"request {j}"
    assert (max(sizes) > 1) == mix


@pytest.mark.parametrize("max_batch", [1, 3, pytest.param(8, marks=pytest.mark.e2e)])
@pytest.mark.parametrize("drafter", ["model", "ngram", "suffix", "choice", "none"])
@pytest.mark.parametrize("arch", ["qwen2", pytest.param("llama", marks=pytest.mark.e2e)])
def test_every_row_through_the_runner_equals_single_stream_target_only(tiny_dirs, arch, drafter, max_batch):
    pair = prepare(pair_of(tiny_dirs, arch), "off", "phoenix")
    assert isinstance(pair.target, Runner) and isinstance(pair.draft, Runner) and pair.runner == "phoenix"
    dec = Decoder(pair)
    refs = references(dec)
    reqs, done, _ = decode_all(dec, drafter, max_batch, seed=max_batch, budget=9, long_prefill=5)
    for j, r in enumerate(reqs):
        assert done[r.id].stats.output_ids == refs[j % len(PROMPTS)][: r.max_new_tokens], f"{drafter} request {j}"
    plain = Decoder(pair_of(tiny_dirs, arch))  # transformers' modeling: the same tokens
    assert references(plain) == refs


def test_the_runner_drafts_and_verifies_with_packed_layers_and_a_head(tiny_dirs, tmp_path):
    from test_eagle3 import random_head

    from engine.decode.eagle3 import save_head

    d = tiny_dirs["qwen2"]
    plain = Decoder(load_pair(d["target"], None, "cpu", "float32"))
    counts: dict[int, int] = {}
    for p in PROMPTS:
        for tok in plain.run(plain.encode(p), 0, 30).output_ids:
            counts[tok] = counts.get(tok, 0) + 1
    save_head(random_head(plain.pair.target, sorted(sorted(counts, key=lambda t: -counts[t])[:3])), tmp_path / "h")
    pair = prepare(load_pair(d["target"], str(tmp_path / "h"), "cpu", "float32"), "on", "auto")
    assert pair.packed.startswith("packed ") and pair.runner == "phoenix" and not isinstance(pair.draft, Runner)
    dec = Decoder(pair)
    for p in PROMPTS:
        ids = dec.encode(p)
        want = dec.run(ids, 0, 30, timed=False).output_ids
        for drafter, k in (("eagle3", 3), ("hybrid", 5)):
            assert dec.run(ids, k, 30, drafter, timed=False).output_ids == want


def test_an_architecture_outside_the_family_runs_on_transformers_and_says_why(tiny_dirs):
    pair = pair_of(tiny_dirs, "llama")
    pair.target.config.hidden_act = "gelu"  # not the Llama family's gated SiLU
    assert unsupported(pair.target) == "activation gelu"
    assert use_runner(pair, "auto") == "transformers (activation gelu)" and not isinstance(pair.target, Runner)
    with pytest.raises(ValueError, match="--runner phoenix: activation gelu"):
        use_runner(pair, "phoenix")
    pair.target.config.hidden_act = "silu"


@pytest.mark.compile
def test_compiled_ops_give_the_same_tokens(tiny_dirs):
    pair = prepare(pair_of(tiny_dirs, "qwen2"), "off", "compiled")
    assert pair.runner == "phoenix, compiled ops"
    dec, plain = Decoder(pair), Decoder(pair_of(tiny_dirs, "qwen2"))
    for p in PROMPTS:
        ids = dec.encode(p)
        want = plain.run(ids, 0, 24, timed=False).output_ids
        assert dec.run(ids, 0, 24, timed=False).output_ids == want
        assert dec.run(ids, 3, 24, "ngram", timed=False).output_ids == want


@pytest.mark.parametrize(("heads", "kv_heads", "n"), [(9, 3, 1), (9, 3, 4), (12, 2, 1), (12, 2, 5), (4, 4, 3)])
def test_grouped_query_attention_in_bf16_is_sdpa_over_the_shared_kv_heads(heads, kv_heads, n):
    """bf16 and fp16 feed the query heads that share a KV head to SDPA as one longer query (its enable_gqa path
    expanded the KV heads on every call: 7x slower at 8 rows on the CPU); the answer is attention over the shared
    heads with every row's own mask, as fp32's reference computes it."""
    from types import SimpleNamespace

    import torch.nn.functional as F

    from engine.decode.runner import Runner

    torch.manual_seed(heads * 10 + n)
    B, S, d = 5, 40, 64
    q = torch.randn(B, heads, n, d, dtype=torch.bfloat16)
    k, v = (torch.randn(B, kv_heads, S, d, dtype=torch.bfloat16) for _ in range(2))
    mask = torch.rand(B, 1, n, S) > 0.3
    mask[..., -n:] = True  # a query sees itself
    got = Runner._sdpa(SimpleNamespace(kv_heads=kv_heads, scale=d**-0.5), q, k, v, mask)
    want = F.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=mask, scale=d**-0.5, enable_gqa=heads != kv_heads
    )
    assert got.shape == (B, heads, n, d) and got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max() < 2e-2  # bf16 rounding of O(1) values, not a wrong head or row
    shuffled = Runner._sdpa(SimpleNamespace(kv_heads=kv_heads, scale=d**-0.5), q, k.flip(1), v.flip(1), mask)
    assert kv_heads == 1 or kv_heads == heads or (shuffled.float() - want).abs().max() > 0.1  # the head pairing matters
