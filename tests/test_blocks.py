"""A decoder layer's two halves as one extension call each (engine.decode.blocks): the same bits as the runner's
per-op path for every token of a bf16 step of up to LINEAR_ROWS tokens, biases (Qwen2) included, and every forward
they cannot take (more tokens, fp32, partial rotary, a gradient, unfused layers) left to that path."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

import engine.decode.runner as runner_module
from engine.decode import blocks as B
from engine.decode import fast_attention as FA
from engine.decode.packed import fuse, pack
from engine.decode.runner import Runner

needs_kernel = pytest.mark.skipif(FA.kernel() is None, reason=f"no decode kernel here: {FA.describe()}")
SHAPE = dict(vocab_size=300, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
             num_key_value_heads=2, max_position_embeddings=256)  # fmt: skip


def fused_runner(model) -> Runner:
    model = model.eval().to(torch.bfloat16)
    if pack(model, "on").startswith("off"):
        pytest.skip("no oneDNN bf16 packing on this CPU: no fused groups")
    fuse(model)
    return Runner(model)


def forwards(runner: Runner) -> list[torch.Tensor]:
    """A prompt, then steps of 1, 3 and LINEAR_ROWS tokens: each one's logits and last hidden state."""
    torch.manual_seed(0)
    prompt = torch.randint(1, 300, (1, 40))
    steps = [torch.randint(1, 300, (1, n)) for n in (1, 3, FA.LINEAR_ROWS)]
    cache, out = DynamicCache(config=runner.config), []
    with torch.inference_mode():
        runner(input_ids=prompt, cache=cache, use_cache=True)
        for ids in steps:
            got = runner(input_ids=ids, cache=cache, use_cache=True, output_hidden_states=True)
            out += [got.logits, got.hidden_states[-1], got.hidden_states[1]]
    return out


@needs_kernel
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_a_layer_in_two_calls_gives_the_per_op_paths_bits(family, monkeypatch):
    torch.manual_seed(1)
    if family == "llama":
        runner = fused_runner(LlamaForCausalLM(LlamaConfig(**SHAPE)))
    else:  # Qwen2's q, k and v carry biases
        runner = fused_runner(Qwen2ForCausalLM(Qwen2Config(**SHAPE)))
    calls: list[int] = []
    real = B.Block.qkv
    monkeypatch.setattr(B.Block, "qkv", lambda self, x, cos, sin: calls.append(len(x)) or real(self, x, cos, sin))
    whole = forwards(runner)
    assert sorted(set(calls)) == [1, 3, FA.LINEAR_ROWS]  # every step's layers in two calls; the prompt (40) per op
    monkeypatch.setattr(runner_module, "blocks", lambda *a: None)
    per_op = forwards(runner)
    assert all(torch.equal(a, b) for a, b in zip(whole, per_op))


@needs_kernel
def test_what_the_two_calls_cannot_take_runs_per_op():
    torch.manual_seed(2)
    runner = fused_runner(LlamaForCausalLM(LlamaConfig(**SHAPE)))
    x = torch.zeros(4, 256, dtype=torch.bfloat16)
    cos = torch.ones(4, 1, 32, dtype=torch.bfloat16)
    with torch.inference_mode():
        assert B.blocks(runner, x, cos) is not None
        assert B.blocks(runner, torch.zeros(FA.LINEAR_ROWS + 1, 256, dtype=torch.bfloat16), cos) is None
        assert B.blocks(runner, x.float(), cos.float()) is None
        assert B.blocks(runner, x, cos[..., :16]) is None  # partial rotary
    with torch.enable_grad():
        assert B.blocks(runner, x, cos) is None  # training: the ops have no backward
    unfused = Runner(LlamaForCausalLM(LlamaConfig(**SHAPE)).eval().to(torch.bfloat16))  # not packed, not fused
    with torch.inference_mode():
        assert B.blocks(unfused, x, cos) is None


@needs_kernel
def test_profile_step_compares_the_served_step_with_the_blocks_off_and_with_onednns_gemm():
    """``benchmarks.profile_step --compare``: each path is what it says while it runs (blocks built, none, none and
    the extension's GEMM taking no call), the module's settings come back after, and every path gets its rounds."""
    from benchmarks import profile_step as P

    runner = fused_runner(LlamaForCausalLM(LlamaConfig(**SHAPE)))
    x, w = torch.randn(4, 256, dtype=torch.bfloat16), torch.randn(64, 256, dtype=torch.bfloat16)
    cos = torch.ones(4, 1, 32, dtype=torch.bfloat16)
    seen = {}
    with torch.inference_mode():
        for name in P.PATHS:
            with P.path(runner, name):
                seen[name] = (B.blocks(runner, x, cos) is not None, FA.linear(x, w, None) is not None)
        after = B.blocks(runner, x, cos) is not None
    want = {"served": (True, True), "extension": (True, True), "per-op": (False, True), "onednn": (False, False)}
    assert seen == want
    assert FA.LINEAR_ROWS == 16 and after  # restored
    with pytest.raises(SystemExit, match="unknown path"), P.path(runner, "fastest"):
        pass
    batch = P.rows_cache(runner, [20, 30])
    times = P.compare(runner, batch, list(P.PATHS), rounds=2, repeat=1)
    assert {n: len(t) for n, t in times.items()} == dict.fromkeys(P.PATHS, 2) and all(
        t > 0 for ts in times.values() for t in ts
    )
